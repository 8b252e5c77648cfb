"""Special values and empty tensors through the kernels and passes a hunt
found wrong: NaN and inf keep their meaning (onnxruntime, NumPy and torch
agree on the expected values), and an empty sequence plans without a crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import make_model as _model
from onnx_helpers import run_ort

DEVICES = ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_celu_keeps_nan(rng):
    x = rng.standard_normal(9).astype(np.float32)
    x[[1, 4]] = np.nan
    x[6], x[7] = np.inf, -np.inf
    m = _model([helper.make_node("Celu", ["x"], ["y"], alpha=1.5)], [_vi("x", [9])], [_vi("y", [9])])
    got = twinfer.load(m, device="cpu").run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert np.isnan(got[[1, 4]]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_query_row_gives_nan_not_zeros(device, rng):
    """A NaN in q (or a score that overflows) makes its row's scores all NaN:
    the softmax and the output are NaN, as onnxruntime and torch give; the row
    must not be taken for a fully masked one, which gives zeros."""
    b, h, s, d = 2, 2, 3, 4
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
    q[0, 1, 2, 0] = np.nan
    m = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
               [_vi("q", [b, h, s, d]), _vi("k", [b, h, s, d]), _vi("v", [b, h, s, d])], [_vi("y", None)],
               opset=23)
    feeds = {"q": q, "k": k, "v": v}
    got = twinfer.load(m, device=device).run(feeds)["y"].numpy()
    want = run_ort(m, feeds)[0]
    assert np.isnan(want[0, 1, 2]).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # NaN where it is NaN, equal elsewhere


@pytest.mark.parametrize("device", DEVICES)
def test_an_empty_sequence_through_attention_views_plans_and_runs(device):
    """Reshape/Transpose views of an attention block at sequence length 0: the
    view pass used to divide by a size-0 piece (SIGFPE, the interpreter killed).
    Run in a child process so a crash fails the test instead of ending pytest."""
    code = textwrap.dedent(f"""
        import numpy as np, twinfer
        from onnx import helper as oh, TensorProto as TP
        E, H = 16, 2
        c = lambda n, v: oh.make_tensor(n, TP.INT64, [len(v)], v)
        nodes = [
            oh.make_node("Reshape", ["x", "s4"], ["x4"]),
            oh.make_node("Transpose", ["x4"], ["q"], perm=[0, 2, 1, 3]),
            oh.make_node("Transpose", ["x4"], ["kt"], perm=[0, 2, 3, 1]),
            oh.make_node("MatMul", ["q", "kt"], ["sc"]),
            oh.make_node("Mul", ["sc", "scale"], ["ss"]),
            oh.make_node("Softmax", ["ss"], ["p"], axis=-1),
            oh.make_node("MatMul", ["p", "q"], ["o"]),
            oh.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
            oh.make_node("Reshape", ["ot", "s3"], ["y"]),
        ]
        g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["B", "S", E])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["B", "S", E])],
                          [c("s4", [0, 0, H, E // H]), c("s3", [0, 0, E]),
                           oh.make_tensor("scale", TP.FLOAT, [], [0.35])])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]); m.ir_version = 8
        kw = {{"sim_coverage": "cuda"}} if {device!r} == "sim" else {{}}
        e = twinfer.load(m.SerializeToString(), device={device!r}, **kw)
        x = np.ones((2, 3, E), np.float32)
        assert e.run({{"x": x}})["y"].numpy().shape == (2, 3, E)
        y = e.run({{"x": np.ones((2, 0, E), np.float32)}})["y"].numpy()
        assert y.shape == (2, 0, E), y.shape
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-2000:])
