"""GridSample, AffineGrid, RoiAlign, LpPool, Col2Im and DeformConv on the device
(csrc/backends/cuda/vision.cu) against the ONNX reference evaluator, on fresh
random data with odd sizes: every GridSample mode x padding x align_corners
in 2-D (also with NaN in the grid, against PyTorch's rule where the reference
evaluator has none), linear / nearest in 3-D, AffineGrid 2-D / 3-D, RoiAlign avg / max in
both coordinate modes, LpPool p = 1 / 2 / 3 over 1-3 spatial dims with pads,
strides, dilations and ceil_mode, Col2Im 1-D to 3-D, DeformConv with groups,
offset groups, bias and mask.

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: each has a CUDA kernel whose
supports() takes it) and run by the CPU kernel, which shares its coordinate
and window math with the CUDA kernel (csrc/ops/vision/*_math.h); on a GPU the
CUDA kernel itself runs. float16 cases (GridSample, AffineGrid, LpPool, whose
CPU kernels take 16-bit floats in float as CUDA's do) compare with the
reference's float32 result."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

from conftest import SIM_AS_CUDA
from grid_sample_nan_ref import expected_grid_sample, grid_with_nan
from onnx_helpers import make_model, run_on_device, run_ort, run_reference

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
TOL = {np.float32: (2e-5, 2e-5), np.float64: (1e-5, 1e-5), np.float16: (1e-2, 1e-2), np.int32: (0, 0)}


def _run_device(model, feeds, device):
    out = run_on_device(model, feeds, device)
    return [out[o.name] for o in model.graph.output]


def _check(model, feeds, device, dtype, ref_feeds=None, ref=run_reference):
    """Runs `model` on the device and compares with `ref` (the reference
    evaluator, or onnxruntime where the evaluator departs from the spec), fed
    `ref_feeds` (model, feeds) when given: the float32 form of a float16 case."""
    got = _run_device(model, feeds, device)
    want = ref(model if ref_feeds is None else ref_feeds[0], feeds if ref_feeds is None else ref_feeds[1])
    rtol, atol = TOL[dtype]
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol)


def _f16_pair(build, feeds):
    """(float16 model, its feeds) and the float32 (model, feeds) the reference runs."""
    m16 = build(np.float16)
    m32 = build(np.float32)
    f16 = {k: (v.astype(np.float16) if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    f32 = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in f16.items()}
    return m16, f16, (m32, f32)


# ---- GridSample ---------------------------------------------------------------------

def _grid_sample_model(dt, xs, gs, mode, pad, align, opset=20):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=align)
    ys = [xs[0], xs[1], *gs[1:-1]]
    return make_model([node], [("x", dt, list(xs)), ("g", dt, list(gs))], [("y", dt, ys)], opset=opset)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,pad,align", list(itertools.product(["nearest", "linear", "cubic"],
                                                                  ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d(device, mode, pad, align, rng):
    xs, gs = (2, 3, 5, 7), (2, 4, 6, 2)
    x = rng.standard_normal(xs).astype(np.float32)
    g = rng.uniform(-1.4, 1.4, gs).astype(np.float32)  # some points outside, for the padding modes
    _check(_grid_sample_model(np.float32, xs, gs, mode, pad, align), {"x": x, "g": g}, device, np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,pad", [("bilinear", "reflection"), ("bicubic", "border"), ("nearest", "zeros")])
def test_grid_sample_opset16_float64(device, mode, pad, rng):
    xs, gs = (1, 2, 6, 5), (1, 3, 7, 2)
    x = rng.standard_normal(xs)
    g = rng.uniform(-3.5, 3.5, gs)  # several reflections
    # The reference evaluator knows the opset-20 names only: it runs that form.
    ref = _grid_sample_model(np.float64, xs, gs, {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode), pad, 0)
    _check(_grid_sample_model(np.float64, xs, gs, mode, pad, 0, opset=16), {"x": x, "g": g}, device, np.float64,
           (ref, {"x": x, "g": g}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,pad,align", [("linear", "zeros", 0), ("linear", "border", 1),
                                            ("linear", "reflection", 0), ("nearest", "zeros", 1),
                                            ("nearest", "reflection", 0)])
def test_grid_sample_3d(device, mode, pad, align, rng):
    xs, gs = (2, 3, 4, 5, 3), (2, 3, 2, 5, 3)
    x = rng.standard_normal(xs).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, gs).astype(np.float32)
    _check(_grid_sample_model(np.float32, xs, gs, mode, pad, align), {"x": x, "g": g}, device, np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,pad,align", list(itertools.product(["nearest", "linear", "cubic"],
                                                                  ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_nan_grid(device, mode, pad, align, rng):
    """NaN in the grid, where the reference evaluator has no answer: PyTorch's
    CUDA rule (tests/grid_sample_nan_ref.py), which the CPU kernel follows too."""
    xs, gs = (2, 3, 5, 7), (2, 4, 6, 2)
    x = rng.standard_normal(xs).astype(np.float32)
    g = grid_with_nan(rng, gs)
    _check(_grid_sample_model(np.float32, xs, gs, mode, pad, align), {"x": x, "g": g}, device, np.float32,
           ref=lambda m, f: [expected_grid_sample(f["x"], f["g"], mode, pad, align)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,pad", [("nearest", "zeros"), ("linear", "zeros"), ("linear", "border"),
                                      ("nearest", "reflection")])
def test_grid_sample_nan_grid_3d_float16(device, mode, pad, rng):
    """NaN in a float16 grid of a 3-D sample (a NaN survives the 16-bit load)."""
    xs, gs = (1, 2, 3, 4, 5), (1, 2, 3, 4, 3)
    feeds = {"x": rng.standard_normal(xs), "g": grid_with_nan(rng, gs, dtype=np.float64)}
    m16, f16, (m32, f32) = _f16_pair(lambda dt: _grid_sample_model(dt, xs, gs, mode, pad, 0), feeds)
    _check(m16, f16, device, np.float16, (m32, f32),
           ref=lambda m, f: [expected_grid_sample(f["x"], f["g"], mode, pad, 0)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_grid_sample_float16(device, mode, rng):
    xs, gs = (2, 3, 5, 6), (2, 3, 4, 2)
    feeds = {"x": rng.standard_normal(xs), "g": rng.uniform(-1.2, 1.2, gs)}
    m16, f16, ref = _f16_pair(lambda dt: _grid_sample_model(dt, xs, gs, mode, "border", 0), feeds)
    _check(m16, f16, device, np.float16, ref)


# ---- AffineGrid ---------------------------------------------------------------------

def _affine_model(dt, size, align):
    nsp = len(size) - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)
    ys = [size[0], *size[2:], nsp]
    return make_model([node], [("theta", dt, [size[0], nsp, nsp + 1])], [("y", dt, ys)],
                      initializers=[("size", np.array(size, np.int64))], opset=20)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 1, 3, 4, 5), (1, 1, 1, 6)])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_affine_grid(device, size, align, dt, rng):
    nsp = len(size) - 2
    th = rng.standard_normal((size[0], nsp, nsp + 1)).astype(dt)
    _check(_affine_model(dt, size, align), {"theta": th}, device, dt)


@pytest.mark.parametrize("device", DEVICES)
def test_affine_grid_float16(device, rng):
    size = (2, 3, 5, 6)
    feeds = {"theta": rng.standard_normal((2, 2, 3))}
    m16, f16, ref = _f16_pair(lambda dt: _affine_model(dt, size, 0), feeds)
    _check(m16, f16, device, np.float16, ref)


# ---- RoiAlign -----------------------------------------------------------------------

def _roi_model(dt, xs, R, opset=16, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], **attrs)
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    return make_model([node], [("x", dt, list(xs)), ("rois", dt, [R, 4]), ("bi", np.int64, [R])],
                      [("y", dt, [R, xs[1], oh, ow])], opset=opset)


def _rois(rng, R, H, W, scale):
    x1 = rng.uniform(-1, W / scale * 0.8, R)
    y1 = rng.uniform(-1, H / scale * 0.8, R)
    x2 = x1 + rng.uniform(0.2, W / scale * 0.6, R)
    y2 = y1 + rng.uniform(0.2, H / scale * 0.6, R)
    return np.stack([x1, y1, x2, y2], 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(device, mode, ctm, ratio, rng):
    xs, R, scale = (3, 4, 11, 9), 5, 0.5
    x = rng.standard_normal(xs).astype(np.float32)
    rois = _rois(rng, R, xs[2], xs[3], scale).astype(np.float32)
    bi = rng.integers(0, xs[0], R).astype(np.int64)
    m = _roi_model(np.float32, xs, R, mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=ratio,
                   spatial_scale=scale, output_height=3, output_width=4)
    _check(m, {"x": x, "rois": rois, "bi": bi}, device, np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_float64_opset10(device, rng):
    xs, R = (2, 3, 8, 10), 4
    x = rng.standard_normal(xs)
    rois = _rois(rng, R, xs[2], xs[3], 1.0)
    bi = rng.integers(0, xs[0], R).astype(np.int64)
    m = _roi_model(np.float64, xs, R, opset=10, output_height=2, output_width=5, sampling_ratio=0)
    # The reference evaluator applies half_pixel at opset 10 too; onnxruntime
    # (and the CPU kernel) output_half_pixel, the opset-10 behaviour.
    _check(m, {"x": x, "rois": rois, "bi": bi}, device, np.float64, ref=run_ort)


# ---- LpPool -------------------------------------------------------------------------

def _lp_model(dt, xs, ys, **attrs):
    node = helper.make_node("LpPool", ["x"], ["y"], **attrs)
    return make_model([node], [("x", dt, list(xs))], [("y", dt, list(ys))], opset=18)


LP_CASES = [
    # x shape, attrs
    ((2, 3, 11), dict(kernel_shape=[3], p=2)),
    ((2, 3, 11), dict(kernel_shape=[4], strides=[2], pads=[1, 2], p=1)),
    ((1, 2, 7, 9), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3)),
    ((1, 2, 7, 9), dict(kernel_shape=[2, 3], dilations=[2, 1], p=2)),
    ((1, 2, 8, 9), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, p=2)),
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", p=2)),
    ((2, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0], p=3)),
]


def _lp_out(xs, a):
    nsp = len(xs) - 2
    k = a["kernel_shape"]
    s = a.get("strides", [1] * nsp)
    d = a.get("dilations", [1] * nsp)
    p = a.get("pads", [0] * 2 * nsp)
    out = list(xs[:2])
    for i in range(nsp):
        if a.get("auto_pad", "NOTSET").startswith("SAME"):
            out.append(-(-xs[2 + i] // s[i]))
            continue
        span = xs[2 + i] + p[i] + p[nsp + i] - ((k[i] - 1) * d[i] + 1)
        o = (-(-span // s[i]) if a.get("ceil_mode") else span // s[i]) + 1
        if a.get("ceil_mode") and (o - 1) * s[i] >= xs[2 + i] + p[i]:
            o -= 1
        out.append(o)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(LP_CASES)))
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_lp_pool(device, case, dt, rng):
    xs, a = LP_CASES[case]
    x = rng.standard_normal(xs).astype(dt)
    # onnxruntime: the reference evaluator's ceil_mode windows read past the
    # input. onnxruntime has no float64 LpPool: float64 compares with its
    # float32 result (within float64's tolerance of 1e-5).
    ys = _lp_out(xs, a)
    r32 = (_lp_model(np.float32, xs, ys, **a), {"x": x.astype(np.float32)})
    _check(_lp_model(dt, xs, ys, **a), {"x": x}, device, dt, r32, ref=run_ort)


@pytest.mark.parametrize("device", DEVICES)
def test_lp_pool_float16(device, rng):
    xs, a = LP_CASES[2]
    feeds = {"x": rng.standard_normal(xs)}
    m16, f16, ref = _f16_pair(lambda dt: _lp_model(dt, xs, _lp_out(xs, a), **a), feeds)
    _check(m16, f16, device, np.float16, ref, ref=run_ort)


# ---- Col2Im -------------------------------------------------------------------------

def _col2im_model(dt, xs, image, block, **attrs):
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    K = int(np.prod(block))
    ys = [xs[0], xs[1] // K, *image]
    return make_model([node], [("x", dt, list(xs))], [("y", dt, ys)],
                      initializers=[("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))],
                      opset=18)


def _col2im_L(image, block, a):
    nsp = len(image)
    d = a.get("dilations", [1] * nsp)
    p = a.get("pads", [0] * 2 * nsp)
    s = a.get("strides", [1] * nsp)
    L = 1
    for i in range(nsp):
        L *= (image[i] + p[i] + p[nsp + i] - (d[i] * (block[i] - 1) + 1)) // s[i] + 1
    return L


COL2IM_CASES = [
    ([5, 7], [2, 3], {}),
    ([6, 7], [3, 2], dict(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2])),
    ([9], [3], dict(strides=[2], pads=[1, 1])),
    ([4, 5, 3], [2, 2, 2], dict(pads=[1, 0, 0, 0, 1, 1])),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(COL2IM_CASES)))
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32])
def test_col2im(device, case, dt, rng):
    image, block, a = COL2IM_CASES[case]
    C, N = 3, 2
    xs = (N, C * int(np.prod(block)), _col2im_L(image, block, a))
    x = (rng.integers(-50, 50, xs) if dt == np.int32 else rng.standard_normal(xs)).astype(dt)
    if dt == np.int32:
        # The reference evaluator's Col2Im works in floats: compare with its float64 result.
        got = _run_device(_col2im_model(dt, xs, image, block, **a), {"x": x}, device)[0]
        want = run_reference(_col2im_model(np.float64, xs, image, block, **a), {"x": x.astype(np.float64)})[0]
        np.testing.assert_array_equal(got, want.astype(np.int32))
        return
    _check(_col2im_model(dt, xs, image, block, **a), {"x": x}, device, dt)


# ---- DeformConv ---------------------------------------------------------------------

def _deform_model(dt, xs, ws, ys, og, bias, mask, **attrs):
    K = ws[2] * ws[3]
    ins = ["x", "w", "off", "b" if bias else "", "m" if mask else ""]
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("DeformConv", ins, ["y"], offset_group=og, **attrs)
    inputs = [("x", dt, list(xs)), ("w", dt, list(ws)), ("off", dt, [xs[0], og * 2 * K, ys[2], ys[3]])]
    if bias:
        inputs.append(("b", dt, [ws[0]]))
    if mask:
        inputs.append(("m", dt, [xs[0], og * K, ys[2], ys[3]]))
    return make_model([node], inputs, [("y", dt, list(ys))], opset=19)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group,og,bias,mask,attrs", [
    (1, 1, False, False, {}),
    (1, 2, True, True, dict(pads=[1, 1, 1, 1])),
    (2, 1, True, False, dict(strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 1])),
    (2, 2, False, True, {}),
])
def test_deform_conv(device, group, og, bias, mask, attrs, rng):
    N, C, H, W, M, kh, kw = 2, 4, 6, 7, 6, 3, 2
    xs, ws = (N, C, H, W), (M, C // group, kh, kw)
    s = attrs.get("strides", [1, 1])
    d = attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    OH = (H + p[0] + p[2] - (d[0] * (kh - 1) + 1)) // s[0] + 1
    OW = (W + p[1] + p[3] - (d[1] * (kw - 1) + 1)) // s[1] + 1
    ys = (N, M, OH, OW)
    K = kh * kw
    feeds = {
        "x": rng.standard_normal(xs).astype(np.float32),
        "w": rng.standard_normal(ws).astype(np.float32),
        "off": rng.uniform(-2, 2, (N, og * 2 * K, OH, OW)).astype(np.float32),
    }
    if bias:
        feeds["b"] = rng.standard_normal(M).astype(np.float32)
    if mask:
        feeds["m"] = rng.uniform(0, 1, (N, og * K, OH, OW)).astype(np.float32)
    m = _deform_model(np.float32, xs, ws, ys, og, bias, mask, group=group, kernel_shape=[kh, kw], **attrs)
    _check(m, feeds, device, np.float32)
