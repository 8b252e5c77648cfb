"""The scatter family and the small index-arithmetic ops on the device
(csrc/backends/cuda/scatter.cu: ScatterElements, Scatter, ScatterND,
TensorScatter; tensor_fill.cu: OneHot, EyeLike, ReverseSequence,
CenterCropPad) against NumPy references written here, on fresh random data
with odd sizes: every reduction with duplicate and negative indices (applied
in index order, as the CPU kernel does), int32 and int64 indices, float32,
float16 and int64 data (and bool/uint8 where the op moves bytes).

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: each has a CUDA kernel whose
supports() takes it) and run by the CPU kernel; on a GPU the CUDA kernel
itself runs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_on_device

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]

ONNX_T = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
          np.int32: TensorProto.INT32, np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL,
          np.float64: TensorProto.DOUBLE}
REDUCTIONS = ["none", "add", "mul", "max", "min"]
DATA_TYPES = [np.float32, np.float16, np.int64]


def _model(nodes, inputs, outputs, opset=18, ir=10):
    g = helper.make_graph(nodes if isinstance(nodes, list) else [nodes], "k", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, ONNX_T[dt], list(shape))


def _run(m, feeds, device):
    return run_on_device(m, feeds, device)


def _data(rng, shape, dt):
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(-5, 6, shape).astype(dt)
    # mul over duplicates stays finite, and values near 1 keep float16 products in range
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dt)


def _combine(a, b, red):
    """One update into the current values, as the CPU kernel does: 16-bit
    floats in float32, rounded back each step; max/min as std::max/min."""
    dt = a.dtype
    if red == "none":
        return np.array(b, dtype=dt)
    c = np.float32 if dt == np.float16 else dt
    a, b = np.asarray(a, c), np.asarray(b, c)
    with np.errstate(over="ignore"):
        r = {"add": lambda: a + b, "mul": lambda: a * b, "max": lambda: np.where(a < b, b, a),
             "min": lambda: np.where(b < a, b, a)}[red]()
    return np.asarray(r).astype(dt)


def ref_scatter_elements(data, idx, upd, axis, red):
    out = data.copy()
    n = data.shape[axis]
    for ix in np.ndindex(*idx.shape):
        pos = list(ix)
        k = int(idx[ix])
        pos[axis] = k + n if k < 0 else k
        out[tuple(pos)] = _combine(out[tuple(pos)], upd[ix], red)
    return out


def ref_scatter_nd(data, idx, upd, red):
    out = data.copy()
    k = idx.shape[-1]
    rows = idx.reshape(-1, k).astype(np.int64)
    u = upd.reshape((rows.shape[0],) + data.shape[k:])
    for t, row in enumerate(rows):
        pos = tuple(int(v) + data.shape[q] if v < 0 else int(v) for q, v in enumerate(row))
        out[pos] = _combine(out[pos], u[t], red)
    return out


def _assert_equal(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# ---- ScatterElements / Scatter -------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(device, red, axis, rng):
    data_shape = (5, 7, 3)
    for dt in DATA_TYPES:
        for it in (np.int64, np.int32):
            ind_shape = list(data_shape)
            ax = axis % 3
            ind_shape[ax] = 9  # more updates than the axis: duplicates for sure
            ind_shape[(ax + 1) % 3] -= 1  # and a smaller index tensor
            n = data_shape[ax]
            idx = rng.integers(-n, n, ind_shape).astype(it)
            data, upd = _data(rng, data_shape, dt), _data(rng, ind_shape, dt)
            node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=red)
            m = _model(node, [_vi("d", dt, data_shape), _vi("i", it, ind_shape), _vi("u", dt, ind_shape)],
                       [_vi("y", dt, data_shape)])
            got = _run(m, {"d": data, "i": idx, "u": upd}, device)
            _assert_equal(got["y"], ref_scatter_elements(data, idx, upd, ax, red))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.float32, np.uint8, np.bool_])
def test_scatter_deprecated_alias(device, dt, rng):
    data_shape, ind_shape = (6, 11), (6, 4)
    idx = rng.integers(-11, 11, ind_shape).astype(np.int64)
    data, upd = _data(rng, data_shape, dt), _data(rng, ind_shape, dt)
    node = helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1)
    m = _model(node, [_vi("d", dt, data_shape), _vi("i", np.int64, ind_shape), _vi("u", dt, ind_shape)],
               [_vi("y", dt, data_shape)], opset=10)
    got = _run(m, {"d": data, "i": idx, "u": upd}, device)
    _assert_equal(got["y"], ref_scatter_elements(data, idx, upd, 1, "none"))


# ---- ScatterND -----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_scatter_nd(device, red, k, rng):
    data_shape = (4, 5, 3, 7)
    ind_shape = (3, 5, k)  # 15 rows into at most 4 * 5 * 3 slots: duplicates
    upd_shape = ind_shape[:-1] + data_shape[k:]
    for dt in DATA_TYPES:
        for it in (np.int64, np.int32):
            idx = np.stack([rng.integers(-data_shape[q], data_shape[q], ind_shape[:-1]) for q in range(k)],
                           axis=-1).astype(it)
            data, upd = _data(rng, data_shape, dt), _data(rng, upd_shape, dt)
            node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=red)
            m = _model(node, [_vi("d", dt, data_shape), _vi("i", it, ind_shape), _vi("u", dt, upd_shape)],
                       [_vi("y", dt, data_shape)])
            got = _run(m, {"d": data, "i": idx, "u": upd}, device)
            _assert_equal(got["y"], ref_scatter_nd(data, idx, upd, red))


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_nd_full_index_many_rows(device, rng):
    """k == rank: every row writes one element; 300 rows over 35 slots."""
    data_shape, ind_shape = (5, 7), (300, 2)
    idx = np.stack([rng.integers(-5, 5, 300), rng.integers(-7, 7, 300)], axis=-1).astype(np.int64)
    data, upd = _data(rng, data_shape, np.float32), _data(rng, (300,), np.float32)
    for red in ("none", "add"):
        node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=red)
        m = _model(node, [_vi("d", np.float32, data_shape), _vi("i", np.int64, ind_shape),
                          _vi("u", np.float32, (300,))], [_vi("y", np.float32, data_shape)])
        got = _run(m, {"d": data, "i": idx, "u": upd}, device)
        _assert_equal(got["y"], ref_scatter_nd(data, idx, upd, red))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_scatter_index_out_of_range(device, op, rng):
    data = _data(rng, (4, 6), np.float32)
    if op == "ScatterND":
        idx, upd = np.array([[1], [4]], np.int64), _data(rng, (2, 6), np.float32)
    else:
        idx, upd = np.array([[0, 6]], np.int64), _data(rng, (1, 2), np.float32)
    node = helper.make_node(op, ["d", "i", "u"], ["y"])
    m = _model(node, [_vi("d", np.float32, data.shape), _vi("i", np.int64, idx.shape),
                      _vi("u", np.float32, upd.shape)], [_vi("y", np.float32, data.shape)])
    eng = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    with pytest.raises(Exception, match="out of range"):
        eng.run({"d": data, "i": idx, "u": upd})


# ---- TensorScatter ---------------------------------------------------------------


def ref_tensor_scatter(past, upd, wi, axis, circular):
    out = past.copy()
    ms, seq = past.shape[axis], upd.shape[axis]
    for b in range(past.shape[0]):
        w = 0 if wi is None else int(wi[b])
        for s in range(seq):
            cs = (w + s) % ms if circular else w + s
            dst = [b] + [slice(None)] * (past.ndim - 1)
            src = [b] + [slice(None)] * (past.ndim - 1)
            dst[axis], src[axis] = cs, s
            out[tuple(dst)] = upd[tuple(src)]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_indices", [True, False])
def test_tensor_scatter(device, mode, with_indices, rng):
    past_shape, upd_shape, axis = (3, 2, 11, 5), (3, 2, 4, 5), 2
    for dt in DATA_TYPES:
        past, upd = _data(rng, past_shape, dt), _data(rng, upd_shape, dt)
        wi = (rng.integers(0, 8, 3) if mode == "linear" else rng.integers(0, 20, 3)).astype(np.int64)
        ins = ["p", "u"] + (["w"] if with_indices else [])
        vis = [_vi("p", dt, past_shape), _vi("u", dt, upd_shape)] + ([_vi("w", np.int64, (3,))] if with_indices else [])
        node = helper.make_node("TensorScatter", ins, ["y"], axis=axis, mode=mode)
        m = _model(node, vis, [_vi("y", dt, past_shape)], opset=24, ir=11)
        feeds = {"p": past, "u": upd} | ({"w": wi} if with_indices else {})
        got = _run(m, feeds, device)
        _assert_equal(got["y"], ref_tensor_scatter(past, upd, wi if with_indices else None, axis, mode == "circular"))


# ---- OneHot ------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(device, axis, rng):
    ind_shape, depth = (3, 7), 5
    for it, vt in ((np.int64, np.float32), (np.int32, np.float16), (np.float32, np.int64), (np.int64, np.bool_)):
        raw = rng.integers(-depth - 2, depth + 2, ind_shape)
        ind = (raw + rng.uniform(0, 0.9, ind_shape) * np.sign(raw)).astype(it) if it == np.float32 else raw.astype(it)
        vals = np.array([False, True]) if vt == np.bool_ else _data(rng, (2,), vt)
        out_shape = list(ind_shape)
        out_shape.insert(axis % 3, depth)
        depth_t = helper.make_tensor("depth", TensorProto.INT64, [], [depth])
        node = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=axis)
        g = helper.make_graph([node], "k", [_vi("i", it, ind_shape), _vi("v", vt, (2,))],
                              [_vi("y", vt, out_shape)], initializer=[depth_t])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
        m.ir_version = 10
        got = _run(m, {"i": ind, "v": vals}, device)
        k = np.trunc(ind.astype(np.float64)).astype(np.int64)
        k = np.where(k < 0, k + depth, k)
        hot = np.moveaxis(k[..., None] == np.arange(depth), -1, axis % 3)
        _assert_equal(got["y"], np.where(hot, vals[1], vals[0]).astype(vt))


# ---- EyeLike -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [0, 2, -3, 9])
def test_eyelike(device, k, rng):
    for shape, in_t, out_t in (((5, 8), np.float32, None), ((7, 3), np.int64, np.float16), ((4, 4), np.float32, np.int32),
                               ((6, 5), np.float32, np.bool_)):
        attrs = {"k": k} if out_t is None else {"k": k, "dtype": ONNX_T[out_t]}
        node = helper.make_node("EyeLike", ["x"], ["y"], **attrs)
        want_t = in_t if out_t is None else out_t
        m = _model(node, [_vi("x", in_t, shape)], [_vi("y", want_t, shape)])
        got = _run(m, {"x": _data(rng, shape, in_t)}, device)
        _assert_equal(got["y"], np.eye(*shape, k=k, dtype=want_t))


# ---- ReverseSequence ---------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_axis", [0, 1])
def test_reverse_sequence(device, batch_axis, rng):
    time_axis = 1 - batch_axis
    batch, time = 5, 7
    shape = [0, 0, 3, 2]
    shape[batch_axis], shape[time_axis] = batch, time
    for dt in (np.float32, np.float16, np.int64, np.uint8):
        for lt in (np.int64, np.int32):
            x = _data(rng, shape, dt)
            lens = rng.integers(0, time + 1, batch).astype(lt)
            node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=batch_axis, time_axis=time_axis)
            m = _model(node, [_vi("x", dt, shape), _vi("l", lt, (batch,))], [_vi("y", dt, shape)])
            got = _run(m, {"x": x, "l": lens}, device)
            want = x.copy()
            for b in range(batch):
                n = int(lens[b])
                src = [slice(None)] * 4
                dst = [slice(None)] * 4
                src[batch_axis] = dst[batch_axis] = b
                src[time_axis], dst[time_axis] = slice(n - 1, None, -1) if n else slice(0, 0), slice(0, n)
                want[tuple(dst)] = x[tuple(src)]
            _assert_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
def test_reverse_sequence_bad_length(device, rng):
    x = _data(rng, (4, 3, 2), np.float32)
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)
    m = _model(node, [_vi("x", np.float32, x.shape), _vi("l", np.int64, (3,))], [_vi("y", np.float32, x.shape)])
    eng = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    with pytest.raises(Exception, match="out(side| of) ?.*range|outside"):
        eng.run({"x": x, "l": np.array([1, 5, 2], np.int64)})


# ---- CenterCropPad -----------------------------------------------------------------


def ref_center_crop_pad(x, out_shape):
    y = np.zeros(out_shape, x.dtype)
    src, dst = [], []
    for a, b in zip(x.shape, out_shape):
        n = min(a, b)
        s = (a - b) // 2 if a > b else 0
        d = (b - a) // 2 if b > a else 0
        src.append(slice(s, s + n))
        dst.append(slice(d, d + n))
    y[tuple(dst)] = x[tuple(src)]
    return y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["crop", "pad", "mixed_axes", "odd"])
def test_center_crop_pad(device, case, rng):
    in_shape, shape, axes = {
        "crop": ((9, 8, 3), (5, 5, 3), None),
        "pad": ((3, 4, 2), (8, 9, 2), None),
        "mixed_axes": ((7, 4, 5), (10, 2), [0, -1]),
        "odd": ((6, 7), (3, 10), None),
    }[case]
    out_shape = list(in_shape)
    for a, s in zip(axes if axes is not None else range(len(in_shape)), shape):
        out_shape[a] = s
    for dt in (np.float32, np.float16, np.int64, np.uint8):
        x = _data(rng, in_shape, dt)
        st = helper.make_tensor("s", TensorProto.INT64, [len(shape)], list(shape))
        attrs = {} if axes is None else {"axes": axes}
        node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)
        g = helper.make_graph([node], "k", [_vi("x", dt, in_shape)], [_vi("y", dt, out_shape)], initializer=[st])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 10
        got = _run(m, {"x": x}, device)
        _assert_equal(got["y"], ref_center_crop_pad(x, out_shape))


# ---- LpNormalization / Hardmax (lane_norms.cu) ---------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_normalization(device, p, axis, rng):
    shape = (4, 9, 5)
    for dt, tol in ((np.float32, 2e-6), (np.float16, 2e-3), (np.float64, 1e-12)):
        x = rng.standard_normal(shape).astype(dt)
        zero = [slice(None)] * 3
        zero[(axis + 1) % 3] = 0  # a lane of zeros: the norm is 0, so is the output
        zero[(axis + 2) % 3] = 0
        x[tuple(zero)] = 0
        node = helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)
        m = _model(node, [_vi("x", dt, shape)], [_vi("y", dt, shape)], opset=22)
        got = _run(m, {"x": x}, device)["y"]
        x64 = x.astype(np.float64)
        norm = (np.abs(x64).sum(axis=axis, keepdims=True) if p == 1
                else np.sqrt((x64 * x64).sum(axis=axis, keepdims=True)))
        want = np.where(norm == 0, 0.0, x64 / np.where(norm == 0, 1, norm))
        assert got.dtype == dt and got.shape == shape
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
        assert np.all(got[tuple(zero)] == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 0), (13, 1), (11, 1), (11, 0)])
def test_hardmax(device, opset, axis, rng):
    shape = (3, 7, 5)
    for dt in (np.float32, np.float16, np.float64):
        x = np.round(rng.standard_normal(shape) * 2).astype(dt)  # small integers: ties, the first one wins
        x.flat[5] = np.nan  # the first NaN of its lane wins
        node = helper.make_node("Hardmax", ["x"], ["y"], axis=axis)
        m = _model(node, [_vi("x", dt, shape)], [_vi("y", dt, shape)], opset=opset)
        got = _run(m, {"x": x}, device)["y"]
        a = axis % 3
        if opset < 13:  # 2-D coercion: rows of prod(shape[axis:])
            rows = x.reshape(int(np.prod(shape[:a])), -1)
        else:
            rows = np.moveaxis(x, a, -1).reshape(-1, shape[a])
        nan = np.isnan(rows)
        best = np.where(nan.any(axis=1), nan.argmax(axis=1), np.nanargmax(np.where(nan, -np.inf, rows), axis=1))
        want = np.zeros_like(rows)
        want[np.arange(rows.shape[0]), best] = 1
        want = want.reshape(shape) if opset < 13 else np.moveaxis(
            want.reshape(np.moveaxis(x, a, -1).shape), -1, a)
        _assert_equal(got, want.astype(dt))
