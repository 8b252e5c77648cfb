"""FP8 (E4M3) GEMMs: precision="fp8" and FP8 QDQ models.

The reference for E4M3 rounding is the ONNX reference evaluator's
QuantizeLinear -> DequantizeLinear to float8e4m3fn (round to nearest even,
saturated), not our own code: a NumPy emulation of each FP8 GEMM built on it
checks com.twinfer::FP8MatMul as the simulated device runs it (the CPU
reference kernel, placed as CUDA places it), and on a GPU the cuBLASLt FP8
kernel against the simulated device. FP8 QDQ models are checked against
onnxruntime on the CPU (where their Q/DQ stay) and on the device (where they
become FP8MatMul)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import twinfer
from conftest import SIM_AS_CUDA
from twinfer.testing import sim_options

F32 = np.float32
DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
E4M3_MAX = 448.0


def _e4m3(x, scale):
    """x rounded to E4M3 steps of `scale`, as ONNX's reference evaluator
    quantizes (saturating) and dequantizes."""
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        "rt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(scale, F32), "s"),
         helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [0.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(m).run(None, {"x": np.asarray(x, F32)})[0]


def _mlp(rng, k, hidden, n, gemm):
    """x[.., k] -> MatMul+Add (or Gemm) -> Relu -> MatMul+Add -> y."""
    w1 = (rng.standard_normal((k, hidden)) / np.sqrt(k)).astype(F32)
    b1 = rng.standard_normal(hidden).astype(F32) * 0.1
    w2 = (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(F32)
    b2 = rng.standard_normal(n).astype(F32) * 0.1
    if gemm:  # Gemm with transB: weights stored [N, K]
        nodes = [helper.make_node("Gemm", ["x", "w1t", "b1"], ["h"], "fc1", transB=1)]
        inits = {"w1t": np.ascontiguousarray(w1.T), "b1": b1}
        x_shape = ["m", k]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["mm1"], "fc1"), helper.make_node("Add", ["mm1", "b1"], ["h"])]
        inits = {"w1": w1, "b1": b1}
        x_shape = [2, "m", k]
    nodes += [helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["mm2"], "fc2"),
              helper.make_node("Add", ["mm2", "b2"], ["y"])]
    inits.update(w2=w2, b2=b2)
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, name) for name, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m, (w1, b1, w2, b2)


def _fp8_gemm(x, amax, w, b):
    """One FP8 GEMM as precision="fp8" defines it: per-tensor scales amax/448
    for x (from calibration) and for w (its own), float32 sums."""
    ws = np.abs(w).max() / E4M3_MAX
    xs = amax / E4M3_MAX
    return _e4m3(x, xs) @ _e4m3(w, ws) + b


@pytest.mark.cuda_build
@pytest.mark.parametrize("gemm", [False, True])
def test_precision_fp8_matches_an_e4m3_emulation(gemm):
    rng = np.random.default_rng(11)
    k, hidden, n = 45, 83, 29  # odd sizes: K and N padded to 16 on the GPU
    m, (w1, b1, w2, b2) = _mlp(rng, k, hidden, n, gemm)
    shape = (37, k) if gemm else (2, 19, k)
    calib = [rng.standard_normal(shape).astype(F32) * 2 for _ in range(4)]
    eng = twinfer.load(m, device="sim", sim_coverage="cuda", precision="fp8", calibration=calib,
                       allow_cpu_fallback=False, progress=False)
    rows = eng.kernel_report({"x": shape})
    fp8 = [r for r in rows if r.op.endswith("FP8MatMul")]
    assert len(fp8) == 2 and all(r.backend == "sim" for r in fp8), rows

    # The calibration's ranges, computed here in float32 from the same data.
    amax_x = max(np.abs(c).max() for c in calib)
    amax_r = max(np.abs(np.maximum(c @ w1 + b1, 0)).max() for c in calib)
    x = rng.standard_normal(shape).astype(F32) * 2
    # What is not an FP8 GEMM runs in fp16: x arrives as fp16, h and y are
    # stored as fp16.
    f16 = lambda a: np.asarray(a, np.float16).astype(F32)
    h = f16(np.maximum(_fp8_gemm(f16(x), amax_x, w1, b1), 0))
    want = f16(_fp8_gemm(h, amax_r, w2, b2))
    got = eng.run({"x": x})["y"].numpy().astype(np.float64)
    # Summation order may move an fp16 rounding of h, and so its E4M3 step,
    # for a few elements; all the rest agree to fp16 precision.
    err = np.abs(got - want)
    assert err.max() <= 0.03 * np.abs(want).max(), err.max()
    assert np.mean(err <= 1e-3 * np.abs(want) + 1e-4) > 0.99

    fp32 = twinfer.load(m, device="cpu").run({"x": x})["y"].numpy()
    cos = np.dot(got.ravel(), fp32.ravel()) / np.linalg.norm(got) / np.linalg.norm(fp32)
    assert cos > 0.995, cos


@pytest.mark.cuda_build
def test_fp8_keep_float_and_uncalibrated_layers_stay_in_float():
    rng = np.random.default_rng(3)
    m, _ = _mlp(rng, 24, 40, 8, gemm=False)
    calib = [rng.standard_normal((2, 5, 24)).astype(F32)]
    names = [n.node for n in twinfer.load(m, device="sim", sim_coverage="cuda", precision="fp8",
                                          calibration=calib, progress=False).kernel_report({"x": (2, 5, 24)})
             if n.op.endswith("FP8MatMul")]
    assert len(names) == 2
    eng = twinfer.load(m, device="sim", sim_coverage="cuda", precision="fp8", calibration=calib,
                       keep_float=[names[1]], progress=False)
    ops = {r.node: r.op for r in eng.kernel_report({"x": (2, 5, 24)})}
    assert ops[names[0]].endswith("FP8MatMul") and ops[names[1]].endswith("MatMul"), ops
    assert not ops[names[1]].endswith("FP8MatMul")


def test_fp8_needs_a_device_and_calibration():
    m, _ = _mlp(np.random.default_rng(0), 8, 8, 8, gemm=False)
    calib = [np.ones((2, 3, 8), F32)]
    with pytest.raises(twinfer.InvalidArgumentError, match="fp8.*CPU"):
        twinfer.load(m, device="cpu", precision="fp8", calibration=calib, progress=False)
    with pytest.raises(twinfer.InvalidArgumentError, match="calibration"):
        twinfer.load(m, device="sim", precision="fp8")


def test_fp8_needs_ada_or_newer_and_a_saved_engine_is_checked_where_it_loads(tmp_path):
    # The simulated device reports the compute capability it is told: 8.0 (an
    # A100) and 8.6 have no E4M3 tensor cores, 8.9 (Ada) and 9.0 do.
    with pytest.raises(twinfer.InvalidArgumentError, match=r"major\*10\+minor"), sim_options(compute_capability=9):
        pass
    rng = np.random.default_rng(3)
    m, _ = _mlp(rng, 24, 16, 8, gemm=False)
    calib = [rng.standard_normal((2, 3, 24)).astype(F32) for _ in range(2)]
    kw = dict(precision="fp8", calibration=calib, progress=False)
    with sim_options(compute_capability=80), pytest.raises(twinfer.InvalidArgumentError, match=r"8\.9.*is 8\.0"):
        twinfer.load(m, device="sim", **kw)
    eng = twinfer.load(m, device="sim", **kw)
    x = rng.standard_normal((2, 5, 24)).astype(F32)
    want = eng.run({"x": x})["y"].numpy()
    path = tmp_path / "mlp_fp8.twinfer"
    eng.save(path)
    with sim_options(compute_capability=86), pytest.raises(twinfer.InvalidArgumentError, match=r"is 8\.6"):
        twinfer.load(path, device="sim")
    with sim_options(compute_capability=89):
        np.testing.assert_array_equal(twinfer.load(path, device="sim").run({"x": x})["y"].numpy(), want)


@pytest.mark.cuda_build
def test_fp8_qdq_model_before_ada_keeps_its_qdq_and_its_fused_engine_is_refused(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(8)
    m = _fp8_qdq_model(rng, 29, 17, gemm=False)
    x = rng.standard_normal((9, 29)).astype(F32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with sim_options(compute_capability=80):
        a100 = twinfer.load(m, device="sim", sim_coverage="cuda")
        ops = [r.op for r in a100.kernel_report({"x": x.shape})]
        assert not any(op.endswith("FP8MatMul") for op in ops), ops
        log = a100.stats()["passes"]
        assert any("fuse_fp8_qdq: skipped, compute capability 8.0" in line for line in log), log
        np.testing.assert_allclose(a100.run({"x": x})["y"].numpy(), want, rtol=1e-5, atol=1e-4)
    h100 = twinfer.load(m, device="sim", sim_coverage="cuda")
    assert any(r.op.endswith("FP8MatMul") for r in h100.kernel_report({"x": x.shape}))
    path = tmp_path / "qdq_fp8.twinfer"
    h100.save(path)
    with sim_options(compute_capability=80), pytest.raises(twinfer.InvalidArgumentError, match=r"8\.9.*is 8\.0"):
        twinfer.load(path, device="sim", sim_coverage="cuda")


def _fp8_qdq_model(rng, k, n, gemm):
    """A model an FP8 quantizer writes: x -> Q/DQ(e4m3, per tensor) ->
    MatMul (or Gemm transB) with DQ(e4m3 weights) -> + bias -> Relu."""
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(F32)
    ws = np.abs(w).max() / E4M3_MAX
    wq = _e4m3(w, ws) / ws  # exact E4M3 values
    wstored = np.ascontiguousarray(wq.T) if gemm else wq
    inits = [numpy_helper.from_array(np.asarray(0.02, F32), "xs"), numpy_helper.from_array(np.asarray(ws, F32), "ws"),
             helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [0.0]),
             helper.make_tensor("wq", TensorProto.FLOAT8E4M3FN, list(wstored.shape), wstored.ravel().tolist()),
             numpy_helper.from_array(rng.standard_normal(n).astype(F32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xdq"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["wdq"])]
    if gemm:
        nodes.append(helper.make_node("Gemm", ["xdq", "wdq", "b"], ["pre"], transB=1))
    else:
        nodes += [helper.make_node("MatMul", ["xdq", "wdq"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"])]
    nodes.append(helper.make_node("Relu", ["pre"], ["y"]))
    g = helper.make_graph(nodes, "fp8qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gemm", [False, True])
def test_fp8_qdq_model_matches_onnxruntime(device, gemm):
    """Float32 x and a bias: on CUDA the bias is added after cuBLASLt's FP8
    GEMM (its float32-output kernels take only a bfloat16 bias); 23 rows, K 53
    and N 35 are no multiples of 8 or 16."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    m = _fp8_qdq_model(rng, 53, 35, gemm)
    x = rng.standard_normal((23, 53)).astype(F32) * 3
    x[0, :4] = [1e4, -1e4, 0.0, 1e-6]  # saturated to +-448 steps, zero, underflow
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    cpu = twinfer.load(m, device="cpu")
    np.testing.assert_allclose(cpu.run({"x": x})["y"].numpy(), want, rtol=1e-5, atol=1e-4)
    dev = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    assert [r.op for r in dev.kernel_report({"x": x.shape}) if r.backend == device] == ["com.twinfer::FP8MatMul"]
    # The same exact products; only the order of the float32 sums differs on a GPU.
    tol = dict(rtol=1e-5, atol=1e-4) if device == "sim" else dict(rtol=1e-4, atol=2e-3)
    np.testing.assert_allclose(dev.run({"x": x})["y"].numpy(), want, **tol)


