"""Channels-last (NHWC) convolution networks on the GPU: the com.twinfer.nhwc
Conv / MaxPool / AveragePool kernels (csrc/backends/cuda/conv.cc, pool.cu),
the column reductions that NHWC global pools become (rows.cu), and the
plan-time pass that rewrites CNN regions into them (graph/passes/channels_last.h).

The kernels' index math (backends/cuda/channels_last_index.h) runs on the
host here against NumPy; the cuDNN graphs of the NHWC convolutions go
through the frontend's own checks without a GPU (cuda_build); the kernels
themselves run where a GPU is present (cuda), against NumPy or onnxruntime.
With sim_coverage="cuda" the simulated device places nodes as CUDA would, so
the wiring (which nodes the CUDA kernels accept) is checked in CI too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA, rel_err

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]


# ---- host runs of the kernels' index math ------------------------------------

@pytest.mark.parametrize("n, c, spatial", [(2, 6, 35), (1, 1, 7), (3, 13, 1), (2, 24, 9)])
def test_conv_epilogue_channel_of_each_element(n, c, spatial):
    # The bias index the epilogue kernel reads for element i of y.
    ch = np.arange(c)
    nchw = np.broadcast_to(ch[None, :, None], (n, c, spatial)).ravel()
    nhwc = np.broadcast_to(ch[None, None, :], (n, spatial, c)).ravel()
    assert twinfer._core._test_conv_epilogue_channels(n, c, spatial, False) == nchw.tolist()
    assert twinfer._core._test_conv_epilogue_channels(n, c, spatial, True) == nhwc.tolist()


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("x, y", [
    ([2, 3, 1, 11, 13], [1, 6, 7]),
    ([1, 5, 3, 4, 7], [2, 2, 3]),
    ([3, 1, 1, 1, 9], [1, 1, 4]),
])
def test_pool_index_walks_the_layout(x, y, channels_last):
    # For each output element (in y's layout): its position, and the offset of
    # x's (n, c, od*0, oh*0, ow*0) element -- the window origin the kernel adds
    # ((d * H + h) * W + w) * step to.
    N, C, D, H, W = x
    rows, step = twinfer._core._test_pool_index(x, y, channels_last)
    offsets = np.arange(np.prod(x)).reshape(x)
    if channels_last:
        offsets = np.arange(np.prod(x)).reshape(N, D, H, W, C).transpose(0, 4, 1, 2, 3)
    want = []
    out_dims = (N, C, *y)
    order = (0, 2, 3, 4, 1) if channels_last else (0, 1, 2, 3, 4)
    for idx in np.ndindex(*[out_dims[k] for k in order]):
        full = [0] * 5
        for k, v in zip(order, idx):
            full[k] = v
        n, c, od, oh, ow = full
        want.append([od, oh, ow, int(offsets[n, c, 0, 0, 0])])
    assert rows == want
    assert step == (C if channels_last else 1)
    # The step walks one spatial position within the plane.
    if W > 1:
        assert offsets[0, 0, 0, 0, 1] - offsets[0, 0, 0, 0, 0] == step


@pytest.mark.parametrize("shape, axes, want", [
    ([2, 7, 5, 6], [1, 2], (2, 35, 6)),          # NHWC global pool
    ([2, 7, 5, 6], [2, 3], (14, 30, 1)),         # trailing: rows
    ([2, 1, 5, 6], [1, 2], (2, 5, 6)),           # size-1 dims do not split the block
    ([1, 7, 7, 33], [1, 2], (1, 49, 33)),
    ([3, 4, 5, 2, 3], [1, 2, 3], (3, 40, 3)),    # NDHWC
    ([4, 5], [0], (1, 4, 5)),
    ([2, 0, 3, 4], [1, 2], (2, 0, 4)),           # empty reduction
    ([2, 7, 5, 6], [0, 2], "contiguous block"),  # two blocks: no CUDA kernel
])
def test_reduce_block_splits_outer_len_inner(shape, axes, want):
    got = twinfer._core._test_reduce_block(shape, axes)
    if isinstance(want, str):
        assert isinstance(got, str) and want in got
    else:
        assert tuple(got) == want


@pytest.mark.parametrize("shape, axes", [
    ([2, 7, 5, 6], [0, 2]),            # two blocks
    ([3, 4, 5, 6], [0, 2, 3]),         # MeanVarianceNormalization's default
    ([2, 1, 5, 6, 3], [1, 3]),         # a size-1 dim between
    ([5, 2, 3, 2, 3, 2, 3], [0, 2, 4, 6]),
    ([4, 3, 2], [0, 2]),
    ([2, 0, 3, 4], [1, 3]),            # empty
])
def test_reduce_gather_puts_the_reduced_dims_innermost(shape, axes):
    # The CUDA reduction's copy where the reduced dims are not one block
    # (rows.cu): scratch element i reads x at offsets[i]; the kept dims, in
    # order, then the reduced ones: NumPy's transpose of x, row by row.
    got = twinfer._core._test_reduce_gather(shape, axes)
    offsets, outer, len_ = got
    x = np.arange(int(np.prod(shape))).reshape(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    want = np.transpose(x, kept + list(axes)).reshape(-1)
    np.testing.assert_array_equal(np.asarray(offsets, dtype=np.int64).reshape(-1), want)
    assert outer == int(np.prod([shape[d] for d in kept])) and len_ == int(np.prod([shape[d] for d in axes]))


# ---- cuDNN's checks of the NHWC convolution graphs, no GPU needed -------------

@pytest.mark.cuda_build
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("x, w, pads, strides, dilations, groups", [
    ([2, 6, 17, 19], [12, 6, 3, 3], [1, 1], [2, 2], [1, 1], 1),
    ([2, 12, 9, 11], [12, 1, 3, 3], [1, 1], [1, 1], [1, 1], 12),   # depthwise
    ([1, 8, 13, 11], [24, 8, 1, 1], [0, 0], [1, 1], [1, 1], 1),    # 1x1
    ([2, 8, 13, 11], [16, 4, 3, 3], [2, 2], [2, 1], [2, 2], 2),    # grouped, dilated
    ([2, 6, 1, 29], [4, 6, 1, 5], [0, 2], [1, 3], [1, 1], 1),      # 1-d as conv.cc hands it
])
def test_channels_last_convolution_graphs(x, w, pads, strides, dilations, groups, dtype):
    # conv.cc's channels-last graph (ConvGraphSpec::channels_last): NHWC x
    # and y, a KRSC filter; dims in N, C, spatial order, the layout in strides.
    info = twinfer.build_info()
    if not info["cudnn_frontend"] or not info["cudnn"]:
        pytest.skip("no cuDNN frontend in this build")
    torch = pytest.importorskip("torch")
    y = list(torch.nn.functional.conv2d(torch.zeros(x), torch.zeros(w), stride=strides, padding=pads,
                                        dilation=dilations, groups=groups).shape)
    check = twinfer._core._test_cudnn_conv_validate
    assert check(x, w, y, pads, strides, dilations, dtype + ":nhwc") == ""
    wrong = y[:2] + [d + 1 for d in y[2:]]
    assert "cuDNN infers the output as" in check(x, w, wrong, pads, strides, dilations, dtype + ":nhwc")


@pytest.mark.cuda_build
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("epilogue", ["bias", "bias:relu", "bias:residual:relu", "residual", "bias:silu",
                                      "bias:clip", "bias:leakyrelu", "bias:sigmoid", "bias:gelu", "bias:tanh"])
def test_channels_last_convolution_graphs_with_the_fused_epilogue(dtype, epilogue):
    # conv.cc's first try for a fused com.twinfer Conv: bias, residual and
    # activation as pointwise nodes after conv_fprop in one graph (cuDNN's
    # runtime fusion), y written once. The shapes still have to agree.
    info = twinfer.build_info()
    if not info["cudnn_frontend"] or not info["cudnn"]:
        pytest.skip("no cuDNN frontend in this build")
    x, w, y = [2, 16, 9, 11], [24, 16, 3, 3], [2, 24, 9, 11]
    check = twinfer._core._test_cudnn_conv_validate
    assert check(x, w, y, [1, 1], [1, 1], [1, 1], f"{dtype}:nhwc:{epilogue}") == ""
    # a wrong y: cuDNN's inferred output differs, or (with a residual of y's
    # dims) the residual no longer broadcasts against the convolution
    wrong = check(x, w, [2, 24, 8, 11], [1, 1], [1, 1], [1, 1], f"{dtype}:nhwc:{epilogue}")
    assert "cuDNN infers the output as" in wrong or "broadcasting" in wrong, wrong
    with pytest.raises(twinfer.Error, match="unknown conv graph option"):
        check(x, w, y, [1, 1], [1, 1], [1, 1], f"{dtype}:nhwc:hardswish")


# ---- Reduce* over a middle block of axes (the NHWC global pools) --------------

NP_OF = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
def _logsumexp(x, axis, keepdims):
    m = np.max(np.where(np.isnan(x), -np.inf, x), axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis)


REDUCE_REF = {"ReduceMean": np.mean, "ReduceMax": np.max, "ReduceSum": np.sum, "ReduceMin": np.min,
              "ReduceL1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
              "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
              "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
              "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
              "ReduceLogSumExp": _logsumexp, "ReduceProd": np.prod}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape, axes", [
    ((2, 7, 5, 6), [1, 2]),        # NHWC global pool, odd sizes
    ((3, 9, 11, 33), [1, 2]),      # more columns than a block's 32
    ((1, 7, 7, 13), [1, 2]),       # batch 1
    ((2, 1, 9, 5), [1, 2]),        # a size-1 dim inside the block
    ((2, 3, 5, 4, 7), [1, 2, 3]),  # NDHWC
    ((5, 37, 3), [1]),
])
@pytest.mark.parametrize("op", list(REDUCE_REF))
def test_reduce_over_middle_axes(device, t, shape, axes, op, rng):
    npt = NP_OF[t]
    x = (rng.standard_normal(shape) * 3).astype(npt)
    if op == "ReduceLogSum":
        x = np.abs(x) + npt(0.1)  # a sum of logs' domain
    if op == "ReduceProd":
        x = (1 + x / 30).astype(npt)  # products that stay finite
    x.reshape(-1)[:: max(1, x.size // 3)][:2] = np.nan  # two columns meet a NaN
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    node = helper.make_node(op, ["x", "ax"], ["y"], keepdims=1, name="reduce")
    g = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", t, shape)],
                          [helper.make_tensor_value_info("y", t, out_shape)],
                          [helper.make_tensor("ax", TensorProto.INT64, [len(axes)], axes)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    got = e.run({"x": x})["y"].numpy()
    want = REDUCE_REF[op](x.astype(np.float64), axis=tuple(axes), keepdims=True).astype(npt)
    assert got.dtype == npt and got.shape == out_shape
    assert rel_err(got, want) < (2e-3 if t == TensorProto.FLOAT16 else 1e-6)
    (row,) = [r for r in e.kernel_report({"x": shape}) if r.node == "reduce"]
    assert row.backend == device, row
    if device == "cuda":
        assert row.kernel == "cuda columns", row  # every case here has inner > 1


# ---- a small CNN, channels-last end to end -----------------------------------

def _small_cnn(rng):
    """Conv+Relu, a residual Add, MaxPool, a depthwise Conv, a 1x1 Conv,
    AveragePool, GlobalAveragePool and a Gemm head: odd channel counts (3,
    6, 12, 24) and odd spatial sizes. Outputs the logits and the pooled
    feature map (a 4-d output, so a spatial layout mistake cannot hide in
    the global average)."""
    F = TensorProto.FLOAT
    inits = []

    def conv_w(name, m, c, k):
        inits.append(numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * np.sqrt(2.0 / (c * k * k)))
                                             .astype(np.float32), name))
        inits.append(numpy_helper.from_array((rng.standard_normal(m) * 0.1).astype(np.float32), name + "_b"))
        return [name, name + "_b"]

    nodes = [
        helper.make_node("Conv", ["x", *conv_w("w1", 6, 3, 3)], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", *conv_w("w2", 12, 6, 3)], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2],
                         name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", *conv_w("w3", 12, 12, 3)], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
        helper.make_node("Add", ["c3", "r2"], ["s3"]),  # the residual
        helper.make_node("Relu", ["s3"], ["r3"]),
        helper.make_node("MaxPool", ["r3"], ["p3"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         name="maxpool"),
        helper.make_node("Conv", ["p3", *conv_w("wd", 12, 1, 3)], ["c4"], pads=[1, 1, 1, 1], group=12,
                         name="depthwise"),
        helper.make_node("Relu", ["c4"], ["r4"]),
        helper.make_node("Conv", ["r4", *conv_w("w5", 24, 12, 1)], ["c5"], name="pointwise"),
        helper.make_node("Relu", ["c5"], ["r5"]),
        helper.make_node("AveragePool", ["r5"], ["feat"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                         count_include_pad=0, name="avgpool"),
        helper.make_node("GlobalAveragePool", ["feat"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="head"),
    ]
    inits.append(numpy_helper.from_array((rng.standard_normal((10, 24)) / np.sqrt(24)).astype(np.float32), "wf"))
    inits.append(numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "bf"))
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", F, ["N", 3, 17, 19])],
                          [helper.make_tensor_value_info("logits", F, ["N", 10]),
                           helper.make_tensor_value_info("feat", F, ["N", 24, 5, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _reference(m, feeds):
    """onnxruntime on the CPU where installed (the GPU machine has it), else twinfer's CPU backend."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return {k: v.numpy() for k, v in twinfer.load(m, device="cpu").run(feeds).items()}
    from onnx_helpers import run_ort_named  # caps the IR version at what the installed onnxruntime reads

    return run_ort_named(m, feeds)


