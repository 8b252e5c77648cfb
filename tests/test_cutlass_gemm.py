"""CUTLASS's Hopper GEMMs with the layer's scales inside
(csrc/backends/cuda/scaled_gemm.h, cutlass_scaled_gemm.cuh): int8 (and FP8,
test_fp8.py) tensor-core GEMMs with the scales (per channel, and per token),
bias, the activation and the conversion to y's type inside the epilogue, y
written once. gemm_qlinear.cc times the int8 form against cuBLASLt's at plan
build and keeps the faster; TWINFER_INT8_GEMM=cutlass forces it where it
applies, =cublaslt never takes it.

What runs without a GPU: the build lists its kernels (CMake compiles them
for sm_90a from the nvidia-cutlass wheel's headers), and the models and
NumPy references below on the simulated device (the CPU's kernels). On an
H100/H200, each output type on CUTLASS against the same references;
elsewhere the cuda tests skip."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from test_device_int8 import _sixteen_channel_chain
from test_smoothquant import token_quantize

F32 = np.float32

# What plans meet (int8 plans keep their float rest in float16, FP8 plans
# theirs; float32 for imported QDQ models in float32 plans): bfloat16 y has
# no kernel (nvcc's time in CI), and such layers keep cuBLASLt.
KERNELS = {"cutlass int8 sm90 (float16 out)", "cutlass int8 sm90 (float32 out)", "cutlass int8 sm90 (int8 out)",
           "cutlass fp8 sm90 (float16 out, fast accumulation)"}


@pytest.mark.cuda_build
def test_the_build_has_the_cutlass_kernels():
    # nvidia-cutlass is a CUDA build requirement (tools/build_backend): a CUDA
    # build without these kernels lost its headers (CMake says so).
    assert set(twinfer.build_info()["cutlass_gemm"]) == KERNELS


# The simulated device (the CPU's kernels, placed as CUDA places them) runs
# the same models and references in CI; the kernel names are checked on cuda.
DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]


def _load(m, device, **kw):
    if device == "cuda":
        _hopper()
        return twinfer.load(m, device="cuda", allow_cpu_fallback=False, **kw)
    return twinfer.load(m, device="sim", sim_coverage="cuda", allow_cpu_fallback=False, **kw)


def _hopper():
    """Skips unless the GPU is compute capability 9.0 (sm_90a code)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the CUTLASS kernels run on compute capability 9.0 only")


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "cutlass", inputs, outputs, [numpy_helper.from_array(np.asarray(v), k)
                                                             for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _weights(rng, k, n):
    w = rng.standard_normal((k, n)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    return np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8), w_scale


def _qmatmul(inputs, attrs=None):
    node = helper.make_node("QMatMul", inputs, ["y"], domain="com.twinfer")
    for k, v in (attrs or {}).items():
        node.attribute.append(helper.make_attribute(k, v))
    return node


def _cutlass_rows(eng, shape):
    return [r.kernel for r in eng.kernel_report(shape) if r.op.endswith("QMatMul") or r.op.endswith("QConv")]


def _act(name, v):
    if name == "Relu":
        return np.maximum(v, 0)
    if name == "Sigmoid":
        return 1 / (1 + np.exp(-v))
    if name == "Gelu":
        from math import erf
        return 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))
    return v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", [None, "Relu", "Sigmoid"])
