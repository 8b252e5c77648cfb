"""Vision ops on the CPU (Resize / Upsample, ConvTranspose, LRN, LpPool,
GroupNormalization, RoiAlign, GridSample, AffineGrid, Col2Im, DeformConv,
MaxUnpool, CenterCropPad), each against onnxruntime or, where onnxruntime
has no kernel for the case, the ONNX reference evaluator, on fresh random
data with odd sizes; plus bad inputs raising twinfer errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from onnx import helper

from grid_sample_nan_ref import expected_grid_sample, grid_with_nan, torch_grid_sample_2d
from op_cases import F32, F64, I64, Const, build, check, expect_error, out_shapes, rand, reference, run
from onnx_helpers import assert_close, run_reference

TOL = dict(rtol=1e-4, atol=1e-4)


def ref_eval(model, feeds):
    return [np.asarray(o) for o in run_reference(model, feeds)]


def check_ref(op, inputs, attrs=None, opset=19, out=None, **tol):
    """Like check() but always against the ONNX reference evaluator."""
    model, feeds = build(op, inputs, attrs, out, opset)
    got = run(model, feeds)
    exp = ref_eval(model, feeds)
    for g, e in zip(got, exp):
        assert_close(g, e.astype(g.dtype) if e.dtype != g.dtype and g.dtype.kind == "f" else e,
                     what=op, **(tol or TOL))
    return got


# ----------------------------------------------------------------------------- Resize / Upsample

NO_ROI = Const(np.zeros(0, np.float32))


def scales_const(*s):
    return Const(np.array(s, np.float32))


def sizes_const(*s):
    return Const(np.array(s, np.int64))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize("dtype", [F32, np.dtype(np.uint8)])
def test_resize_nearest(nearest_mode, coord, dtype):
    rng = np.random.default_rng(1)
    x = rand(rng, (2, 3, 5, 7), dtype)
    attrs = dict(mode="nearest", nearest_mode=nearest_mode, coordinate_transformation_mode=coord)
    # Sizes (exact scales) up and down; scales only where onnxruntime and the spec agree.
    check("Resize", [("x", x), ("roi", NO_ROI), ("scales", None), ("sizes", sizes_const(2, 3, 11, 4))], attrs,
          opset=19)
    check("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2, 3))], attrs, opset=19)


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners",
                                   "half_pixel_symmetric"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_interpolating(mode, coord):
    rng = np.random.default_rng(2)
    x = rand(rng, (2, 3, 9, 6), F32)
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    for sizes in [(2, 3, 17, 13), (2, 3, 4, 5), (2, 3, 9, 1)]:
        check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", None), ("sizes", sizes_const(*sizes))], attrs)
    check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2, 0.7))], attrs)


def test_resize_linear_matches_onnxruntime_threaded():
    # The common detector path: 2x bilinear / nearest on NCHW, several threads.
    rng = np.random.default_rng(3)
    x = rand(rng, (1, 19, 33, 41), F32)
    for mode in ["linear", "nearest"]:
        for threads in [1, 3]:
            check("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2, 2))], dict(mode=mode),
                  opset=13, num_threads=threads, **TOL)
    # Every axis resized (no leading planes): the passes thread themselves.
    check("Resize", [("x", rand(rng, (37, 29), F32)), ("roi", NO_ROI), ("scales", scales_const(2, 3))],
          dict(mode="linear"), opset=13, num_threads=2, **TOL)


def test_resize_cubic_options():
    rng = np.random.default_rng(4)
    x = rand(rng, (1, 2, 8, 7), F32)
    attrs = dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    check("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 1.5, 0.6))], attrs, opset=13, **TOL)
    # (the reference evaluator computes cubic weights in float32: cubic_coeff_a is a float32)
    check_ref("Resize", [("x", x.astype(F64)), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2.5, 0.5))], attrs,
              rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode):
    rng = np.random.default_rng(5)
    x = rand(rng, (1, 2, 15, 16), F32)
    attrs = dict(mode=mode, antialias=1)
    check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 0.4, 0.55))], attrs)
    check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", None), ("sizes", sizes_const(1, 2, 6, 21))], attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    rng = np.random.default_rng(6)
    x = rand(rng, (1, 2, 7, 9), F32)
    roi = Const(np.array([0, 0, -0.2, 0.3, 1, 1, 0.7, 1.3], np.float32))
    attrs = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.5)
    check_ref("Resize", [("x", x), ("roi", roi), ("scales", None), ("sizes", sizes_const(1, 2, 5, 8))], attrs)


def test_resize_axes_and_aspect_policy():
    rng = np.random.default_rng(7)
    x = rand(rng, (2, 5, 6, 3), F32)
    for policy in ["stretch", "not_larger", "not_smaller"]:
        attrs = dict(mode="linear", axes=[2, 1], keep_aspect_ratio_policy=policy)
        check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", None), ("sizes", sizes_const(13, 7))], attrs)
    # (the reference evaluator mishandles negative axes; onnxruntime here)
    check("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(0.5, 3))],
          dict(mode="nearest", axes=[-1, 0]), opset=19)


def test_resize_scales_fed_at_run_time():
    rng = np.random.default_rng(8)
    x = rand(rng, (1, 3, 5, 6), F32)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    model, feeds = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales)], dict(mode="linear"), opset=13)
    assert_close(run(model, feeds)[0], reference(model, feeds)[0], **TOL)
    sizes = np.array([1, 3, 4, 11], np.int64)
    model, feeds = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", None), ("sizes", sizes)],
                         dict(mode="nearest"), opset=13)
    assert_close(run(model, feeds)[0], reference(model, feeds)[0])


def test_resize_int_and_double_dtypes():
    rng = np.random.default_rng(9)
    for dt in [np.dtype(np.int32), F64, np.dtype(np.float16)]:
        x = rand(rng, (1, 2, 5, 4), dt)
        check_ref("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 1.6, 2))],
                  dict(mode="linear"), rtol=1e-3, atol=1e-3)


def test_resize_opset10_and_upsample():
    rng = np.random.default_rng(10)
    x = rand(rng, (1, 2, 3, 5), F32)
    check("Resize", [("x", x), ("scales", scales_const(1, 1, 2, 3))], dict(mode="nearest"), opset=10)
    check("Resize", [("x", x), ("scales", scales_const(1, 1, 2, 1.5))], dict(mode="linear"), opset=10, **TOL)
    check("Upsample", [("x", x), ("scales", scales_const(1, 1, 2, 3))], dict(mode="nearest"), opset=9)
    check("Upsample", [("x", x), ("scales", scales_const(1, 1, 2, 2))], dict(mode="linear"), opset=9, **TOL)
    check("Upsample", [("x", x)], dict(mode="nearest", scales=[1.0, 1.0, 3.0, 2.0]), opset=7)


def test_resize_symbolic_shapes():
    x = np.zeros((1, 3, 4, 6), np.float32)
    model, _ = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2, 2))],
                     dict(mode="nearest"), opset=13, sym_inputs={"x": ["N", 3, 4, "W"]})
    assert out_shapes(model)[0] == ("N", 3, 8, None)


def test_resize_bad_inputs():
    x = np.zeros((1, 3, 4, 6), np.float32)
    model, feeds = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, -2, 2))], {}, opset=13)
    expect_error(model, feeds, "scales must be positive")
    model, feeds = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 2, 2))], {}, opset=13)
    expect_error(model, feeds, "scales has 3 values")
    model, feeds = build("Resize", [("x", x), ("roi", NO_ROI), ("scales", scales_const(1, 1, 2, 2))],
                         dict(mode="bogus"), opset=13)
    expect_error(model, feeds, "bogus")


# ----------------------------------------------------------------------------- ConvTranspose


@pytest.mark.parametrize("case", [
    dict(),
    dict(strides=[2, 3], pads=[1, 0, 2, 1]),
    dict(strides=[2, 2], output_padding=[1, 1]),              # past the last contribution: reference kernel
    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(strides=[3, 2], output_shape=[10, 8]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 1], auto_pad="SAME_LOWER", dilations=[2, 2]),
    dict(group=3, strides=[2, 2]),
])
@pytest.mark.parametrize("const_w", [True, False])
def test_conv_transpose(case, const_w):
    rng = np.random.default_rng(11)
    g = case.get("group", 1)
    x = rand(rng, (2, 6, 5, 4), F32)
    w = rand(rng, (6, 5 // 1 if g == 1 else 2, 3, 3), F32)
    b = rand(rng, (w.shape[1] * g,), F32)
    check("ConvTranspose", [("x", x), ("w", Const(w) if const_w else w), ("b", b)], case, opset=17, **TOL)


@pytest.mark.parametrize("kernel", [(2, 2), (3, 3), (2, 3), (1, 1), (4, 1)])
@pytest.mark.parametrize("bias", ["const", "input", None])
def test_conv_transpose_whose_windows_tile_the_output(kernel, bias):
    """stride == kernel, no padding: one 1x1 convolution to M*kh*kw channels
    and a shuffle into the output's blocks (backends/cpu/onednn_deconv_shuffle.cc;
    kw = 2 has its own interleave). A bias that is a graph input goes to
    oneDNN's deconvolution instead. Reference: the ONNX reference evaluator."""
    import twinfer

    rng = np.random.default_rng(13)
    x = rand(rng, (2, 5, 6, 9), F32)
    w = rand(rng, (5, 7) + kernel, F32)
    b = rand(rng, (7,), F32)
    inputs = [("x", x), ("w", Const(w))] + {"const": [("b", Const(b))], "input": [("b", b)], None: []}[bias]
    check("ConvTranspose", inputs, dict(strides=list(kernel)), opset=17, **TOL)
    model, _ = build("ConvTranspose", inputs, dict(strides=list(kernel)), None, 17)
    name = twinfer.load(model.SerializeToString(), device="cpu").kernel_report()[0].kernel
    assert ("shuffle" in name) == (bias != "input"), name