# ||got - want|| / ||want|| per precision: fp16 / bf16 round every
# activation (bf16 keeps 8 bits), TF32 rounds the convolutions' inputs to 10.
TOL = {"fp16": 1e-2, "bf16": 6e-2, "tf32": 5e-3, "fp32": 1e-4}


def _check_cnn(m, device, precision, rng, *, nhwc: bool, conv_name: str | None = None):
    x = rng.standard_normal((2, 3, 17, 19)).astype(np.float32)
    want = _reference(m, {"x": x})
    e = twinfer.load(m, device=device, precision=precision, sim_coverage="cuda", allow_cpu_fallback=False)
    got = e.run({"x": x})
    for name in ("logits", "feat"):
        y = got[name].numpy()
        assert y.dtype == np.float32 and y.shape == want[name].shape
        err = rel_err(y, want[name])
        assert err < TOL[precision], (name, precision, err)
    rows = e.kernel_report({"x": x.shape})
    assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    nhwc_rows = [r for r in rows if r.op.startswith("com.twinfer.nhwc::")]
    if not nhwc:
        assert not nhwc_rows, nhwc_rows
        return rows
    ops = {r.op for r in nhwc_rows}
    assert {"com.twinfer.nhwc::Conv", "com.twinfer.nhwc::MaxPool", "com.twinfer.nhwc::AveragePool"} <= ops, ops
    # Five convolutions, the residual Add fused into conv3's epilogue (or kept as an Add on NHWC values).
    assert len([r for r in nhwc_rows if r.op.endswith("::Conv")]) == 5, nhwc_rows
    if device == "cuda":
        for r in nhwc_rows:
            assert "nhwc" in r.kernel, r
            if r.op.endswith("::Conv") and conv_name:
                assert r.kernel.startswith(conv_name), r
        # The global pool became a reduction over the middle axes of [N, H, W, C].
        assert any(r.op in ("ReduceMean", "com.twinfer::ReduceMean") and r.kernel == "cuda columns" for r in rows), rows
    return rows


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_small_cnn_runs_channels_last_on_cuda(precision, rng, monkeypatch):
    # TWINFER_CHANNELS_LAST unset: on for tf32 / fp16 / bf16 device plans.
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    monkeypatch.delenv("TWINFER_CUDNN_CONV", raising=False)
    monkeypatch.setenv("TWINFER_DEPTHWISE", "cudnn")  # the cuDNN form named below; ours: test_depthwise_conv.py
    _check_cnn(_small_cnn(rng), "cuda", precision, rng, nhwc=True, conv_name="cudnn graph conv nhwc")


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_small_cnn_channels_last_on_cudnns_legacy_api(precision, rng, monkeypatch):
    # The descriptor fallback: NHWC tensor descriptors and an NHWC (KRSC) filter.
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "1")
    monkeypatch.setenv("TWINFER_CUDNN_CONV", "legacy")
    monkeypatch.setenv("TWINFER_DEPTHWISE", "cudnn")  # the cuDNN form named below; ours: test_depthwise_conv.py
    _check_cnn(_small_cnn(rng), "cuda", precision, rng, nhwc=True, conv_name="cudnn conv nhwc (algo")


