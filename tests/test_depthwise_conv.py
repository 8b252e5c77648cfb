"""Our channels-last depthwise convolution (csrc/backends/cuda/depthwise_conv.cu),
the form beside cuDNN's of MobileNet's depthwise layers; conv.cc times both
when the plan is built and keeps the faster (TWINFER_DEPTHWISE=ours|cudnn
forces one).

The kernel's arithmetic (backends/cuda/depthwise_math.h: a pack of V
channels at one output position) runs on the host here against NumPy, in
the pack widths the kernel uses; the kernel itself runs where a GPU is
present, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA, rel_err

ort = pytest.importorskip("onnxruntime")


def _numpy_depthwise(x, w, stride, pad, dil, out_hw):
    """x [N, H, W, C], w [KH, KW, C]: y [N, OH, OW, C] in float64."""
    n, h, wd, c = x.shape
    kh, kw, _ = w.shape
    oh, ow = out_hw
    y = np.zeros((n, oh, ow, c))
    for r in range(kh):
        ih = np.arange(oh) * stride[0] - pad[0] + r * dil[0]
        for s in range(kw):
            iw = np.arange(ow) * stride[1] - pad[1] + s * dil[1]
            valid = ((ih >= 0) & (ih < h))[:, None] & ((iw >= 0) & (iw < wd))[None, :]
            taps = x[:, np.clip(ih, 0, h - 1)][:, :, np.clip(iw, 0, wd - 1)].astype(np.float64)
            y += np.where(valid[None, :, :, None], taps, 0.0) * w[r, s].astype(np.float64)
    return y


def _out(size, k, stride, pad_begin, pad_end, dil):
    return (size + pad_begin + pad_end - dil * (k - 1) - 1) // stride + 1


@pytest.mark.parametrize("pack", [1, 4, 8])
@pytest.mark.parametrize("x_shape, k, stride, pads, dil", [
    ((2, 9, 11, 16), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),    # MobileNet's stride 1
    ((1, 13, 10, 8), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),    # stride 2, odd size
    ((3, 7, 12, 24), (5, 5), (2, 1), (2, 2, 2, 2), (1, 1)),    # EfficientNet's 5x5
    ((1, 10, 9, 8), (3, 2), (1, 2), (2, 0, 1, 1), (2, 1)),     # dilated, uneven pads
    ((2, 1, 17, 8), (1, 4), (1, 3), (0, 1, 0, 2), (1, 2)),     # a 1-d convolution as H = 1
    ((1, 4, 4, 8), (5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),      # the window larger than x: empty
])
def test_depthwise_arithmetic_matches_numpy(x_shape, k, stride, pads, dil, pack, rng):
    n, h, w_, c = x_shape
    oh = _out(h, k[0], stride[0], pads[0], pads[2], dil[0])
    ow = _out(w_, k[1], stride[1], pads[1], pads[3], dil[1])
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((k[0], k[1], c)).astype(np.float32)
    if oh <= 0 or ow <= 0:
        assert twinfer._core._test_depthwise_nhwc(x.ravel().tolist(), list(x_shape), w.ravel().tolist(), k[0], k[1],
                                                  max(oh, 0), max(ow, 0), list(stride), list(pads[:2]),
                                                  list(dil), pack) == []
        return
    got = np.array(twinfer._core._test_depthwise_nhwc(x.ravel().tolist(), list(x_shape), w.ravel().tolist(), k[0],
                                                      k[1], oh, ow, list(stride), list(pads[:2]), list(dil), pack))
    want = _numpy_depthwise(x, w, stride, pads[:2], dil, (oh, ow))
    assert not np.isnan(got).any()  # every output written once by some pack
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def _depthwise_model(rng, c, x_shape, k, stride, pads, dil, bias, act, residual):
    """Conv(group=C) [+ bias] [+ residual Add] [+ Relu / Clip(0, 6)]: what the
    channels-last pass turns into one com.twinfer.nhwc Conv."""
    F = TensorProto.FLOAT
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, *k)) * 0.5).astype(np.float32), "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], group=c, kernel_shape=list(k), strides=list(stride),
                              pads=list(pads), dilations=list(dil), name="depthwise")]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", [last, "x"], ["a"]))
        last = "a"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    elif act == "relu6":
        inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", F, list(x_shape))],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


TOL = {"fp16": 3e-3, "bf16": 2e-2, "tf32": 1e-5}


# The simulated device places nodes as CUDA would and runs the CPU's
# kernels: it checks the models and their channels-last rewrite in CI.
@pytest.mark.parametrize("device", [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("c, x_shape, k, stride, pads, dil, bias, act, residual", [
    (32, (3, 32, 15, 17), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, "relu6", False),   # MobileNetV2
    (24, (2, 24, 13, 11), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, "relu", False),    # stride 2
    (40, (2, 40, 9, 10), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False, None, True),       # 5x5, residual
    (13, (2, 13, 9, 7), (3, 3), (1, 2), (2, 1, 2, 1), (2, 1), True, "relu", False),      # C % 8 != 0: one by one
])
def test_depthwise_kernel_against_onnxruntime(device, precision, c, x_shape, k, stride, pads, dil, bias, act, residual,
                                              rng, monkeypatch):
    m = _depthwise_model(rng, c, x_shape, k, stride, pads, dil, bias, act, residual)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # =all: the model's one convolution is channels-last in tf32 too (by
    # default a convolution alone stays NCHW; in fp16 / bf16 the casts around
    # it join its region).
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "all")
    for mode in ("ours", None):  # forced, then chosen by timing against cuDNN
        if mode:
            monkeypatch.setenv("TWINFER_DEPTHWISE", mode)
        else:
            monkeypatch.delenv("TWINFER_DEPTHWISE", raising=False)
        e = twinfer.load(m, device=device, precision=precision, allow_cpu_fallback=False)
        got = e.run({"x": x})["y"].numpy()
        assert got.shape == want.shape and not np.isnan(got).any()
        assert rel_err(got, want) < TOL[precision], (mode, rel_err(got, want))
        (row,) = [r for r in e.kernel_report({"x": x.shape}) if r.op.endswith("Conv")]
        if device != "cuda":  # the simulated device's tf32 plans take oneDNN's blocked layout instead
            assert row.op == "com.twinfer.nhwc::Conv" or precision == "tf32", row
            continue
        assert row.op == "com.twinfer.nhwc::Conv", row
        if mode == "ours":
            assert row.kernel.startswith("cuda depthwise nhwc"), row
        else:  # both forms timed, whichever won
            assert "timed: ours" in row.kernel and "cuDNN" in row.kernel, row


def _mobilenet_v2_with_live_statistics(torch, torchvision, x):
    """MobileNetV2 with random weights and its BatchNorms' statistics measured
    on random images. With the default statistics (mean 0, variance 1) every
    block shrinks the activations: the logits are ~1e-10, below float16's
    smallest number, and an fp16 plan's zeros would be "right"."""
    torch.manual_seed(3)
    model = torchvision.models.mobilenet_v2()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a plain average over the batches below
    model.train()
    with torch.no_grad():
        model(torch.randn(4, *x.shape[1:]))
    return model.eval()


