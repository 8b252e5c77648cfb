"""The device's int8 kernels (QuantizeLinear, DequantizeLinear, and the fused
QMatMul / QConv / QBinary the QDQ fusion builds) against twinfer's CPU
backend running the same graph, on QDQ models with odd sizes: K and N that
are not multiples of 4, uint8 and int8 activations, float and quantized
outputs, ReLU and other activations, grouped convolutions, broadcasts.

On the simulated device (sim_coverage="cuda") the nodes are placed as CUDA
places them — the test checks that every node has a CUDA kernel — and on a
GPU the CUDA kernels run. Results may differ from the CPU's by one step of
the output's quantization (rounding after a different summation order)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
F32 = np.float32


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "int8", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _qdq(name, x, scale, zero, nodes, inits, axis=None):
    """x -> QuantizeLinear -> DequantizeLinear; returns the DQ output's name."""
    inits[f"{name}_s"] = np.asarray(scale, F32)
    inits[f"{name}_z"] = np.asarray(zero)
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"], **attrs))
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                                  **attrs))
    return f"{name}_dq"


def _weight(name, w, axis, nodes, inits):
    """Per-channel symmetric int8 weights behind a DequantizeLinear."""
    amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
    scale = np.maximum(amax, 1e-6) / 127
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    inits[f"{name}_q"], inits[f"{name}_s"] = q, scale.astype(F32)
    inits[f"{name}_z"] = np.zeros(len(scale), np.int8)
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                                  axis=axis))
    return f"{name}_dq"


def _run_both(m, feeds, device):
    cpu = twinfer.load(m, device="cpu").run(feeds)
    eng = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    got = eng.run(feeds)
    rows = eng.kernel_report({k: v.shape for k, v in feeds.items()})
    assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    return rows, {k: v.numpy() for k, v in cpu.items()}, {k: v.numpy() for k, v in got.items()}


def _close_within_steps(got, want, step, steps=1):
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert diff.max() <= steps * step * (1 + 1e-5) + 1e-6, diff.max()
    assert np.mean(diff <= 1e-6 + 1e-3 * step) > 0.97  # almost all identical


