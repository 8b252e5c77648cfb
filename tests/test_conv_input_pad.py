"""Convolutions padded unequally at the two ends of a dim (TensorFlow's SAME
on a stride-2 layer, as tf2onnx and paddle2onnx write it) on the GPU: cuDNN
takes one pad per dim, so the CUDA Conv copies x with the difference padded
in and gives cuDNN the smaller pad (backends/cuda/conv_input_pad.h). Before,
such a conv ran on the CPU between two copies (PP-OCRv6 had two).

The copy's plan runs on the host here and is replayed in NumPy against
np.pad; the simulated device, placing nodes as CUDA would, checks that
whole models with such convs stay on the device (cuda_build); on a GPU the
kernels run against onnxruntime (cuda)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA, rel_err
from onnx_helpers import run_ort


def replay_copy(x: np.ndarray, plan, channels_last: bool) -> np.ndarray:
    """What the zeroed buffer holds after the plan's 3-D copy of x's bytes
    (cudaMemcpy3DAsync's pitched copy), read back in logical [N, C, ...] order."""
    padded, _, (row_bytes, rows, slices, pitch, slice_rows, first_byte, first_row, buffer_bytes) = plan
    assert buffer_bytes == slices * slice_rows * pitch
    src = np.ascontiguousarray(x.transpose(0, *range(2, x.ndim), 1) if channels_last else x)
    buf = np.zeros(buffer_bytes, np.uint8)
    view = buf.reshape(slices, slice_rows, pitch)
    view[:, first_row:first_row + rows, first_byte:first_byte + row_bytes] = \
        src.view(np.uint8).reshape(slices, rows, row_bytes)
    stored = buf.view(x.dtype)
    if channels_last:
        return stored.reshape(padded[0], *padded[2:], padded[1]).transpose(0, x.ndim - 1, *range(1, x.ndim - 1))
    return stored.reshape(padded)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape, begin, end", [
    ((2, 3, 9, 11), [0, 0], [1, 1]),     # SAME, stride 2, even input
    ((1, 5, 8, 7), [1, 0], [2, 1]),      # one pad in both, a second only at the end
    ((3, 2, 6, 5), [2, 3], [0, 1]),      # more at the start
    ((2, 4, 13), [0], [1]),              # 1-d
    ((1, 1, 1, 17), [0, 2], [1, 0]),     # height 1
])
def test_the_padded_copy_holds_x_as_the_pads_ask(rng, shape, begin, end, channels_last, dtype):
    # ONNX's conv reads x padded by (begin, end); cuDNN reads the copy padded
    # by the smaller pad at both ends: the two must be the same array.
    x = rng.standard_normal(shape).astype(dtype)
    elem = np.dtype(dtype).itemsize
    plan = twinfer._core._test_conv_input_pad(list(shape), begin, end, channels_last, elem)
    assert plan is not None
    padded, pads = plan[0], plan[1]
    assert pads == [min(b, e) for b, e in zip(begin, end)]
    copy = replay_copy(x, plan, channels_last)
    assert list(copy.shape) == padded
    spatial = [(0, 0), (0, 0)]
    onnx_reads = np.pad(x, spatial + list(zip(begin, end)))
    cudnn_reads = np.pad(copy, spatial + [(p, p) for p in pads])
    np.testing.assert_array_equal(cudnn_reads, onnx_reads)


def test_three_spatial_dims_are_refused():
    assert twinfer._core._test_conv_input_pad([1, 2, 4, 5, 6], [0, 0, 0], [1, 1, 1], False, 4) is None


F = TensorProto.FLOAT


def _same_padded_net(rng):
    """tf2onnx's stride-2 SAME convs: a full conv and a depthwise one padded
    (0, 1) per dim, a 3x3 padded (1, 2) / (0, 1), a 1-d one, Relu between."""
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                       name)

    inits = [w("w1", 16, 3, 3, 3), w("w2", 16, 1, 3, 3), w("w3", 8, 16, 3, 3), w("w4", 8, 8, 4),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(np.array([0, 8, -1], np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[0, 0, 1, 1], name="same"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, strides=[2, 2], pads=[0, 0, 1, 1], name="depthwise"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 0, 2, 1], name="lopsided"),
        helper.make_node("Reshape", ["c3", "flat"], ["seq"]),
        helper.make_node("Conv", ["seq", "w4"], ["y"], strides=[2], pads=[1, 2], name="conv1d"),
    ]
    g = helper.make_graph(nodes, "same", [helper.make_tensor_value_info("x", F, ["N", 3, 23, 30])],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


TOL = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 1e-2, "bf16": 6e-2}


def _check_on(device, precision, rng, **options):
    m = _same_padded_net(rng)
    x = rng.standard_normal((2, 3, 23, 30)).astype(np.float32)
    want = run_ort(m, {"x": x})[0]
    e = twinfer.load(m, device=device, precision=precision, sim_coverage="cuda", allow_cpu_fallback=False, **options)
    got = e.run({"x": x})["y"].numpy()
    assert got.shape == want.shape and rel_err(got, want) < TOL[precision]
    rows = e.kernel_report({"x": x.shape})
    assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    convs = [r for r in rows if r.op.endswith("Conv")]
    assert len(convs) == 4, convs
    return convs


@pytest.mark.parametrize("device", [SIM_AS_CUDA])
@pytest.mark.parametrize("channels_last", ["0", "1"])
def test_unequally_padded_convs_stay_on_the_device(device, channels_last, rng, monkeypatch):
    # Each conv of the net placed on the (simulated) CUDA device, none on the
    # CPU, and the net's output as onnxruntime's; also with the plan's
    # channels-last rewrite on (the fp16 / tf32 default on a GPU).
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", channels_last)
    convs = _check_on(device, "fp32", rng)
    if channels_last == "1":
        assert any(r.op.startswith("com.twinfer.nhwc::") for r in convs), convs


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("depthwise", ["cudnn", "ours"])
def test_unequally_padded_convs_on_cuda(precision, depthwise, rng, monkeypatch):
    # fp16 / bf16 / tf32: channels-last, so the copy is of NHWC rows; the
    # depthwise layer by cuDNN or by our kernel, both on the padded copy.
    monkeypatch.setenv("TWINFER_DEPTHWISE", depthwise)
    convs = _check_on("cuda", precision, rng)
    for r in convs:
        assert "x copied with its unequal pads first" in r.kernel, r
