"""The package imports, reports its build, and runs a small model correctly."""

import re

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import twinfer


def _mlp(rng, d_in=13, d_hidden=29, d_out=7):
    w1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32)
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", d_in])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", d_out])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, (w1, b1, w2)


def test_build_info_reports_the_build():
    info = twinfer.build_info()
    assert info["version"] == twinfer.__version__
    assert info["cpu_blas"].startswith("oneDNN")
    assert isinstance(info["cuda_compiled"], bool)
    assert "Conv" in info["ops"] and "MatMul" in info["ops"]
    assert twinfer.cuda_available() in (True, False)
    # cuBLASLt / cuDNN: a version when their wheels are installed (they answer
    # without a GPU), else None with the reason; never an import failure.
    for lib, key in (("cublasLt", "cublaslt"), ("cudnn", "cudnn")):
        if info[key] is None:
            assert info["cuda_libraries"][lib]
        else:
            assert re.fullmatch(r"\d+\.\d+\.\d+", info[key]) and lib not in info["cuda_libraries"]
    # cuDNN's frontend (header-only, a CUDA build requirement): its version, or None.
    assert info["cudnn_frontend"] is None or re.fullmatch(r"\d+\.\d+\.\d+", info["cudnn_frontend"])
    if info["cuda_compiled"]:
        assert {"Add", "Cast", "Relu", "Where"} <= set(info["cuda_ops"])
        if info["cublaslt"] and info["cudnn"]:
            # Every entry point the kernels take from the libraries resolves (no GPU needed).
            assert twinfer._core.cuda_symbol_problems() == []
    else:
        assert info["cuda_ops"] == [] and info["cublaslt"] is None


def test_the_simulated_device_runs_a_model(rng):
    # In every build (the CPU-only one too): the GPU runtime's stand-in.
    model, (w1, b1, w2) = _mlp(rng)
    engine = twinfer.load(model, device="sim")
    x = rng.standard_normal((3, 13)).astype(np.float32)
    for _ in range(3):
        y = engine.run({"x": x})["y"].numpy()
        np.testing.assert_allclose(y, np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)


def test_sim_as_cuda_needs_the_cuda_backend(rng):
    # sim_coverage="cuda" places nodes by the CUDA kernel registry: a CUDA build
    # puts the MLP wholly on the device; a host-only build says why it cannot
    # (it used to place everything on the CPU without a word).
    model, _ = _mlp(rng)
    if twinfer.build_info()["cuda_compiled"]:
        engine = twinfer.load(model, device="sim", sim_coverage="cuda", allow_cpu_fallback=False)
        assert {r.backend for r in engine.kernel_report({"x": (2, 13)})} == {"sim"}
    else:
        with pytest.raises(twinfer.DeviceError, match="no CUDA backend"):
            twinfer.load(model, device="sim", sim_coverage="cuda")


def test_mlp_matches_numpy(rng):
    model, (w1, b1, w2) = _mlp(rng)
    engine = twinfer.load(model, device="cpu")
    assert engine.device == "cpu" and engine.precision == "fp32"
    assert engine.inputs[0].shape == ("batch", 13)
    for batch in (1, 5):
        x = rng.standard_normal((batch, 13)).astype(np.float32)
        expected = np.maximum(x @ w1 + b1, 0) @ w2
        y = engine.run({"x": x})["y"].numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(engine(x).numpy(), expected, rtol=1e-4, atol=1e-4)