def _matmul_model(rng, K, N, x_unsigned, out_quantized, act):
    nodes, inits = [], {}
    x_zero = np.uint8(128) if x_unsigned else np.int8(0)
    xdq = _qdq("x", "x", 0.05, x_zero, nodes, inits)
    w = _weight("w", rng.standard_normal((K, N)).astype(F32) * 0.3, 1, nodes, inits)
    inits["b"] = rng.standard_normal(N).astype(F32)
    nodes += [helper.make_node("MatMul", [xdq, w], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"])]
    y = "pre"
    if act:
        nodes.append(helper.make_node(act, ["pre"], ["act"]))
        y = "act"
    if out_quantized:
        y = _qdq("y", y, 0.08, np.int8(0), nodes, inits)
    nodes.append(helper.make_node("Identity", [y], ["out"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["M", N])], inits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("K,N", [(32, 16), (21, 13), (64, 7)])
@pytest.mark.parametrize("x_unsigned,out_quantized,act", [(False, True, "Relu"), (True, True, "Relu"),
                                                          (False, False, ""), (False, True, "Sigmoid")])
def test_qmatmul(device, K, N, x_unsigned, out_quantized, act, rng):
    m = _matmul_model(rng, K, N, x_unsigned, out_quantized, act)
    x = (rng.standard_normal((9, K)) * 2).astype(F32)
    if x_unsigned:
        x = np.abs(x)
    rows, want, got = _run_both(m, {"x": x}, device)
    assert any(r.op.endswith("QMatMul") for r in rows), rows
    step = 0.08 if out_quantized else 0.05 * 0.3  # one output step, or one input step times a weight
    _close_within_steps(got["out"], want["out"], step, 1 if out_quantized else K)


def _conv_model(rng, C, O, group, k, stride, pad, out_quantized, act, one_d=False):
    nodes, inits = [], {}
    xdq = _qdq("x", "x", 0.04, np.int8(0), nodes, inits)
    kshape = [k] if one_d else [k, k]
    w = _weight("w", rng.standard_normal([O, C // group] + kshape).astype(F32) * 0.2, 0, nodes, inits)
    inits["b"] = rng.standard_normal(O).astype(F32)
    nsp = 1 if one_d else 2
    nodes.append(helper.make_node("Conv", [xdq, w, "b"], ["conv"], group=group, strides=[stride] * nsp,
                                  pads=[pad] * (2 * nsp), kernel_shape=kshape))
    y = "conv"
    if act:
        nodes.append(helper.make_node(act, ["conv"], ["act"]))
        y = "act"
    if out_quantized:
        y = _qdq("y", y, 0.1, np.int8(0), nodes, inits)
    nodes.append(helper.make_node("Identity", [y], ["out"]))
    xs = ["N", C, "L"] if one_d else ["N", C, "H", "W"]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("C,O,group,k,stride,pad,one_d", [(3, 8, 1, 3, 2, 1, False), (16, 12, 1, 1, 1, 0, False),
                                                         (6, 6, 6, 3, 1, 1, False), (8, 12, 2, 3, 2, 0, False),
                                                         (5, 7, 1, 5, 1, 2, True)])
@pytest.mark.parametrize("out_quantized,act", [(True, "Relu"), (False, ""), (True, "HardSigmoid")])
def test_qconv(device, C, O, group, k, stride, pad, one_d, out_quantized, act, rng):
    m = _conv_model(rng, C, O, group, k, stride, pad, out_quantized, act, one_d)
    shape = (2, C, 19) if one_d else (2, C, 13, 10)
    x = (rng.standard_normal(shape) * 2).astype(F32)
    rows, want, got = _run_both(m, {"x": x}, device)
    assert any(r.op.endswith("QConv") for r in rows), rows
    taps = (C // group) * k ** (1 if one_d else 2)
    _close_within_steps(got["out"], want["out"], 0.1 if out_quantized else 0.04 * 0.2, 1 if out_quantized else taps)


@pytest.mark.parametrize("device", DEVICES)
def test_nhwc_uint8_convolution_chain(device, rng):
    """An imported QDQ chain with uint8 activations and zero points off 128:
    the second convolution reads the first's uint8 output NHWC
    (int8_channels_last), 16 channels, so on a GPU its im2col copies runs
    of 16 channels with the top bit flipped and the zero point (-28 as int8)
    in the padding (qlinear_kernels.cu's im2col_int8_runs); cuDNN's int8
    convolution does not take a zero point. Against the CPU, within two
    output steps (the chain can carry a first layer's rounding tie on)."""
    nodes, inits = [], {}
    prev = _qdq("x", "x", 0.05, np.uint8(100), nodes, inits)
    for i, stride in enumerate([1, 2]):
        w = _weight(f"w{i}", rng.standard_normal((16, 16, 3, 3)).astype(F32) * 0.08, 0, nodes, inits)
        inits[f"b{i}"] = rng.standard_normal(16).astype(F32) * 0.1
        nodes.append(helper.make_node("Conv", [prev, w, f"b{i}"], [f"c{i}"], strides=[stride, stride],
                                      pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        prev = _qdq(f"y{i}", f"c{i}", 0.06, np.uint8(100 if i == 0 else 90), nodes, inits)
    nodes.append(helper.make_node("Identity", [prev], ["out"]))
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 9, 11])],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    x = (rng.standard_normal((2, 16, 9, 11)) * 2).astype(F32)
    rows, want, got = _run_both(m, {"x": x}, device)
    convs = [r for r in rows if r.op.endswith("QConv")]
    assert len(convs) == 2, rows
    if device == "cuda":
        assert all("not cuDNN" in r.kernel for r in convs), convs
    _close_within_steps(got["out"], want["out"], 0.06, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,shape_b", [("Add", (2, 8, 5, 5)), ("Add", (1, 8, 1, 1)), ("Mul", (8, 1, 1))])
def test_qbinary_residual(device, op, shape_b, rng):
    nodes, inits = [], {}
    a = _qdq("a", "a", 0.03, np.uint8(0), nodes, inits)
    b = _qdq("b", "b", 0.05, np.int8(-2), nodes, inits)
    nodes.append(helper.make_node(op, [a, b], ["r"]))
    nodes.append(helper.make_node("Relu", ["r"], ["rr"]))
    y = _qdq("y", "rr", 0.02, np.uint8(3), nodes, inits)
    nodes.append(helper.make_node("Identity", [y], ["out"]))
    m = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8, 5, 5]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, list(shape_b))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    feeds = {"a": np.abs(rng.standard_normal((2, 8, 5, 5))).astype(F32) * 3,
             "b": rng.standard_normal(shape_b).astype(F32) * 3}
    rows, want, got = _run_both(m, feeds, device)
    assert any(r.op.endswith("QBinary") for r in rows), rows
    np.testing.assert_array_equal(got["out"], want["out"])  # the same float32 expression, element by element


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_and_dequantize_per_tensor_and_per_axis(device, rng):
    inits = {"s": np.array(0.07, F32), "z": np.uint8(120), "sa": (rng.random(5) * 0.1 + 0.01).astype(F32),
             "za": rng.integers(-5, 5, size=5).astype(np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["qa"], axis=1),
             helper.make_node("DequantizeLinear", ["qa", "sa", "za"], ["dqa"], axis=1),
             helper.make_node("DequantizeLinear", ["w", "sa", "za"], ["dw"], axis=1)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 7]),
                       helper.make_tensor_value_info("w", TensorProto.INT8, [3, 5, 7])],
               [helper.make_tensor_value_info(n, t, None) for n, t in
                (("q", TensorProto.UINT8), ("qa", TensorProto.INT8), ("dqa", TensorProto.FLOAT),
                 ("dw", TensorProto.FLOAT))], inits)
    x = (rng.standard_normal((3, 5, 7)) * 5).astype(F32)
    x.flat[::11] = 0.035  # ties for round half to even: 0.5 of a 0.07 step
    feeds = {"x": x, "w": rng.integers(-128, 128, size=(3, 5, 7)).astype(np.int8)}
    rows, want, got = _run_both(m, feeds, device)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _residual_net(rng):
    """conv3x3-relu, conv3x3, + residual, relu, global pool, gemm: a ResNet block and head."""
    inits = {"w1": rng.standard_normal((8, 8, 3, 3)).astype(F32) * 0.2, "b1": rng.standard_normal(8).astype(F32) * 0.1,
             "w2": rng.standard_normal((8, 8, 3, 3)).astype(F32) * 0.2, "b2": rng.standard_normal(8).astype(F32) * 0.1,
             "wf": rng.standard_normal((8, 12)).astype(F32) * 0.3, "bf": rng.standard_normal(12).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 9, 9])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


@pytest.mark.parametrize("device", DEVICES)
def test_calibrated_int8_model_runs_wholly_on_the_device(device, rng, monkeypatch):
    m = _residual_net(rng)
    data = [{"x": rng.standard_normal((4, 8, 9, 9)).astype(F32)} for _ in range(4)]
    f32 = twinfer.load(m, device="cpu")
    eng = twinfer.load(m, device=device, precision="int8", calibration=data, progress=False, sim_coverage="cuda",
                       allow_cpu_fallback=False)
    rows = eng.kernel_report({"x": (3, 8, 9, 9)})
    assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    ops = {r.op.split("::")[-1] for r in rows}
    assert {"QConv", "QMatMul"} <= ops, ops
    if device == "cuda":  # a channels-last int8 convolution of 8 channels goes to cuDNN (gemm_qlinear.cc)
        kernels = [r.kernel for r in rows if r.op.endswith("QConv")]
        assert any(k.startswith("cudnn int8 conv") for k in kernels), kernels
    x = rng.standard_normal((3, 8, 9, 9)).astype(F32)
    got, want = eng.run({"x": x})["y"].numpy(), f32.run({"x": x})["y"].numpy()
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.99, cos
    if device == "cuda":  # the same graph on the simulated device runs the CPU kernels
        sim = twinfer.load(m, device="sim", precision="int8", calibration=eng.calibration, sim_coverage="cuda")
        np.testing.assert_allclose(got, sim.run({"x": x})["y"].numpy(), rtol=0.02, atol=0.05)
        # The same layers on im2col + cuBLASLt (cuDNN's int8 convolution off):
        # the int32 sums are exact either way; only a rounding step may differ.
        monkeypatch.setenv("TWINFER_CUDNN_CONV", "legacy")
        old = twinfer.load(m, device="cuda", precision="int8", calibration=eng.calibration, allow_cpu_fallback=False)
        assert not any(r.kernel.startswith("cudnn int8") for r in old.kernel_report({"x": (3, 8, 9, 9)}))
        np.testing.assert_allclose(got, old.run({"x": x})["y"].numpy(), rtol=0.01, atol=0.02)


def _pointwise_chain(rng):
    """conv3x3 (3 -> 16) -relu-> conv1x1 (16 -> 16) -relu-> conv1x1 (16 -> 13):
    the 1x1 convolutions read NHWC int8 rows of 16 channels (int8_channels_last)."""
    inits = {"w1": rng.standard_normal((16, 3, 3, 3)).astype(F32) * 0.3, "b1": rng.standard_normal(16).astype(F32) * 0.1,
             "w2": rng.standard_normal((16, 16, 1, 1)).astype(F32) * 0.3, "b2": rng.standard_normal(16).astype(F32) * 0.1,
             "w3": rng.standard_normal((13, 16, 1, 1)).astype(F32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 11, 7])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


@pytest.mark.cuda
def test_pointwise_int8_convolutions_read_x_rows_without_im2col(rng, monkeypatch):
    # With cuDNN's int8 convolution off, a 1x1 stride-1 QConv on NHWC int8 x
    # of 16 channels hands cuBLASLt x's rows as they are (gemm_qlinear.cc);
    # the simulated device (the CPU's oneDNN kernels) is the reference.
    m = _pointwise_chain(rng)
    data = [{"x": rng.standard_normal((2, 3, 11, 7)).astype(F32)} for _ in range(4)]
    monkeypatch.setenv("TWINFER_CUDNN_CONV", "legacy")
    eng = twinfer.load(m, device="cuda", precision="int8", calibration=data, progress=False, allow_cpu_fallback=False)
    kernels = [r.kernel for r in eng.kernel_report({"x": (3, 3, 11, 7)}) if r.op.endswith("QConv")]
    assert sum("x's rows as they are" in k for k in kernels) >= 1, kernels
    sim = twinfer.load(m, device="sim", precision="int8", calibration=eng.calibration, sim_coverage="cuda")
    x = rng.standard_normal((3, 3, 11, 7)).astype(F32)
    got, want = eng.run({"x": x})["y"].numpy(), sim.run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=0.02, atol=0.05 * np.abs(want).max())


