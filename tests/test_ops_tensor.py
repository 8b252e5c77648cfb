"""Shape and data-movement ops on the CPU backend (csrc/ops/tensor/) against
onnxruntime (the ONNX reference evaluator where onnxruntime lacks a dtype):
one-node models on fresh random data with odd sizes, exact comparison. Also
the shape rules on symbolic dims (load-time shapes) and the errors for bad
shapes."""

from __future__ import annotations

import numpy as np
import pytest
import twinfer
import twinfer.backend
from onnx import TensorProto, helper, numpy_helper
from op_cases import (BOOL, F16, F32, F64, I32, I64, MOVE_DTYPES, Const, build, check, expect_error, out_shapes,
                      rand, reference, run, sym_model)

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
ids = lambda dts: [np.dtype(d).name for d in dts]  # noqa: E731


def c64(v):
    return Const(np.array(v, dtype=np.int64))


# ---------------------------------------------------------------------------
# Constant / ConstantOfShape / Shape / Size / Range
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["tensor_f32", "tensor_i64", "tensor_bool", "tensor_f16", "value_float",
                                  "value_floats", "value_int", "value_ints"])
def test_constant(rng, form):
    if form.startswith("tensor"):
        dt = {"f32": F32, "i64": I64, "bool": BOOL, "f16": F16}[form.split("_")[1]]
        want = rand(rng, (3, 5), dt)
        attrs = {"value": numpy_helper.from_array(want)}
    elif form == "value_float":
        want = np.array(rng.standard_normal(), dtype=F32)
        attrs = {form: float(want)}
    elif form == "value_floats":
        want = rng.standard_normal(7).astype(F32)
        attrs = {form: [float(v) for v in want]}
    elif form == "value_int":
        want = np.array(rng.integers(-1000, 1000), dtype=I64)
        attrs = {form: int(want)}
    else:
        want = rng.integers(-1000, 1000, 11).astype(I64)
        attrs = {form: [int(v) for v in want]}
    node = helper.make_node("Constant", [], ["y0"], name="the_node", **attrs)
    from onnx_helpers import make_model

    model = make_model([node], [], [("y0", want.dtype, None)])
    (got,) = run(model, {})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_constant_strings_feed_shape_ops():
    from onnx_helpers import make_model, run_ort

    # String constants (value_strings, value_string) feeding Size and Shape,
    # which read only dims; compared with onnxruntime.
    nodes = [helper.make_node("Constant", [], ["c"], value_strings=["a", "b", "c"]),
             helper.make_node("Constant", [], ["s"], value_string="x"),
             helper.make_node("Size", ["c"], ["y0"]), helper.make_node("Shape", ["c"], ["y1"]),
             helper.make_node("Shape", ["s"], ["y2"])]
    model = make_model(nodes, [], [("y0", I64, None), ("y1", I64, None), ("y2", I64, None)])
    got = [np.asarray(v) for v in twinfer.backend.prepare(model).run([])]
    for g, w in zip(got, run_ort(model, {})):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