@pytest.mark.cuda
def test_small_cnn_channels_last_exact_fp32(rng, monkeypatch):
    # TWINFER_CHANNELS_LAST=1 turns it on for fp32 too: engines without tensor cores, NHWC.
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "1")
    monkeypatch.delenv("TWINFER_CUDNN_CONV", raising=False)
    monkeypatch.setenv("TWINFER_DEPTHWISE", "cudnn")  # the cuDNN form named below; ours: test_depthwise_conv.py
    _check_cnn(_small_cnn(rng), "cuda", "fp32", rng, nhwc=True, conv_name="cudnn")


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_small_cnn_stays_nchw_when_channels_last_is_off(precision, rng, monkeypatch):
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "0")
    monkeypatch.delenv("TWINFER_CUDNN_CONV", raising=False)
    rows = _check_cnn(_small_cnn(rng), "cuda", precision, rng, nhwc=False)
    convs = [r for r in rows if r.op.endswith("Conv")]
    assert convs and all("nhwc" not in r.kernel for r in convs), convs


@pytest.mark.cuda_build
def test_small_cnn_channels_last_placed_as_cuda_on_the_simulated_device(rng, monkeypatch):
    # The simulated device runs the CPU kernels where CUDA's would run: this
    # checks, without a GPU, that the CUDA kernels accept every node the pass
    # rewrites (the pass asks them) and that the rewritten graph is right.
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "1")
    _check_cnn(_small_cnn(rng), "sim", "fp32", rng, nhwc=True)


