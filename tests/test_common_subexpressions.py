"""Common subexpressions (graph/passes/common_subexpressions.cc): a node that
repeats an earlier one (op, attributes, inputs) runs once, small equal
constants become one. Checked: the answers stay onnxruntime's, the repeated
nodes are gone from the plan (against the same engine with the pass switched
off), and what must not merge does not (random generators, graph outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import run_ort


def _repeated_chains(layers, n):
    """Each layer rebuilds the same key mask from a length input (as onnxruntime-
    genai's attention layers do from seqlens_k), with constants of its own."""
    nodes, inits = [], []
    h = "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(np.array(0, np.int64), f"zero_{i}"),
                  numpy_helper.from_array(np.arange(n, dtype=np.int64), f"pos_{i}"),
                  numpy_helper.from_array(np.array(-1e4, np.float32), f"neg_{i}"),
                  numpy_helper.from_array(np.array(0.0, np.float32), f"nil_{i}")]
        nodes += [
            helper.make_node("Add", ["length", f"zero_{i}"], [f"n_{i}"]),
            helper.make_node("Less", [f"pos_{i}", f"n_{i}"], [f"keep_{i}"]),
            helper.make_node("Where", [f"keep_{i}", f"nil_{i}", f"neg_{i}"], [f"m_{i}"]),
            helper.make_node("MatMul", [h, "w"], [f"p_{i}"]),
            helper.make_node("Add", [f"p_{i}", f"m_{i}"], [f"h_{i}"]),
        ]
        h = f"h_{i}"
    return nodes, inits, h


def test_repeated_mask_chains_run_once(rng, monkeypatch):
    n = 7
    nodes, inits, last = _repeated_chains(4, n)
    w = (rng.standard_normal((n, n)) * 0.3).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "w"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", n]),
                                       helper.make_tensor_value_info("length", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    feeds = {"x": rng.standard_normal((3, n)).astype(np.float32), "length": np.array(4, np.int64)}
    counts = {}
    for enabled in ("1", "0"):
        monkeypatch.setenv("TWINFER_COMMON_SUBEXPRESSIONS", enabled)
        for device in ("cpu", "sim"):
            e = twinfer.load(model, device=device)
            np.testing.assert_allclose(e.run(feeds)[last].numpy(), run_ort(model, feeds)[0], rtol=1e-5, atol=1e-3)
            counts[enabled, device] = len([r for r in e.kernel_report(feeds) if r.backend != "copy"])
    for device in ("cpu", "sim"):
        assert counts["1", device] <= counts["0", device] - 9, counts  # three of the four masks are gone


def test_random_generators_and_graph_outputs_stay_apart(rng):
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["u1"]), helper.make_node("RandomUniformLike", ["x"], ["u2"]),
             helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"])]
    outs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("u1", "u2", "a", "b")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])], outs)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    x = rng.standard_normal(64).astype(np.float32)
    got = twinfer.load(model, device="cpu").run({"x": x})
    assert not np.array_equal(got["u1"].numpy(), got["u2"].numpy())
    np.testing.assert_array_equal(got["a"].numpy(), np.maximum(x, 0))
    np.testing.assert_array_equal(got["b"].numpy(), np.maximum(x, 0))