def test_qmatmul_int8_output(device, act, rng, monkeypatch):
    # int8 x with a per-tensor scale -> int8 y (scale, bias, activation, then
    # the division by y_scale and rounding, in CUTLASS's epilogue; a Sigmoid
    # shows the activation comes before y_scale): within one step of the
    # exact result, nearly all equal.
    monkeypatch.setenv("TWINFER_INT8_GEMM", "cutlass")
    M, K, N = 53, 80, 48
    w_q, w_scale = _weights(rng, K, N)
    bias = rng.standard_normal(N).astype(F32)
    y_scale = 0.08 if act != "Sigmoid" else 0.004
    inits = {"xs": F32(0.05), "w": w_q, "ws": w_scale, "b": bias, "ys": F32(y_scale), "yz": np.int8(0)}
    node = _qmatmul(["x", "xs", "", "w", "ws", "b", "ys", "yz"], {"activation": act} if act else None)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.INT8, ["M", K])],
               [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    eng = _load(m, device)
    (name,) = _cutlass_rows(eng, {"x": (M, K)})
    assert device != "cuda" or name.startswith("cutlass int8 sm90 (int8 out)"), name
    x = rng.integers(-127, 128, (M, K)).astype(np.int8)
    v = _act(act, (x.astype(np.int64) @ w_q.astype(np.int64)) * w_scale.astype(np.float64) * 0.05 + bias)
    want = np.clip(np.rint(v / y_scale), -128, 127)
    got = eng.run({"x": x})["y"].numpy()
    assert got.dtype == np.int8
    diff = np.abs(got.astype(np.float64) - want)
    assert diff.max() <= 1 and np.mean(diff == 0) > 0.97, (diff.max(), np.mean(diff == 0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out, act", [("float32", None), ("float16", None), ("bfloat16", None),
                                      ("float16", "Gelu")])
def test_qmatmul_per_token_float_output(device, out, act, rng, monkeypatch):
    # Float x quantized per token (row scales into CUTLASS's epilogue), y in
    # float32 / float16 / bfloat16; float16 saturates to +-65504, a NaN bias
    # stays NaN (as our own epilogue and core/half.h do it). Against NumPy.
    monkeypatch.setenv("TWINFER_INT8_GEMM", "cutlass")
    M, K, N = 37, 45, 48  # K padded to 48 inside
    w_q, w_scale = _weights(rng, K, N)
    bias = rng.standard_normal(N).astype(F32)
    bias[5] = np.nan
    if out == "float16":
        w_scale[3] *= 1e6  # a column far past float16's range
    dtype = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[out]
    attrs = {"x_per_token": 1}
    if act:
        attrs["activation"] = act
    if out != "float32":
        attrs["out_dtype"] = dtype
    node = _qmatmul(["x", "", "", "w", "ws", "b"], attrs)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
               [helper.make_tensor_value_info("y", dtype, None)], {"w": w_q, "ws": w_scale, "b": bias})
    eng = _load(m, device)
    (name,) = _cutlass_rows(eng, {"x": (M, K)})
    if device == "cuda":
        want_name = "cublasLt" if out == "bfloat16" else f"cutlass int8 sm90 ({out} out)"
        assert name.startswith(want_name), name
        if out == "bfloat16":  # forced, but refused: no kernel writes bfloat16
            assert "not CUTLASS: no CUTLASS kernel multiplies int8 into bfloat16" in name, name
    x = (rng.standard_normal((M, K)) * rng.uniform(0.05, 20, (M, 1))).astype(F32)
    q, s = token_quantize(x)
    cpu = _act(act, (q.astype(np.int64) @ w_q.astype(np.int64)) * w_scale.astype(np.float64) * s[:, None] + bias)
    if out == "float16":
        assert np.abs(cpu[:, 3]).max() > 65504  # the column meant to saturate does
        cpu = np.clip(cpu, -65504, 65504)
    got = eng.run({"x": x})["y"].numpy()
    if out == "bfloat16":
        got = got.astype(F32)
    got = got.astype(np.float64)
    assert np.isnan(got[:, 5]).all() and not np.isinf(got).any()
    ok = np.ones(N, bool)
    ok[5] = False
    scale = np.abs(cpu[:, ok & (np.arange(N) != 3)]).max()  # the saturated column's size aside
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[out]
    np.testing.assert_allclose(got[:, ok], cpu[:, ok], rtol=tol, atol=tol * scale)


@pytest.mark.cuda
def test_int8_convolutions_on_cutlass(rng, monkeypatch):
    # The convolutions' one-GEMM form (x's rows for the 1x1, im2col for the
    # 3x3s) on CUTLASS, int8 NHWC y with ReLU; against the CPU's oneDNN int8
    # kernels on the simulated device.
    _hopper()
    m = _sixteen_channel_chain(rng)
    data = [{"x": rng.standard_normal((2, 16, 9, 11)).astype(F32)} for _ in range(4)]
    calib = twinfer.load(m, device="cpu", precision="int8", calibration=data, progress=False).calibration
    monkeypatch.setenv("TWINFER_INT8_GEMM", "cutlass")
    monkeypatch.setenv("TWINFER_INT8_CONV", "cublaslt")  # the GEMM form, not cuDNN's
    eng = twinfer.load(m, device="cuda", precision="int8", calibration=calib, allow_cpu_fallback=False)
    names = _cutlass_rows(eng, {"x": (3, 16, 9, 11)})
    assert sum(n.startswith("cutlass int8 sm90 (int8 out)") for n in names) >= 2, names
    sim = twinfer.load(m, device="sim", precision="int8", calibration=calib, sim_coverage="cuda")
    x = rng.standard_normal((3, 16, 9, 11)).astype(F32)
    got, want = eng.run({"x": x})["y"].numpy(), sim.run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=0.02, atol=0.05 * np.abs(want).max())


@pytest.mark.cuda
def test_the_faster_form_is_kept_and_named(rng, monkeypatch):
    # By default both forms run at build and the kernel name gives both times;
    # =cublaslt leaves CUTLASS out. The two plans agree.
    _hopper()
    M, K, N = 512, 768, 256
    w_q, w_scale = _weights(rng, K, N)
    node = _qmatmul(["x", "", "", "w", "ws", "b"], {"x_per_token": 1})
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
               {"w": w_q, "ws": w_scale, "b": rng.standard_normal(N).astype(F32)})
    monkeypatch.delenv("TWINFER_INT8_GEMM", raising=False)
    timed = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
    (name,) = _cutlass_rows(timed, {"x": (M, K)})
    assert "timed: CUTLASS" in name and "cuBLASLt" in name, name
    monkeypatch.setenv("TWINFER_INT8_GEMM", "cublaslt")
    lt = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
    (name,) = _cutlass_rows(lt, {"x": (M, K)})
    assert not name.startswith("cutlass"), name
    x = rng.standard_normal((M, K)).astype(F32)
    a, b = timed.run({"x": x})["y"].numpy(), lt.run({"x": x})["y"].numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())