def _sixteen_channel_chain(rng):
    """conv3x3 (16 -> 16) -relu-> conv1x1 (16 -> 32) -relu-> conv3x3 (32 -> 16)
    -relu-> conv1x1 (16 -> 16): NHWC int8 between them (int8_channels_last),
    channels in 16s, so every convolution has a fused GPU form."""
    inits, nodes, prev = {}, [], "x"
    for i, (c, o, k) in enumerate([(16, 16, 3), (16, 32, 1), (32, 16, 3), (16, 16, 1)]):
        # float32 throughout: a NumPy float64 scalar would promote the weights to float64
        inits[f"w{i}"] = (rng.standard_normal((o, c, k, k)) * (0.6 / np.sqrt(c * k * k))).astype(F32)
        inits[f"b{i}"] = rng.standard_normal(o).astype(F32) * 0.1
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4))
        prev = f"c{i}"
        if i < 3:
            nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
            prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 9, 11])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


@pytest.mark.cuda
def test_int8_convolutions_requantize_inside_cudnn_and_cublaslt(rng, monkeypatch):
    """The int8 layers' fused GPU forms: the requantization in cuDNN's graph
    (int8 y from cuDNN; TWINFER_INT8_CONV=cudnn), or in cuBLASLt's epilogue
    (after im2col, none for a 1x1; TWINFER_INT8_CONV=cublaslt); by default
    both are timed at build and the faster kept. Against the same plan with
    both off (int32 sums and our epilogue, which rounds half to even as
    QuantizeLinear does): the int32 sums are exact, so the outputs agree but
    for rare ties. A conversion that truncated instead of rounding would move
    most int8 values by one step and fail this."""
    m = _sixteen_channel_chain(rng)
    data = [{"x": rng.standard_normal((2, 16, 9, 11)).astype(F32)} for _ in range(4)]
    shape = {"x": (3, 16, 9, 11)}

    def load(**env):
        for k in ("TWINFER_INT8_CONV", "TWINFER_INT8_CUDNN_FUSED"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        e = twinfer.load(m, device="cuda", precision="int8", calibration=calib, allow_cpu_fallback=False)
        return e, [r.kernel for r in e.kernel_report(shape) if r.op.endswith("QConv")]

    calib = twinfer.load(m, device="cpu", precision="int8", calibration=data, progress=False).calibration
    timed, kernels = load()
    assert sum("timed: one GEMM" in k for k in kernels) >= 2, kernels  # the 1x1 and the 3x3 with int8 output
    by_cudnn, kernels = load(TWINFER_INT8_CONV="cudnn")
    assert any("requantized in its graph" in k for k in kernels), kernels
    by_cublaslt, kernels = load(TWINFER_INT8_CONV="cublaslt")
    assert any("x's rows as they are" in k for k in kernels), kernels
    assert any("im2col + one GEMM" in k for k in kernels), kernels
    plain, kernels = load(TWINFER_INT8_CONV="cudnn", TWINFER_INT8_CUDNN_FUSED="0")
    assert not any("requantized in its graph" in k or "one GEMM" in k for k in kernels), kernels
    x = rng.standard_normal((3, 16, 9, 11)).astype(F32)
    want = plain.run({"x": x})["y"].numpy()
    # The plain plan itself against the CPU's oneDNN int8 kernels (the simulated device).
    sim = twinfer.load(m, device="sim", precision="int8", calibration=calib, sim_coverage="cuda")
    np.testing.assert_allclose(want, sim.run({"x": x})["y"].numpy(), rtol=0.02, atol=0.05 * np.abs(want).max())
    for e in (timed, by_cudnn, by_cublaslt):
        got = e.run({"x": x})["y"].numpy()
        same = np.isclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
        assert same.mean() > 0.97, same.mean()
        np.testing.assert_allclose(got, want, rtol=0.02, atol=0.05 * np.abs(want).max())
