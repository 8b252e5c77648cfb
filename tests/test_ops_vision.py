"""Vision ops on the CPU (Resize / Upsample, ConvTranspose, LRN, LpPool,
GroupNormalization, RoiAlign, GridSample, AffineGrid, Col2Im, DeformConv,
MaxUnpool, CenterCropPad), each against onnxruntime or, where onnxruntime
has no kernel for the case, the ONNX reference evaluator, on fresh random
data with odd sizes; plus bad inputs raising twinfer errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

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