def test_conv_transpose_1d_3d_and_double():
    rng = np.random.default_rng(12)
    check("ConvTranspose", [("x", rand(rng, (1, 3, 7), F32)), ("w", Const(rand(rng, (3, 2, 4), F32)))],
          dict(strides=[3]), opset=17, **TOL)
    check("ConvTranspose", [("x", rand(rng, (1, 2, 3, 4, 3), F32)), ("w", Const(rand(rng, (2, 3, 2, 2, 3), F32)))],
          dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1]), opset=17, **TOL)
    check("ConvTranspose", [("x", rand(rng, (2, 4, 5, 3), F64)), ("w", rand(rng, (4, 3, 2, 3), F64))],
          dict(strides=[2, 2], output_padding=[1, 0]), opset=17, rtol=1e-10, atol=1e-10)


def test_conv_transpose_bad_shapes():
    x = np.zeros((1, 4, 5, 5), np.float32)
    model, feeds = build("ConvTranspose", [("x", x), ("w", Const(np.zeros((3, 2, 3, 3), np.float32)))], {})
    expect_error(model, feeds, "channels")


# ----------------------------------------------------------------------------- LRN / LpPool / GroupNormalization


@pytest.mark.parametrize("attrs", [dict(size=5), dict(size=4, alpha=2e-3, beta=0.6, bias=2.0), dict(size=1)])
def test_lrn(attrs):
    # onnxruntime takes odd sizes on 4-D inputs only, and the reference
    # evaluator's window loop runs over the batch dim: NumPy for the rest.
    def numpy_lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
        sq = np.zeros_like(x)
        for c in range(x.shape[1]):
            lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + size // 2 + 1)
            sq[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
        return x / (bias + alpha / size * sq) ** beta

    rng = np.random.default_rng(13)
    x = rand(rng, (2, 7, 5, 6), F32)
    if attrs["size"] % 2:
        check("LRN", [("x", x)], attrs, opset=13, **TOL)
    x64 = rand(rng, (1, 6, 9, 2, 2), F64)
    model, feeds = build("LRN", [("x", x64)], attrs, opset=13)
    f32_attrs = {k: (v if k == "size" else float(np.float32(v))) for k, v in attrs.items()}  # as stored
    assert_close(run(model, feeds)[0], numpy_lrn(x64, **f32_attrs), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2], p=3),
    dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", p=1),
    dict(kernel_shape=[2, 3], dilations=[2, 1], ceil_mode=1, strides=[2, 2]),
])
def test_lp_pool(attrs):
    # (onnxruntime: the reference evaluator places ceil_mode windows differently)
    rng = np.random.default_rng(14)
    check("LpPool", [("x", rand(rng, (2, 3, 7, 8), F32))], attrs, opset=18, **TOL)