@pytest.mark.parametrize("device", [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
def test_depthwise_kernel_in_mobilenet_v2(device, rng, monkeypatch):
    # Every depthwise layer of MobileNetV2 (random weights) forced onto our
    # kernel, fp16, against onnxruntime in float32. The simulated device runs
    # the same fp16 plan on the CPU's kernels.
    torchvision = pytest.importorskip("torchvision")
    torch = pytest.importorskip("torch")
    import io
    x = rng.standard_normal((2, 3, 96, 96)).astype(np.float32)
    model = _mobilenet_v2_with_live_statistics(torch, torchvision, x)
    buf = io.BytesIO()
    torch.onnx.export(model, torch.from_numpy(x), buf, input_names=["x"], output_names=["y"], dynamo=False)
    want = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(want).mean() > 1e-2  # logits float16 holds
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("TWINFER_DEPTHWISE", "ours")
    e = twinfer.load(buf.getvalue(), device=device, precision="fp16", allow_cpu_fallback=False)
    got = e.run({"x": x})["y"].numpy()
    # fp16 through 52 convolutions: 1.8-2.3% of the logits' norm over eight
    # seeds on the simulated device, with a cosine above 0.9997; a wrong
    # channel or tap in the depthwise kernel costs far more.
    assert rel_err(got, want) < 4e-2
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.999, cosine
    convs = [r for r in e.kernel_report({"x": x.shape}) if r.op == "com.twinfer.nhwc::Conv"]
    assert len(convs) == 52, len(convs)  # every convolution channels-last
    if device == "cuda":
        ours = [r for r in convs if r.kernel.startswith("cuda depthwise nhwc")]
        assert len(ours) == 17, len(ours)  # MobileNetV2's depthwise convolutions
