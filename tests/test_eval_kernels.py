"""Kernels the host evaluator keeps from one run to the next
(csrc/runtime/eval_kernels.h). A value-dependent tail is evaluated node by
node on every run; its kernels are now built once per shape and reused, with
the run's own large values read when the kernel runs, never built in. Every
run is checked against NumPy on fresh data, so a kernel that kept an earlier
run's values would fail."""

from __future__ import annotations

import threading

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import twinfer

F = TensorProto.FLOAT


def _model(w: np.ndarray):
    """coords = NonZero(x > 0)ᵀ (a value-dependent count K), then
    h = relu(coords · w) [K, 16], m = h · (z * 2) [K, 16] (z: a second input,
    so m's B is this run's value, not a weight), y = sum(m, 0), and the
    count reshaped by a computed shape."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["coords_i"], perm=[1, 0]),
        helper.make_node("Cast", ["coords_i"], ["coords"], to=F),
        helper.make_node("MatMul", ["coords", "w"], ["proj"]),
        helper.make_node("Relu", ["proj"], ["h"]),
        helper.make_node("Mul", ["z", "two"], ["z2"]),
        helper.make_node("MatMul", ["h", "z2"], ["m"]),
        helper.make_node("ReduceSum", ["m", "axis0"], ["y"], keepdims=0),
        helper.make_node("Shape", ["h"], ["hs"]),
        helper.make_node("Reshape", ["h", "hs"], ["h_again"]),
        helper.make_node("ReduceMax", ["h_again"], ["top"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(2, np.float32), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    g = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", F, [9, 7]),
                                          helper.make_tensor_value_info("z", F, [16, 16])],
                          [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("top", F, None)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _reference(x, z, w):
    coords = np.argwhere(x > 0).astype(np.float32)
    h = np.maximum(coords @ w, 0)
    m = h @ (z * 2)
    return m.sum(0), (h.max() if h.size else np.float32(-np.inf))


def _x_with(rng, positives):
    """A [9, 7] input with exactly `positives` elements above 0."""
    x = -rng.random((9, 7)).astype(np.float32) - 0.1
    x.flat[rng.permutation(63)[:positives]] = rng.random(positives).astype(np.float32) + 0.1
    return x


def _check(e, x, z, w):
    out = e.run({"x": x, "z": z})
    y, top = _reference(x, z, w)
    np.testing.assert_allclose(out["y"].numpy(), y, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["top"].numpy(), top, rtol=1e-6)


def test_kernels_are_reused_and_never_keep_a_runs_values(rng):
    w = rng.standard_normal((2, 16)).astype(np.float32)
    e = twinfer.load(_model(w))
    for _ in range(4):  # the same count: the same shapes, new data each run
        _check(e, _x_with(rng, 20), rng.standard_normal((16, 16)).astype(np.float32), w)
    s = e.stats()
    assert s["eval_kernels_reused"] > 0, s
    built = s["eval_kernels_built"]
    for k in (5, 33, 5):  # new counts: new kernels, then one kept from a recent run
        _check(e, _x_with(rng, k), rng.standard_normal((16, 16)).astype(np.float32), w)
    assert e.stats()["eval_kernels_built"] > built


def test_what_is_held_stays_bounded(rng):
    w = rng.standard_normal((2, 16)).astype(np.float32)
    e = twinfer.load(_model(w))
    held = []
    for k in range(1, 41):  # a new count every run
        _check(e, _x_with(rng, k), rng.standard_normal((16, 16)).astype(np.float32), w)
        held.append(e.stats()["eval_kernels_held"])
    # Kernels unused for 4 runs go: what is held stops growing.
    assert max(held[10:]) <= max(held[:10]) * 2, held


def test_threads_share_the_kept_kernels(rng):
    w = rng.standard_normal((2, 16)).astype(np.float32)
    e = twinfer.load(_model(w))
    cases = [(_x_with(rng, k), rng.standard_normal((16, 16)).astype(np.float32)) for k in [12, 12, 30, 12] * 4]
    errors = []

    def work(part):
        try:
            for x, z in part:
                _check(e, x, z, w)
        except Exception as ex:  # surfaced below
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(cases[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_loop_kernels_body_keeps_its_kernels_across_iterations(rng):
    """A while loop (its body computes the condition: never unrolled) whose
    body multiplies its state by a weight: every iteration after the first
    takes the kept MatMul kernel, with that iteration's state, never an
    earlier one's."""
    w = (0.5 * rng.standard_normal((8, 8))).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s", "w"], ["sw"]),
         helper.make_node("Tanh", ["sw"], ["s_out"]),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Less", ["i1", "limit"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s", F, [3, 8])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", F, [3, 8])])
    g = helper.make_graph([helper.make_node("Loop", ["", "true", "x"], ["y"], body=body)], "while",
                          [helper.make_tensor_value_info("x", F, [3, 8])], [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(True), "true"),
                           numpy_helper.from_array(np.array(1, np.int64), "one"),
                           numpy_helper.from_array(np.array(6, np.int64), "limit")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    e = twinfer.load(m.SerializeToString())
    for _ in range(3):
        x = rng.standard_normal((3, 8)).astype(np.float32)
        s = x
        for _ in range(6):  # the body runs for i = 0..5 (i + 1 < 6 stops after the sixth)
            s = np.tanh(s @ w)
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), s, rtol=1e-5, atol=1e-6)
    assert "Loop" in {r.op for r in e.kernel_report({"x": (3, 8)})}