def test_lp_pool_1d_3d():
    rng = np.random.default_rng(15)
    check("LpPool", [("x", rand(rng, (1, 2, 9), F32))], dict(kernel_shape=[3], strides=[2]), opset=11, **TOL)
    check("LpPool", [("x", rand(rng, (1, 2, 4, 5, 3), F32))], dict(kernel_shape=[2, 2, 2]), opset=11, **TOL)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (1, 4, 9), (1, 2, 3, 4, 5)])
def test_global_lp_pool(p, shape):
    # Refused as unsupported before.
    rng = np.random.default_rng(18)
    check("GlobalLpPool", [("x", rand(rng, shape, F32))], dict(p=p), opset=18, **TOL)


@pytest.mark.parametrize("opset,per_group", [(18, True), (21, False)])
def test_group_normalization(opset, per_group):
    rng = np.random.default_rng(16)
    x = rand(rng, (2, 6, 5, 3), F32)
    n = 3 if per_group else 6
    check_ref("GroupNormalization", [("x", x), ("s", rand(rng, (n,), F32)), ("b", rand(rng, (n,), F32))],
              dict(num_groups=3, epsilon=1e-3), opset=opset)


def test_group_normalization_bad_groups():
    x = np.zeros((1, 6, 2, 2), np.float32)
    model, feeds = build("GroupNormalization", [("x", x), ("s", np.ones(6, np.float32)), ("b", np.ones(6, np.float32))],
                         dict(num_groups=4), opset=21)
    expect_error(model, feeds, "groups")