@pytest.mark.parametrize("value", [None, np.array([2.5], F32), np.array([-7], I64), np.array([True])])
def test_constant_of_shape(value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    dt = F32 if value is None else value.dtype
    check("ConstantOfShape", [("s", c64([3, 5, 2]))], attrs, out=[dt])
    check("ConstantOfShape", [("s", c64([]))], attrs, out=[dt])  # a scalar
    check("ConstantOfShape", [("s", c64([2, 7]))], attrs, out=[dt], optimize=True)  # folded at load


@pytest.mark.parametrize("opset,attrs", [(13, {}), (15, {}), (15, {"start": 1}), (15, {"end": -1}),
                                         (15, {"start": -3, "end": 3}), (19, {"start": 5}), (21, {"start": -9})])
def test_shape(rng, opset, attrs):
    x = rand(rng, (3, 5, 7, 2), F32)
    check("Shape", [("x", x)], attrs, out=[I64], opset=opset)


def test_shape_size_symbolic():
    m = sym_model("Shape", [("x", np.zeros((2, 3, 5), F32))], out=[I64], x=["N", 3, "H"])
    assert out_shapes(m) == [(3,)]
    m = sym_model("Shape", [("x", np.zeros((2, 3, 5), F32))], {"start": 1}, out=[I64], opset=15, x=["N", 3, "H"])
    assert out_shapes(m) == [(2,)]


@pytest.mark.parametrize("dt", [F32, I64, BOOL, F16], ids=ids([F32, I64, BOOL, F16]))
def test_size(rng, dt):
    check("Size", [("x", rand(rng, (3, 5, 7), dt))], out=[I64])
    check("Size", [("x", rand(rng, (0, 5), dt))], out=[I64])


@pytest.mark.parametrize("dt,start,limit,delta", [
    (I64, 0, 13, 1), (I64, 3, -17, -4), (I64, 5, 5, 2), (I32, -7, 30, 3), (F32, 0.5, 7.3, 0.7),
    (F32, 3.0, -2.0, -0.25), (F64, -1.0, 1.0, 0.13), (I64, 10, 0, 1)])
def test_range(dt, start, limit, delta):
    args = [(n, Const(np.array(v, dtype=dt))) for n, v in (("s", start), ("l", limit), ("d", delta))]
    check("Range", args, out=[dt], rtol=1e-6, atol=1e-6)
    check("Range", args, out=[dt], rtol=1e-6, atol=1e-6, optimize=True)  # folded at load


# ---------------------------------------------------------------------------
# Reshape / Flatten / Squeeze / Unsqueeze
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape,spec,allowzero", [
    ((3, 5, 7), [0, -1], 0), ((3, 5, 7), [-1], 0), ((3, 5, 7), [7, 15], 0), ((3, 5, 7), [7, 0, 3], 0),
    ((3, 5, 7), [1, -1, 1, 7], 0), ((3, 5, 7), [0, 0, -1, 1], 0), ((0, 5), [5, 0], 1), ((0, 5), [-1, 5], 0),
    ((1,), [], 0), ((0, 3), [0, 5], 0)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_reshape(rng, shape, spec, allowzero, dt):
    check("Reshape", [("x", rand(rng, shape, dt)), ("s", c64(spec))], {"allowzero": allowzero}, opset=14)


@pytest.mark.parametrize("spec", [[4, -1], [-1, -1], [2, 0, 0, 0, 0], [-2, 105], [0, 8]])
def test_reshape_errors(rng, spec):
    model, feeds = build("Reshape", [("x", rand(rng, (3, 5, 7), F32)), ("s", c64(spec))])
    expect_error(model, feeds, kind=twinfer.ShapeError)


@pytest.mark.parametrize("spec,want", [
    ([0, -1], ("N", 60)), ([-1, 60], ("N", 60)), ([0, 3, -1], ("N", 3, 20)), ([-1, 5], (None, 5)),
    ([0, 0, 4, 5], ("N", 3, 4, 5)), ([2, -1], (2, None))])
def test_reshape_symbolic(spec, want):
    m = sym_model("Reshape", [("x", np.zeros((2, 3, 4, 5), F32)), ("s", c64(spec))], x=["N", 3, 4, 5])
    assert out_shapes(m) == [want]


def test_reshape_copying_a_dim_that_may_be_zero(rng):
    # [N, 3] -> [0, 5] holds for N = 0 only (both sides empty): it loads, as
    # onnxruntime's does, runs at N = 0, and refuses other N by shape.
    m = sym_model("Reshape", [("x", np.zeros((0, 3), F32)), ("s", c64([0, 5]))], x=["N", 3])
    e = twinfer.load(m)
    assert e.run({"x": np.zeros((0, 3), F32)})[e.outputs[0].name].shape == (0, 5)
    with pytest.raises(twinfer.ShapeError, match=r"cannot reshape input of shape \[4, 3\]"):
        e.run({"x": rand(rng, (4, 3), F32)})


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_reshape_of_an_empty_batch_with_0_and_minus_1(rng, device):
    # dynamo=True exports write Reshape(allowzero=1) to [batch, seq, -1, head]:
    # a batch of 0 puts a 0 beside the -1, which the spec calls invalid and
    # onnxruntime runs (the -1 from the dims that are not 0). Refused before.
    from onnx_helpers import run_ort

    x = np.zeros((0, 5, 32), F32)
    for spec, want in (([0, 5, -1, 8], (0, 5, 4, 8)), ([0, -1, 4], (0, 40, 4))):
        m, feeds = build("Reshape", [("x", x), ("s", np.array(spec, I64))], {"allowzero": 1}, opset=18)
        got = twinfer.load(m, device=device).run(feeds)
        assert got[m.graph.output[0].name].shape == want == run_ort(m, feeds)[0].shape
    # A non-empty input cannot become an empty shape.
    m, feeds = build("Reshape", [("x", rand(rng, (2, 5, 32), F32)), ("s", np.array([0, 5, -1, 8], I64))],
                     {"allowzero": 1}, opset=18)
    expect_error(m, feeds, kind=twinfer.ShapeError)


def test_reshape_computed_shape_rank():
    # The shape is a graph input of known length 3: rank 3, dims unknown.
    m = sym_model("Reshape", [("x", np.zeros((2, 6), F32)), ("s", np.array([2, 3, 2], I64))], x=["N", 6])
    assert out_shapes(m) == [(None, None, None)]


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
@pytest.mark.parametrize("dt", [F32, BOOL], ids=ids([F32, BOOL]))
def test_flatten(rng, axis, dt):
    check("Flatten", [("x", rand(rng, (3, 5, 7), dt))], {"axis": axis})


def test_flatten_symbolic_and_error(rng):
    m = sym_model("Flatten", [("x", np.zeros((2, 3, 4), F32))], {"axis": 1}, x=["N", 3, 4])
    assert out_shapes(m) == [("N", 12)]
    model, feeds = build("Flatten", [("x", rand(rng, (3, 5), F32))], {"axis": 3})
    expect_error(model, feeds, "axis", kind=twinfer.ShapeError)


@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("shape,axes", [((1, 5, 1, 7), [0]), ((1, 5, 1, 7), [0, -2]), ((1, 5, 1, 7), None),
                                        ((3, 1), [1]), ((1,), None)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_squeeze(rng, opset, shape, axes, dt):
    x = rand(rng, shape, dt)
    if opset < 13:
        check("Squeeze", [("x", x)], {} if axes is None else {"axes": axes}, opset=opset)
    else:
        check("Squeeze", [("x", x), ("a", None if axes is None else c64(axes))], opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape,axes", [((5, 7), [0]), ((5, 7), [-1]), ((5, 7), [0, 3]), ((5, 7), [1, -2]),
                                        ((), [0, 1])])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_unsqueeze(rng, opset, shape, axes, dt):
    x = rand(rng, shape, dt)
    if opset < 13:
        check("Unsqueeze", [("x", x)], {"axes": axes}, opset=opset)
    else:
        check("Unsqueeze", [("x", x), ("a", c64(axes))], opset=opset)


def test_squeeze_unsqueeze_symbolic_and_errors(rng):
    x = np.zeros((2, 1, 5), F32)
    assert out_shapes(sym_model("Squeeze", [("x", x), ("a", c64([1]))], x=["N", 1, "W"])) == [("N", "W")]
    assert out_shapes(sym_model("Unsqueeze", [("x", x), ("a", c64([0, -1]))], x=["N", 1, "W"])) == \
        [(1, "N", 1, "W", 1)]
    model, feeds = build("Squeeze", [("x", rand(rng, (3, 5), F32)), ("a", c64([0]))])
    expect_error(model, feeds, "squeeze", kind=twinfer.ShapeError)
    model, feeds = build("Unsqueeze", [("x", rand(rng, (3, 5), F32)), ("a", c64([4]))])
    expect_error(model, feeds, "out of range", kind=twinfer.ShapeError)
    model, feeds = build("Unsqueeze", [("x", rand(rng, (3, 5), F32)), ("a", c64([1, 1]))])
    expect_error(model, feeds, "repeated", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Transpose / DepthToSpace / SpaceToDepth
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape,perm", [
    ((37, 53), None), ((67, 129), [1, 0]), ((2, 3, 5, 7), [0, 2, 1, 3]), ((2, 3, 5, 7), [0, 2, 3, 1]),
    ((2, 5, 7, 3), [0, 3, 1, 2]), ((3, 5, 7, 2), [3, 1, 0, 2]), ((2, 3, 1, 5, 7), [4, 2, 0, 3, 1]),
    ((3, 1, 5), [1, 0, 2]), ((5,), [0]), ((), None)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_transpose(rng, shape, perm, dt):
    check("Transpose", [("x", rand(rng, shape, dt))], {} if perm is None else {"perm": perm})


@pytest.mark.parametrize("threads", [1, 2])
def test_transpose_large_threaded(rng, threads):
    x = rand(rng, (3, 131, 257), F32)
    check("Transpose", [("x", x)], {"perm": [0, 2, 1]}, num_threads=threads)
    check("Transpose", [("x", rand(rng, (4, 17, 33, 65), F16))], {"perm": [0, 3, 1, 2]}, num_threads=threads)


@pytest.mark.parametrize("shape,perm", [((5, 37, 19, 29), [0, 2, 3, 1]), ((3, 29, 67), [0, 2, 1]), ((2, 8, 32, 32), [0, 2, 3, 1])])
def test_transpose_four_byte_runs_keep_every_bit(rng, shape, perm):
    """4-byte transposes moved through float registers (strided_copy's runs of
    eight, 4 x 4 blocks; runs 4 KiB apart go through tiles: the last shape)
    keep every bit: signalling-NaN patterns in float32 and int32 come out as
    they went in, odd run counts and lengths included."""
    bits = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    bits.reshape(-1)[::7] = 0x7FA00001  # a signalling NaN's bits
    for dt in (np.float32, np.int32):
        x = bits.view(dt)
        got = check("Transpose", [("x", x)], {"perm": perm})[0]
        np.testing.assert_array_equal(got.view(np.uint32), bits.transpose(perm))


def test_transpose_symbolic_and_errors(rng):
    m = sym_model("Transpose", [("x", np.zeros((2, 3, 4), F32))], {"perm": [2, 0, 1]}, x=["N", 3, "W"])
    assert out_shapes(m) == [("W", "N", 3)]
    for perm in ([0, 0, 1], [0, 1], [0, 1, 3]):
        model, feeds = build("Transpose", [("x", rand(rng, (3, 5, 7), F32))], {"perm": perm})
        expect_error(model, feeds, kind=twinfer.ShapeError)


@pytest.mark.parametrize("op,mode,b,shape", [
    ("DepthToSpace", "DCR", 2, (2, 12, 3, 5)), ("DepthToSpace", "CRD", 2, (2, 12, 3, 5)),
    ("DepthToSpace", "DCR", 3, (1, 18, 5, 3)), ("DepthToSpace", "CRD", 3, (1, 9, 2, 7)),
    ("DepthToSpace", "CRD", 4, (2, 32, 3, 7)), ("DepthToSpace", "DCR", 5, (1, 50, 2, 3)),
    ("SpaceToDepth", None, 2, (2, 3, 6, 10)), ("SpaceToDepth", None, 3, (1, 5, 9, 3))])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_depth_space(rng, op, mode, b, shape, dt):
    attrs = {"blocksize": b}
    if mode:
        attrs["mode"] = mode
    check(op, [("x", rand(rng, shape, dt))], attrs)


@pytest.mark.parametrize("threads", [1, 2])
def test_depth_space_large_threaded(rng, threads):
    """PixelShuffle's interleaved rows (strided_copy's interleave walk) split
    across threads mid-plane; NCHW -> NHWC of an RGB image too (perm
    [0, 2, 3, 1]: rows of (w, c) from three planes)."""
    check("DepthToSpace", [("x", rand(rng, (2, 64, 33, 47), F32))], {"blocksize": 2, "mode": "CRD"},
          num_threads=threads)
    check("Transpose", [("x", rand(rng, (3, 3, 61, 67), F16))], {"perm": [0, 2, 3, 1]}, num_threads=threads)


def test_depth_space_errors(rng):
    model, feeds = build("DepthToSpace", [("x", rand(rng, (1, 10, 3, 3), F32))], {"blocksize": 2})
    expect_error(model, feeds, "divisible", kind=twinfer.ShapeError)
    model, feeds = build("SpaceToDepth", [("x", rand(rng, (1, 2, 5, 4), F32))], {"blocksize": 2})
    expect_error(model, feeds, "divisible", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Concat / Split
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_concat(rng, axis, dt):
    base = [3, 5, 7]
    inputs = []
    for k, n in enumerate((2, 1, 4)):
        s = list(base)
        s[axis] = n
        inputs.append((f"x{k}", rand(rng, s, dt)))
    check("Concat", inputs, {"axis": axis})
    check("Concat", inputs[:1], {"axis": axis})


def test_concat_empty_part_and_threads(rng):
    a, b = rand(rng, (3, 0, 5), F32), rand(rng, (3, 4, 5), F32)
    check("Concat", [("a", a), ("b", b)], {"axis": 1})
    big = [(f"x{k}", rand(rng, (37, n, 129), F32)) for k, n in enumerate((3, 17, 5))]
    check("Concat", big, {"axis": 1}, num_threads=2)
    check("Concat", [(f"x{k}", rand(rng, (n, 513), F32)) for k, n in enumerate((131, 7))], {"axis": 0},
          num_threads=2)


def test_concat_symbolic_and_errors(rng):
    m = build("Concat", [("a", np.zeros((2, 3), F32)), ("b", np.zeros((2, 5), F32))], {"axis": 1},
              sym_inputs={"a": ["N", 3], "b": ["N", 5]})[0]
    assert out_shapes(m) == [("N", 8)]
    m = build("Concat", [("a", np.zeros((2, 3), F32)), ("b", np.zeros((2, 3), F32))], {"axis": 0},
              sym_inputs={"a": ["N", 3], "b": [4, 3]})[0]
    assert out_shapes(m) == [(None, 3)]
    model, feeds = build("Concat", [("a", rand(rng, (3, 5), F32)), ("b", rand(rng, (4, 6), F32))], {"axis": 0})
    expect_error(model, feeds, "differ", kind=twinfer.ShapeError)
    model, feeds = build("Concat", [("a", rand(rng, (3, 5), F32)), ("b", rand(rng, (3, 5, 1), F32))], {"axis": 0})
    expect_error(model, feeds, "rank", kind=twinfer.ShapeError)
    model, feeds = build("Concat", [("a", rand(rng, (3, 5), F32))], {"axis": 2})
    expect_error(model, feeds, "axis", kind=twinfer.ShapeError)


@pytest.mark.parametrize("opset,axis,split,nout", [
    (13, 1, [2, 3, 2], 3), (13, -1, [1, 0, 4], 3), (13, 0, None, 3), (11, 2, [4, 1], 2), (11, -3, None, 3),
    (18, 1, None, 3), (18, 0, None, 2), (18, 2, [5], 1), (21, -1, None, 2)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_split(rng, opset, axis, split, nout, dt):
    x = rand(rng, (6, 7, 5), dt)
    attrs = {"axis": axis}
    inputs = [("x", x)]
    if split is not None:
        if opset < 13:
            attrs["split"] = split
        else:
            inputs.append(("s", c64(split)))
    elif opset >= 18:
        attrs["num_outputs"] = nout
    check("Split", inputs, attrs, out=[dt] * nout, opset=opset)


def test_split_symbolic_and_errors(rng):
    m = build("Split", [("x", np.zeros((2, 6), F32)), ("s", c64([2, 4]))], {"axis": 1}, out=[F32, F32],
              opset=13, sym_inputs={"x": ["N", 6]})[0]
    assert out_shapes(m) == [("N", 2), ("N", 4)]
    model, feeds = build("Split", [("x", rand(rng, (3, 7), F32)), ("s", c64([2, 4]))], {"axis": 1},
                         out=[F32, F32], opset=13)
    expect_error(model, feeds, "add up", kind=twinfer.ShapeError)
    model, feeds = build("Split", [("x", rand(rng, (3, 7), F32))], {"axis": 1}, out=[F32, F32], opset=13)
    expect_error(model, feeds, "evenly", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Slice
# ---------------------------------------------------------------------------
SLICES = [
    # starts, ends, axes, steps
    ([1], [4], None, None),
    ([0, 1], [2, -1], [0, -1], None),
    ([-2, 0, 1], [INT64_MAX, 3, 6], [2, 0, 1], [1, 1, 2]),
    ([-1], [INT64_MIN], [1], [-1]),
    ([5, 6], [0, -100], [1, 2], [-2, -3]),
    ([100], [200], [0], None),                     # clamps to an empty slice
    ([-100], [100], [-1], [3]),
    ([0, 0, 0], [INT64_MAX, INT64_MAX, INT64_MAX], None, [2, 3, 1]),
    ([2], [1], [1], [1]),                          # empty
    ([4], [-9], [2], [-1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_slice(rng, starts, ends, axes, steps, dt):
    x = rand(rng, (3, 5, 7), dt)
    inputs = [("x", x), ("st", c64(starts)), ("en", c64(ends)), ("ax", None if axes is None else c64(axes)),
              ("sp", None if steps is None else c64(steps))]
    if axes is None and steps is not None:
        inputs[3] = ("ax", c64(list(range(len(starts)))))
    check("Slice", inputs)


def test_slice_int32_args_and_threads(rng):
    x = rand(rng, (9, 129, 67), F32)
    i32 = lambda v: Const(np.array(v, I32))  # noqa: E731
    check("Slice", [("x", x), ("st", i32([1, 60])), ("en", i32([8, -2])), ("ax", i32([0, 2])), ("sp", i32([2, -1]))],
          num_threads=2)


def test_slice_symbolic_and_errors(rng):
    x = np.zeros((2, 10), F32)
    m = sym_model("Slice", [("x", x), ("s", c64([2])), ("e", c64([5])), ("a", c64([1]))], x=["N", 10])
    assert out_shapes(m) == [("N", 3)]
    m = sym_model("Slice", [("x", x), ("s", c64([0])), ("e", c64([INT64_MAX])), ("a", c64([0]))], x=["N", 10])
    assert out_shapes(m) == [("N", 10)]
    m = sym_model("Slice", [("x", x), ("s", c64([1])), ("e", c64([INT64_MAX])), ("a", c64([0]))], x=["N", 10])
    assert out_shapes(m) == [(None, 10)]
    bad = [([0], [1], [3], None, "out of range"), ([0], [1], [0], [0], "step"), ([0, 1], [1], None, None, "ends"),
           ([0, 0], [1, 1], [1, -1], None, "repeated")]
    for st, en, ax, sp, word in bad:
        model, feeds = build("Slice", [("x", rand(rng, (3, 5), F32)), ("st", c64(st)), ("en", c64(en)),
                                       ("ax", None if ax is None else c64(ax)), ("sp", None if sp is None else c64(sp))])
        expect_error(model, feeds, word, kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Gather / GatherElements
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("ishape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_gather(rng, axis, ishape, dt):
    x = rand(rng, (3, 5, 7), dt)
    n = x.shape[axis]
    idx = rng.integers(-n, n, size=ishape).astype(I64)
    check("Gather", [("x", x), ("i", idx)], {"axis": axis})


@pytest.mark.parametrize("idt", [I32, I64], ids=ids([I32, I64]))
def test_gather_index_types_and_threads(rng, idt):
    x = rand(rng, (1031, 67), F32)
    idx = rng.integers(-1031, 1031, size=(13, 257)).astype(idt)
    check("Gather", [("x", x), ("i", idx)], {"axis": 0}, num_threads=2)
    check("Gather", [("x", x), ("i", Const(idx[:2, :5]))], {"axis": 0})


def test_gather_symbolic_and_errors(rng):
    m = build("Gather", [("x", np.zeros((2, 7, 4), F32)), ("i", np.zeros((2, 3), I64))], {"axis": 1},
              sym_inputs={"x": ["N", 7, 4], "i": ["B", "S"]})[0]
    assert out_shapes(m) == [("N", "B", "S", 4)]
    model, feeds = build("Gather", [("x", rand(rng, (3, 5), F32)), ("i", np.array([0, 5], I64))], {"axis": 1})
    expect_error(model, feeds, "out of range")
    model, feeds = build("Gather", [("x", rand(rng, (3, 5), F32)), ("i", np.array([0, -4], I64))], {"axis": 0})
    expect_error(model, feeds, "out of range")
    model, feeds = build("Gather", [("x", rand(rng, (3, 5), F32)), ("i", np.array([0], I64))], {"axis": 2})
    expect_error(model, feeds, "axis", kind=twinfer.ShapeError)


@pytest.mark.parametrize("batch_dims,ishape", [(0, (4, 1)), (0, (2, 3, 2)), (0, (5, 3)), (1, (3, 2, 1)),
                                               (1, (3, 2)), (2, (3, 5, 4, 1))])
@pytest.mark.parametrize("dt", [F32, I64, BOOL, F16], ids=ids([F32, I64, BOOL, F16]))
def test_gather_nd(rng, batch_dims, ishape, dt):
    x = rand(rng, (3, 5, 7), dt)
    k = ishape[-1]
    dims = x.shape[batch_dims:batch_dims + k]
    idx = np.stack([rng.integers(-d, d, size=ishape[:-1]) for d in dims], axis=-1).astype(I64)
    check("GatherND", [("x", x), ("i", idx)], {"batch_dims": batch_dims})


def test_gather_nd_threads_symbolic_and_errors(rng):
    x = rand(rng, (61, 37, 129), F32)
    idx = np.stack([rng.integers(0, 61, size=(211,)), rng.integers(0, 37, size=(211,))], axis=-1).astype(I64)
    check("GatherND", [("x", x), ("i", idx)], num_threads=2)
    m = build("GatherND", [("x", np.zeros((2, 7, 4), F32)), ("i", np.zeros((2, 3, 1), I64))], {"batch_dims": 1},
              sym_inputs={"x": ["N", 7, 4], "i": ["N", "S", 1]})[0]
    assert out_shapes(m) == [("N", "S", 4)]
    model, feeds = build("GatherND", [("x", rand(rng, (3, 5), F32)), ("i", np.array([[1, 5]], I64))])
    expect_error(model, feeds, "out of range")
    model, feeds = build("GatherND", [("x", rand(rng, (3, 5), F32)), ("i", np.array([[1, 2, 0]], I64))])
    expect_error(model, feeds, "last dim", kind=twinfer.ShapeError)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_gather_elements(rng, axis, dt):
    x = rand(rng, (3, 5, 7), dt)
    ishape = [2, 4, 6]
    ishape[axis] = 9
    n = x.shape[axis]
    idx = rng.integers(-n, n, size=ishape).astype(I64)
    check("GatherElements", [("x", x), ("i", idx)], {"axis": axis})


def test_gather_elements_errors(rng):
    model, feeds = build("GatherElements", [("x", rand(rng, (3, 5), F32)), ("i", np.array([[0, 7]], I64))],
                         {"axis": 1})
    expect_error(model, feeds, "out of range")
    model, feeds = build("GatherElements", [("x", rand(rng, (3, 5), F32)), ("i", np.zeros((3,), I64))])
    expect_error(model, feeds, "rank", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Expand / Tile
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape,target", [
    ((3, 1, 5), [2, 3, 4, 5]), ((1,), [3, 4]), ((3, 1), [1, 5]), ((7,), [3, 1, 7]), ((3, 5), [3, 5]),
    ((1, 1), [13, 17]), ((5, 1, 1), [5, 3, 2]), ((), [2, 3])])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_expand(rng, shape, target, dt):
    check("Expand", [("x", rand(rng, shape, dt)), ("s", c64(target))])


def test_expand_symbolic_and_errors(rng):
    m = sym_model("Expand", [("x", np.zeros((2, 1), F32)), ("s", c64([1, 5]))], x=["N", 1])
    assert out_shapes(m) == [("N", 5)]
    m = sym_model("Expand", [("x", np.zeros((2, 3), F32)), ("s", np.array([1, 1, 1], I64))], x=["N", 3])
    assert out_shapes(m) == [(None, None, 3)]
    model, feeds = build("Expand", [("x", rand(rng, (3, 4), F32)), ("s", c64([5, 4]))])
    expect_error(model, feeds, kind=twinfer.ShapeError)


@pytest.mark.parametrize("shape,reps", [((3, 5), [2, 3]), ((3, 5), [1, 1]), ((2, 1, 3), [3, 4, 1]), ((7,), [5]),
                                        ((3, 5), [0, 2]), ((2, 3, 1, 5), [1, 2, 3, 2])])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_tile(rng, shape, reps, dt):
    check("Tile", [("x", rand(rng, shape, dt)), ("r", c64(reps))])


def test_tile_symbolic_and_errors(rng):
    m = sym_model("Tile", [("x", np.zeros((2, 3), F32)), ("r", c64([1, 2]))], x=["N", 3])
    assert out_shapes(m) == [("N", 6)]
    model, feeds = build("Tile", [("x", rand(rng, (3, 4), F32)), ("r", c64([2]))])
    expect_error(model, feeds, "repeats", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Pad
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode,pads,opset", [
    ("constant", [1, 2, 0, 3, 0, 2], 13), ("constant", [0, -1, 2, 1, 2, -3], 13), ("reflect", [2, 1, 3, 1, 0, 4], 13),
    ("edge", [3, 0, 1, 2, 5, 0], 13), ("wrap", [2, 1, 3, 1, 4, 6], 19), ("constant", [0, 0, 0, 0, 0, 0], 13),
    ("reflect", [1, 0, 0, 1, 3, 0], 21)])
@pytest.mark.parametrize("dt", MOVE_DTYPES, ids=ids(MOVE_DTYPES))
def test_pad(rng, mode, pads, opset, dt):
    x = rand(rng, (3, 5, 7), dt)
    check("Pad", [("x", x), ("p", c64(pads))], {"mode": mode}, opset=opset)


@pytest.mark.parametrize("dt", [F32, I64, BOOL], ids=ids([F32, I64, BOOL]))
def test_pad_constant_value(rng, dt):
    x = rand(rng, (3, 5), dt)
    value = rand(rng, (), dt)
    check("Pad", [("x", x), ("p", c64([1, 2, 2, 0])), ("v", value)], {"mode": "constant"})
    check("Pad", [("x", x), ("p", c64([2, 0, 1, 3])), ("v", Const(value))], {"mode": "constant"})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("axes,pads", [([1], [2, 3]), ([-1, 0], [1, 2, 3, 1]), ([2], [0, 4])])
def test_pad_axes(rng, mode, axes, pads):
    x = rand(rng, (3, 5, 7), F32)
    check("Pad", [("x", x), ("p", c64(pads)), ("v", None), ("a", c64(axes))], {"mode": mode}, opset=18)


def test_pad_threads_and_errors(rng):
    check("Pad", [("x", rand(rng, (5, 131, 129), F32)), ("p", c64([1, 2, 3, 0, 4, 1]))], {"mode": "reflect"},
          num_threads=2)
    m = sym_model("Pad", [("x", np.zeros((2, 3), F32)), ("p", c64([0, 1, 0, 2]))], x=["N", 3])
    assert out_shapes(m) == [("N", 6)]
    model, feeds = build("Pad", [("x", rand(rng, (3, 5), F32)), ("p", c64([1, 2, 3]))])
    expect_error(model, feeds, "pads", kind=twinfer.ShapeError)
    model, feeds = build("Pad", [("x", rand(rng, (3, 5), F32)), ("p", c64([-4, 0, 0, 0]))])
    expect_error(model, feeds, "crop", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# Trilu / CumSum / OneHot
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -2, 0, 1, 3, -9, 20])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 6, 4)])
@pytest.mark.parametrize("dt", [F32, I64, BOOL], ids=ids([F32, I64, BOOL]))
def test_trilu(rng, upper, k, shape, dt):
    inputs = [("x", rand(rng, shape, dt))]
    if k is not None:
        inputs.append(("k", Const(np.array(k, I64))))
    check("Trilu", inputs, {"upper": upper}, opset=14)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dt", [F32, F64, I32, I64], ids=ids([F32, F64, I32, I64]))
def test_cumsum(rng, axis, exclusive, reverse, dt):
    x = rand(rng, (3, 5, 7), dt)
    check("CumSum", [("x", x), ("a", np.array(axis, I64))], {"exclusive": exclusive, "reverse": reverse},
          rtol=1e-5, atol=1e-5)


def test_cumsum_axis_error(rng):
    model, feeds = build("CumSum", [("x", rand(rng, (3, 5), F32)), ("a", c64(2))])
    expect_error(model, feeds, "axis", kind=twinfer.ShapeError)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
@pytest.mark.parametrize("idt,vdt", [(I64, F32), (F32, I64), (I32, F32), (I64, I64)])
def test_onehot(rng, axis, idt, vdt):
    depth = 6
    ind = rng.integers(-depth - 2, depth + 2, size=(3, 5)).astype(idt)  # out-of-range ones give all-off
    values = rand(rng, (2,), vdt)
    inputs = [("i", ind), ("d", Const(np.array(depth, I64))), ("v", values)]
    if idt != I32:
        check("OneHot", inputs, {"axis": axis}, out=[vdt])
        return
    # onnxruntime has no int32-index kernel (and the reference evaluator returns
    # float64): NumPy is the reference here.
    (got,) = run(*build("OneHot", inputs, {"axis": axis}, out=[vdt]))
    k = ind.astype(I64)
    k = np.where(k < 0, k + depth, k)
    want = np.where(np.arange(depth) == k[..., None], values[1], values[0]).astype(vdt)
    np.testing.assert_array_equal(got, np.moveaxis(want, -1, axis))


def test_onehot_float_depth_and_symbolic(rng):
    ind = rng.integers(0, 4, size=(7,)).astype(I64)
    check("OneHot", [("i", ind), ("d", Const(np.array(4.0, F32))), ("v", np.array([0, 1], F32))], out=[F32])
    m = build("OneHot", [("i", ind), ("d", Const(np.array(4, I64))), ("v", np.array([0, 1], F32))], {"axis": 0},
              out=[F32], sym_inputs={"i": ["N"]})[0]
    assert out_shapes(m) == [(4, "N")]


# ---------------------------------------------------------------------------
# Values of unknown rank at load (here the output of a Reshape to a computed
# shape of unknown length): the rules must let them through. Such a model
# cannot run yet (data-dependent shapes), so only the load is checked.
# ---------------------------------------------------------------------------
UNKNOWN_RANK_CASES = [
    ("Transpose", {"perm": [2, 0, 1]}, []), ("Transpose", {}, []), ("Reshape", {}, [("s2", c64([0, -1]))]),
    ("Flatten", {"axis": 2}, []), ("Squeeze", {}, [("a", c64([1]))]), ("Squeeze", {}, []),
    ("Unsqueeze", {}, [("a", c64([0, -1]))]), ("Concat", {"axis": 1}, "twice"),
    ("Slice", {}, [("st", c64([1])), ("en", c64([-1])), ("ax", c64([2]))]),
    ("Gather", {"axis": 1}, [("i", c64([4, -1, 0]))]), ("GatherElements", {"axis": 1}, [("i", c64([[0]]))]),
    ("Expand", {}, [("s2", c64([2, 3, 4]))]), ("Tile", {}, [("reps", c64([2, 1]))]),
    ("Pad", {"mode": "edge"}, [("p", c64([1, 0, 2, 3]))]), ("Shape", {}, []), ("Size", {}, []),
    ("Split", {"axis": 1, "num_outputs": 2}, []), ("Trilu", {}, []), ("CumSum", {}, [("ax", c64(0))]),
    ("DepthToSpace", {"blocksize": 2}, []), ("OneHot", {}, [("d", c64(3)), ("v", Const(np.array([0, 1], F32)))]),
    ("ReduceSum", {"keepdims": 0}, [("a", c64([1]))]), ("ReduceMax", {}, []), ("ArgMax", {"axis": -1}, []),
]


@pytest.mark.parametrize("op,attrs,consts", UNKNOWN_RANK_CASES, ids=[c[0] for c in UNKNOWN_RANK_CASES])
def test_unknown_rank_values(op, attrs, consts):
    reshape = helper.make_node("Reshape", ["x", "s"], ["r"])
    names = ["r", "r"] if consts == "twice" else ["r"] + [n for n, _ in consts]
    inits = [] if consts == "twice" else [numpy_helper.from_array(c.value, n) for n, c in consts]
    nout = 2 if op == "Split" else 1
    node = helper.make_node(op, names, [f"y{k}" for k in range(nout)], name="the_node", **attrs)
    from onnx_helpers import make_model

    dt = I64 if op in ("Shape", "Size", "ArgMax") else F32
    model = make_model([reshape, node], [("x", F32, ["N", 6]), ("s", I64, ["K"])],
                       [(f"y{k}", dt, None) for k in range(nout)], inits, opset=18)
    assert len(out_shapes(model)) == nout