@pytest.mark.cuda
@pytest.mark.parametrize("accumulation", ["fast-cutlass", "fast-cublaslt", "promoted"])
@pytest.mark.parametrize("gemm", [False, True])
@pytest.mark.parametrize("k, hidden, n", [(45, 83, 29), (64, 96, 32), (1024, 3072, 48)])
def test_cuda_fp8_matches_the_simulated_device(gemm, k, hidden, n, accumulation, monkeypatch):
    """cuBLASLt's FP8 GEMM (E4M3, scales, bias and ReLU in its epilogue,
    padded K and N; or K in 16s, whose rows the flat eight-a-thread kernel
    rounds) against the reference kernel on the simulated device; with the
    tensor cores' fast accumulation (the default) through CUTLASS's FP8 GEMM
    (scaled_gemm.h, on an H100/H200 where N fits its 16-byte rows) and through
    cuBLASLt's, and with float32 promotion (TWINFER_FP8_FAST_ACCUM=0,
    cuBLASLt alone), at BERT's K of 3072 too. Input in float32: the GEMM
    writes float32 (cuBLASLt alone) or, for the fp16 plan lowering makes of
    the rest, float16."""
    monkeypatch.setenv("TWINFER_FP8_GEMM", "cutlass" if accumulation == "fast-cutlass" else "cublaslt")
    if accumulation.startswith("fast"):
        monkeypatch.delenv("TWINFER_FP8_FAST_ACCUM", raising=False)
    else:
        monkeypatch.setenv("TWINFER_FP8_FAST_ACCUM", "0")
    rng = np.random.default_rng(17)
    m, _ = _mlp(rng, k, hidden, n, gemm)
    shape = (37, k) if gemm else (2, 19, k)
    calib = [rng.standard_normal(shape).astype(F32) for _ in range(3)]
    kw = dict(precision="fp8", calibration=calib, progress=False, allow_cpu_fallback=False)
    cuda = twinfer.load(m, device="cuda", **kw)
    sim = twinfer.load(m, device="sim", sim_coverage="cuda", **kw)
    names = [r.kernel for r in cuda.kernel_report({"x": shape}) if r.op.endswith("FP8MatMul")]
    assert names and all(k.startswith(("cublasLt fp8", "cutlass fp8")) for k in names), names
    if accumulation == "promoted":
        assert all(k.startswith("cublasLt fp8") and "fp32 accumulate" in k for k in names), names
    else:
        assert all("fast accumulation" in k for k in names), names
    if accumulation == "fast-cublaslt":
        assert all(k.startswith("cublasLt fp8") for k in names), names
    if accumulation == "fast-cutlass" and hidden % 8 == 0 and n % 8 == 0:  # float16 rows of 16 bytes
        assert all(k.startswith("cutlass fp8 sm90") for k in names), names
    for _ in range(3):
        x = rng.standard_normal(shape).astype(F32)
        got, want = cuda.run({"x": x})["y"].numpy(), sim.run({"x": x})["y"].numpy()
        err = np.abs(got.astype(np.float64) - want)
        assert err.max() <= 0.02 * np.abs(want).max(), err.max()