# ----------------------------------------------------------------------------- RoiAlign / GridSample / AffineGrid


@pytest.mark.parametrize("attrs", [
    dict(output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5),
    dict(output_height=2, output_width=5, coordinate_transformation_mode="output_half_pixel"),
    dict(output_height=3, output_width=3, mode="max", sampling_ratio=2),
    # Adaptive grid at a scale of 0.8: 0.8 * 6 - 0.8 * 1 is 4.0 in float32,
    # 4.0000002 in double, where ceil over the bins took one more sample.
    dict(output_height=2, output_width=4, sampling_ratio=0, spatial_scale=0.8),
    dict(output_height=4, output_width=2, sampling_ratio=0, spatial_scale=0.8, mode="max"),
])
def test_roi_align(attrs):
    rng = np.random.default_rng(17)
    x = rand(rng, (2, 3, 11, 9), F32)
    rois = np.array([[0, 0, 8, 7], [1.5, 2.2, 6.1, 9.9], [-2, -1, 3, 4], [4, 4, 30, 20], [1, 1, 6, 9], [1, 2, 11, 6]],
                    np.float32)
    check("RoiAlign", [("x", x), ("rois", rois), ("bi", np.array([0, 1, 1, 0, 1, 0], np.int64))], attrs, opset=16, **TOL)