def _conv_rows_on_cuda(m, x, precision, monkeypatch):
    """Runs `m` on cuda with the default convolution path (graph API,
    channels-last), checks y against the reference, returns the conv rows."""
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    monkeypatch.delenv("TWINFER_CUDNN_CONV", raising=False)
    monkeypatch.setenv("TWINFER_DEPTHWISE", "cudnn")  # the cuDNN form named below; ours: test_depthwise_conv.py
    want = _reference(m, {"x": x})["y"]
    e = twinfer.load(m, device="cuda", precision=precision, allow_cpu_fallback=False)
    got = e.run({"x": x})["y"].numpy()
    assert rel_err(got, want) < TOL[precision]
    return [r for r in e.kernel_report({"x": x.shape}) if r.op.endswith("Conv")], want


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_conv_bias_residual_relu_fused_inside_cudnns_graph(precision, rng, monkeypatch):
    # A ResNet basic block, channels multiples of 8 as cuDNN's runtime-fusion
    # engines want them: conv+bias+relu, then conv+bias+residual+relu, each
    # one cuDNN graph writing y once (conv.cc asks for the fused graph first).
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["y"])]
    shape = [3, c, 15, 17]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    convs, _ = _conv_rows_on_cuda(m, rng.standard_normal(shape).astype(np.float32), precision, monkeypatch)
    assert len(convs) == 2 and all("fused epilogue" in r.kernel for r in convs), convs


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_relu6_runs_after_cudnns_graph_keeps_the_bias(precision, rng, monkeypatch):
    # MobileNet's conv + bias + ReLU6 (Clip 0..6), depthwise and pointwise:
    # the bias stays inside cuDNN's graph, the clip runs after it as our
    # kernel (cuDNN 9.19 chose a slow engine, eng0, for fused clipped ReLUs:
    # 157 ms against 12.8 for MobileNetV2 fp16 b256 on an H200).
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.5).astype(np.float32), "wd"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "bd"),
             numpy_helper.from_array((rng.standard_normal((2 * c, c, 1, 1)) * 0.3).astype(np.float32), "wp"),
             numpy_helper.from_array(rng.standard_normal(2 * c).astype(np.float32), "bp"),
             numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "wp", "bp"], ["p"]),
             helper.make_node("Clip", ["p", "lo", "hi"], ["y"])]
    shape = [2, c, 13, 11]
    g = helper.make_graph(nodes, "mbconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    convs, want = _conv_rows_on_cuda(m, (rng.standard_normal(shape) * 3).astype(np.float32), precision, monkeypatch)
    assert 0 < np.mean(want == 6) < 0.5  # the upper clip bites
    assert len(convs) == 2, convs
    assert all("fused epilogue" in r.kernel and "activation (not fused" in r.kernel for r in convs), convs


def _conv_pools(rng, channels):
    """A 1x1 convolution to `channels` (so the pools after it run
    channels-last), then a dilated MaxPool with ceil_mode and uneven pads and
    an AveragePool that counts the padding, both outputs."""
    F = TensorProto.FLOAT
    w = numpy_helper.from_array((rng.standard_normal((channels, 5, 1, 1)) * 0.5).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("MaxPool", ["c"], ["maxed"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 2, 1],
                         dilations=[2, 1], ceil_mode=1, name="maxpool"),
        helper.make_node("AveragePool", ["c"], ["averaged"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1],
                         count_include_pad=1, name="avgpool"),
    ]
    g = helper.make_graph(nodes, "pools", [helper.make_tensor_value_info("x", F, ["N", 5, 13, 11])],
                          [helper.make_tensor_value_info("maxed", F, None),
                           helper.make_tensor_value_info("averaged", F, None)], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("channels", [16, 8, 13, 3])
def test_channels_last_pools_in_packs_of_channels_and_one_by_one(precision, channels, rng, monkeypatch):
    # pool.cu's 32-bit NHWC kernel: 8 channels a thread where C divides
    # into 16-byte packs, one at a time otherwise.
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    m = _conv_pools(rng, channels)
    x = rng.standard_normal((3, 5, 13, 11)).astype(np.float32)
    want = _reference(m, {"x": x})
    e = twinfer.load(m, device="cuda", precision=precision, allow_cpu_fallback=False)
    got = e.run({"x": x})
    for name in ("maxed", "averaged"):
        y = got[name].numpy()
        assert y.shape == want[name].shape
        assert rel_err(y, want[name]) < TOL[precision], (name, rel_err(y, want[name]))
    pools = [r for r in e.kernel_report({"x": x.shape}) if r.op.endswith("Pool")]
    assert len(pools) == 2 and all(r.op.startswith("com.twinfer.nhwc::") for r in pools), pools
    packs = channels % 8 == 0
    assert all(("channels in packs" in r.kernel) == packs for r in pools), pools