def test_roi_align_bad_batch_index():
    x = np.zeros((1, 2, 5, 5), np.float32)
    model, feeds = build("RoiAlign", [("x", x), ("rois", np.zeros((1, 4), np.float32)), ("bi", np.array([3]))],
                         {}, opset=16)
    expect_error(model, feeds, "batch index 3")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, padding_mode, align):
    rng = np.random.default_rng(18)
    x = rand(rng, (2, 3, 5, 7), F32)
    grid = (rng.random((2, 4, 6, 2)) * 2.6 - 1.3).astype(np.float32)
    check_ref("GridSample", [("x", x), ("grid", grid)],
              dict(mode=mode, padding_mode=padding_mode, align_corners=align), opset=20)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_over_blocks_of_positions(mode, padding_mode):
    # The CPU kernel takes 128 output positions at a time (their taps, then
    # each channel): 273 positions are two whole blocks and 17 more, with
    # taps in and out of the zero padding.
    rng = np.random.default_rng(20)
    x = rand(rng, (2, 5, 9, 11), F32)
    grid = (rng.random((2, 13, 21, 2)) * 2.4 - 1.2).astype(np.float32)
    check_ref("GridSample", [("x", x), ("grid", grid)], dict(mode=mode, padding_mode=padding_mode), opset=20)


def test_grid_sample_volumetric_and_opset16():
    rng = np.random.default_rng(19)
    x = rand(rng, (1, 2, 3, 4, 5), F32)
    grid = (rng.random((1, 2, 3, 4, 3)) * 2.4 - 1.2).astype(np.float32)
    check_ref("GridSample", [("x", x), ("grid", grid)], dict(mode="linear"), opset=20)
    x = rand(rng, (1, 2, 6, 5), F32)
    grid = (rng.random((1, 3, 3, 2)) * 2 - 1).astype(np.float32)
    check("GridSample", [("x", x), ("grid", grid)], dict(mode="bilinear"), opset=16, **TOL)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_nan_grid(mode, padding_mode, align):
    """NaN in the grid: the ONNX reference has no answer (it raises for linear /
    cubic), so NaN points follow PyTorch's CUDA kernel (tests/grid_sample_nan_ref.py),
    the other points the reference evaluator."""
    rng = np.random.default_rng(21)
    x = rand(rng, (2, 3, 5, 7), F32)
    grid = grid_with_nan(rng, (2, 4, 6, 2))
    model, feeds = build("GridSample", [("x", x), ("grid", grid)],
                         dict(mode=mode, padding_mode=padding_mode, align_corners=align), opset=20)
    got = run(model, feeds)[0]
    want = expected_grid_sample(x, grid, mode, padding_mode, align)
    # At the NaN points the rule as expected_grid_sample states it is PyTorch's
    # (elsewhere they differ: cubic + border clamps the coordinate in ONNX, the
    # taps in PyTorch), and the case is live: NaN points give NaN (cubic) or numbers.
    nan_pos = np.broadcast_to(np.isnan(grid).any(axis=-1)[:, None], want.shape)
    if importlib.util.find_spec("torch") is not None:
        assert_close(torch_grid_sample_2d(x, grid, mode, padding_mode, align).astype(F32)[nan_pos], want[nan_pos],
                     what="the rule against PyTorch", **TOL)
    assert np.isnan(want[nan_pos]).all() == (mode == "cubic") and not np.isnan(want[~nan_pos]).any()
    assert_close(got, want, what="GridSample with NaN", **TOL)


@pytest.mark.parametrize("mode,padding_mode", [("nearest", "zeros"), ("nearest", "reflection"), ("linear", "zeros"),
                                               ("linear", "border"), ("linear", "reflection")])
def test_grid_sample_nan_grid_volumetric_float64(mode, padding_mode):
    rng = np.random.default_rng(22)
    x = rand(rng, (1, 2, 3, 4, 5), F64)
    grid = grid_with_nan(rng, (1, 2, 3, 4, 3), dtype=np.float64)
    model, feeds = build("GridSample", [("x", x), ("grid", grid)], dict(mode=mode, padding_mode=padding_mode),
                         opset=20)
    assert_close(run(model, feeds)[0], expected_grid_sample(x, grid, mode, padding_mode, 0),
                 what="GridSample 3-D with NaN", **TOL)


@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_grid_sample_float32_four_tap_blocks_keep_other_pixels_out(padding_mode):
    """float32 2-D linear: blocks of 128 positions whose taps all lie inside
    the input sum in float (four_tap_rows), with the other positions (a tap
    in the padding, wholly outside, NaN) given placeholder taps on pixel 0
    and written again by the general loop. Pixel (0, 0) is infinite, so a
    placeholder that leaked would show as inf or NaN where the reference has
    a number. Reference: the ONNX reference evaluator."""
    rng = np.random.default_rng(23)
    x = rand(rng, (2, 3, 40, 50), F32)
    x[:, :, 0, 0] = np.inf
    # Three blocks wholly inside (away from row and column 0), then the rest
    # spread over [-1.6, 1.6] with some NaN coordinates.
    grid = rng.uniform(-0.9, 0.95, (2, 9, 101, 2)).astype(np.float32)
    grid[:, 4:] = rng.uniform(-1.6, 1.6, (2, 5, 101, 2))
    grid[:, 6, ::7, 0] = np.nan
    model, feeds = build("GridSample", [("x", x), ("grid", grid)], dict(mode="linear", padding_mode=padding_mode),
                         opset=20)
    got = run(model, feeds)[0]
    want = expected_grid_sample(x, grid, "linear", padding_mode, 0)
    assert np.isfinite(got[:, :, :4]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert_close(got[fin], want[fin], what="GridSample four-tap blocks", **TOL)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(align):
    rng = np.random.default_rng(20)
    check_ref("AffineGrid", [("theta", rand(rng, (2, 2, 3), F32)), ("size", Const(np.array([2, 3, 5, 7])))],
              dict(align_corners=align), opset=20)
    check_ref("AffineGrid", [("theta", rand(rng, (1, 3, 4), F32)), ("size", Const(np.array([1, 1, 3, 4, 2])))],
              dict(align_corners=align), opset=20)


# ----------------------------------------------------------------------------- Col2Im / DeformConv / MaxUnpool / CenterCropPad


def test_col2im():
    rng = np.random.default_rng(21)
    # image 7x6, block 2x3, stride (2,1), pads (1,0,0,1), dilation (1,2): blocks (4, 3)
    attrs = dict(strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2])
    x = rand(rng, (2, 3 * 6, 4 * 3), F32)
    check("Col2Im", [("x", x), ("img", Const(np.array([7, 6]))), ("blk", Const(np.array([2, 3])))], attrs,
          opset=18, **TOL)
    bad = rand(rng, (2, 3 * 6, 5), F32)
    model, feeds = build("Col2Im", [("x", bad), ("img", Const(np.array([7, 6]))), ("blk", Const(np.array([2, 3])))],
                         attrs, opset=18)
    expect_error(model, feeds, "blocks")


@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(with_mask):
    rng = np.random.default_rng(22)
    x = rand(rng, (1, 4, 6, 5), F32)
    w = rand(rng, (6, 2, 2, 3), F32)
    # stride 1, pads (1,0,0,1): output 6 x 4; offset_group 2
    off = (rng.standard_normal((1, 2 * 2 * 6, 6, 4)) * 1.5).astype(np.float32)
    ins = [("x", x), ("w", w), ("off", off), ("b", rand(rng, (6,), F32))]
    if with_mask:
        ins.append(("mask", rng.random((1, 2 * 6, 6, 4)).astype(np.float32)))
    check_ref("DeformConv", ins, dict(group=2, offset_group=2, pads=[1, 0, 0, 1]), opset=19)


def test_max_unpool():
    rng = np.random.default_rng(23)
    x = rand(rng, (2, 3, 3, 4), F32)
    i = np.stack([rng.choice(2 * 3 * 6 * 8, size=3 * 4, replace=False) for _ in range(1)]).reshape(1, 1, 3, 4)
    idx = np.broadcast_to(np.arange(2 * 3).reshape(2, 3, 1, 1) * 48, (2, 3, 3, 4)) + (i % 48)
    idx = np.ascontiguousarray(idx).astype(np.int64)
    check("MaxUnpool", [("x", x), ("i", idx)], dict(kernel_shape=[2, 2], strides=[2, 2]), opset=11)
    check_ref("MaxUnpool", [("x", x), ("i", idx), ("os", Const(np.array([2, 3, 7, 9])))],
              dict(kernel_shape=[2, 2], strides=[2, 2]), opset=11)
    model, feeds = build("MaxUnpool", [("x", x), ("i", idx + 1000)], dict(kernel_shape=[2, 2], strides=[2, 2]),
                         opset=11)
    expect_error(model, feeds, "out of range")


@pytest.mark.parametrize("shape,axes", [((4, 9, 3), None), ((8, 2), [0, 1]), ((3, 6), [-1, 0])])
def test_center_crop_pad(shape, axes):
    rng = np.random.default_rng(24)
    x = rand(rng, (6, 5, 3), F32)
    attrs = {} if axes is None else dict(axes=axes)
    check_ref("CenterCropPad", [("x", x), ("s", Const(np.array(shape)))], attrs, opset=18)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("how", ["sizes", "scales"])
def test_resize_to_the_size_it_has_copies_the_input(mode, how):
    # Every axis an identity left no interpolation pass to run: nothing was
    # written, and the output held whatever memory it got (1e30, NaN, an
    # earlier result) -- F.interpolate(x, size=skip.shape[-2:]) in a U-Net
    # whose sizes already match.
    import onnxruntime as ort
    from onnx import TensorProto as TP

    import twinfer

    vi = helper.make_tensor_value_info
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 7)).astype(np.float32)
    if how == "sizes":
        node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode=mode)
        s = np.array([2, 3, 6, 7], np.int64)
        inputs = [vi("x", TP.FLOAT, ["n", 3, "h", "w"]), vi("s", TP.INT64, [4])]
    else:
        node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)
        s = np.ones(4, np.float32)
        inputs = [vi("x", TP.FLOAT, ["n", 3, "h", "w"]), vi("s", TP.FLOAT, [4])]
    m = helper.make_model(helper.make_graph([node], "g", inputs, [vi("y", TP.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 18)])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "s": s})[0]
    for device in ("cpu", "sim"):
        e = twinfer.load(m, device=device)
        for _ in range(3):  # fresh outputs each run: none may hold stale or unset memory
            np.testing.assert_allclose(e.run({"x": x, "s": s})["y"].numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(want, x, rtol=1e-6, atol=1e-6)


def test_max_roi_pool_matches_onnxruntime():
    # torchvision.ops.roi_pool exports to MaxRoiPool (it was an unsupported op).
    import onnxruntime as ort
    from onnx import TensorProto as TP

    import twinfer

    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 13, 17)).astype(np.float32)
    boxes = np.concatenate([rng.uniform(-4, 30, (9, 2)), rng.uniform(-4, 30, (9, 2))], axis=1)
    boxes = np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])], axis=1)
    rois = np.concatenate([rng.integers(0, 2, (9, 1)), boxes], axis=1).astype(np.float32)
    rois[0] = [1, 40, 40, 50, 50]  # outside the image: zeros
    vi = helper.make_tensor_value_info
    for pooled, scale in (((3, 4), 0.5), ((2, 2), 1.0), ((5, 1), 0.25)):
        node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=list(pooled), spatial_scale=scale)
        m = helper.make_model(helper.make_graph([node], "g", [vi("x", TP.FLOAT, list(x.shape)),
                                                              vi("rois", TP.FLOAT, ["r", 5])],
                                                [vi("y", TP.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "rois": rois})[0]
        got = twinfer.load(m).run({"x": x, "rois": rois})["y"].numpy()
        assert got.shape == want.shape == (9, 3) + pooled
        np.testing.assert_array_equal(got, want)
    bad = rois.copy()
    bad[3, 0] = 5
    with pytest.raises(twinfer.InvalidArgumentError, match="roi 3 names batch 5"):
        twinfer.load(m).run({"x": x, "rois": bad})
