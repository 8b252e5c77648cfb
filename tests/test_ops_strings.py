"""String tensors and the string ops (StringConcat, StringSplit,
StringNormalizer, RegexFullMatch, Equal, Cast to and from strings) and the
data-movement ops on strings (csrc/ops/tensor/string_movement.cc). Compared
with onnxruntime (the ONNX reference evaluator where onnxruntime lacks the
op) on fresh random strings, some of them not ASCII."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import run_ort, run_reference

import twinfer
import twinfer.backend

S = TensorProto.STRING
ALPHABET = list("abcXYZ -,") + ["é", "ß", "Ω", "😀"]


def model(nodes, inputs, outputs, opset=20):
    g = helper.make_graph(nodes, "strings", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def vi(name, elem=S, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def ivi(name, x):
    """An input's value info of x's rank (twinfer takes a graph input with no
    shape as rank 0)."""
    x = np.asarray(x)
    elem = S if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    return helper.make_tensor_value_info(name, elem, [None] * x.ndim)


def words(rng, shape, longest=6):
    flat = ["".join(rng.choice(ALPHABET, rng.integers(0, longest + 1))) for _ in range(int(np.prod(shape)))]
    return np.array(flat, dtype=object).reshape(shape)


def run(m, feeds):
    return twinfer.backend.prepare(m).run([feeds[i.name] for i in m.graph.input])


def assert_same(got, want):
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype == object or w.dtype.kind in "US":
            assert g.dtype == object
            assert g.tolist() == w.astype(object).tolist()
        else:
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shapes", [([3, 4], [3, 4]), ([2, 1, 3], [4, 1]), ([], [5])])
def test_concat_and_equal_broadcast(shapes):
    rng = np.random.default_rng(1)
    a, b = words(rng, shapes[0]), words(rng, shapes[1], 2)
    b.flat[0] = a.flat[0]  # at least one equal pair where shapes allow
    m = model([helper.make_node("StringConcat", ["a", "b"], ["c"]), helper.make_node("Equal", ["a", "b"], ["e"])],
              [ivi("a", a), ivi("b", b)], [vi("c"), vi("e", TensorProto.BOOL)])
    feeds = {"a": a, "b": b}
    assert_same(run(m, feeds), run_ort(m, feeds))


@pytest.mark.parametrize("delimiter,maxsplit", [(None, None), ("-", None), ("-", 1), ("ab", None), (None, 2)])
def test_split(delimiter, maxsplit):
    rng = np.random.default_rng(2)
    x = np.array(["a-b--c", "", "  lead and trail  ", "ab", "x\ty\nz", "-", "é-ß-Ω abab"], dtype=object).reshape(7)
    x = np.concatenate([x, words(rng, [9])]).reshape(4, 4)
    attrs = {k: v for k, v in (("delimiter", delimiter), ("maxsplit", maxsplit)) if v is not None}
    m = model([helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs)], [ivi("x", x)],
              [vi("y"), vi("n", TensorProto.INT64)])
    # Python's str.split is what the spec describes; the reference evaluator uses it.
    assert_same(run(m, {"x": x}), run_reference(m, {"x": x}))


def test_split_empty_input():
    m = model([helper.make_node("StringSplit", ["x"], ["y", "n"], delimiter=",")], [vi("x", S, [None, 3])],
              [vi("y"), vi("n", TensorProto.INT64)])
    y, n = run(m, {"x": np.empty((0, 3), dtype=object)})
    assert y.shape == (0, 3, 0) and n.shape == (0, 3) and n.dtype == np.int64


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("case_sensitive", [0, 1])
@pytest.mark.parametrize("shape", [[6], [1, 6]])
def test_normalizer(action, case_sensitive, shape):
    x = np.array(["Monday", "tuesday", "MONDAY", "Straße", "Éclair", "wednesday"], dtype=object).reshape(shape)
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action,
                            is_case_sensitive=case_sensitive, stopwords=["monday", "WEDNESDAY"], locale="C.UTF-8")
    # onnxruntime needs the locale installed (this machine has C.UTF-8 only)
    # and a fixed C in the declared shape.
    m = model([node], [vi("x", S, shape)], [vi("y")], opset=10)
    assert_same(run(m, {"x": x}), run_ort(m, {"x": x}))


def test_normalizer_all_stopped_leaves_one_empty_string():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a", "b"])
    m = model([node], [vi("x", S, [1, 3])], [vi("y")], opset=10)
    (y,) = run(m, {"x": np.array([["a", "B", "b"]], dtype=object)})
    assert y.shape == (1, 1) and y.tolist() == [[""]]


@pytest.mark.parametrize("pattern", [r"[a-z]+@[a-z]+\.(com|org)", r"\w+\s\d{2,3}", r"(ab)*c?", r".*é.*"])
def test_regex_full_match(pattern):
    x = np.array([["joe@site.com", "joe@site.net", "ababc", "", "word 123", "word 1", "café", "abab"]], dtype=object)
    m = model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [ivi("x", x)],
              [vi("y", TensorProto.BOOL)])
    assert_same(run(m, {"x": x}), run_ort(m, {"x": x}))


def test_regex_pattern_twinfer_cannot_read_is_refused():
    m = model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern="(?i)abc", name="re")], [vi("x", S, [1])],
              [vi("y", TensorProto.BOOL)])
    with pytest.raises(twinfer.UnsupportedOpError, match="re.*pattern"):
        run(m, {"x": np.array(["ABC"], dtype=object)})


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64,
                                TensorProto.UINT8, TensorProto.FLOAT16])
def test_cast_from_string(to):
    # Integer types get whole numbers in their range: onnxruntime reads "1e3"
    # as 1 and wraps "-2" to 254 in uint8, where the spec says nothing.
    x = np.array(["12", "0", "7", "100", "+5"] + (["-2"] if to != TensorProto.UINT8 else []), dtype=object)
    if to in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        x = np.concatenate([x, np.array(["1.5", "1e3", "-2.5E-3", "NaN", "-INF", "inf", "3.25e-2"], dtype=object)])
    m = model([helper.make_node("Cast", ["x"], ["y"], to=to)], [ivi("x", x)], [vi("y", to)])
    ((got,), (want,)) = run(m, {"x": x}), run_ort(m, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int8, np.float16])
def test_cast_to_string_reads_back(dtype):
    # The spec leaves the text's form open (onnxruntime writes floats with
    # %g-like rounding); what must hold is that the text reads back to the
    # same value, specials written as the spec names them.
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20) * 1000).astype(dtype)
    if dtype in (np.float32, np.float64, np.float16):
        x[:3] = [np.nan, np.inf, -np.inf]
    m = model([helper.make_node("Cast", ["x"], ["y"], to=S)], [ivi("x", x)],
              [vi("y")])
    (y,) = run(m, {"x": x})
    assert y.dtype == object
    assert [s for s in y[:3]] == (["NaN", "INF", "-INF"] if x.dtype.kind == "f" else [str(v) for v in x[:3]])
    back = np.array([float(s.replace("INF", "inf")) for s in y]).astype(dtype)
    np.testing.assert_array_equal(back, x)


def test_cast_of_text_that_is_no_number_is_refused():
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="c")], [vi("x", S, [2])],
              [vi("y", TensorProto.FLOAT)])
    with pytest.raises(twinfer.InvalidArgumentError, match="element 1 .*'12abc'.* not a number"):
        run(m, {"x": np.array(["1", "12abc"], dtype=object)})


def test_movement_ops_on_strings():
    # Reshape, Transpose, Gather, Concat, Slice, Tile, Where, Identity on a
    # string tensor, against NumPy on the same object array.
    rng = np.random.default_rng(4)
    x, other = words(rng, [2, 3, 4]), words(rng, [2, 3, 4])
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)  # noqa: E731
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=i64("shape", [4, 6])),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Constant", [], ["idx"], value=i64("idx", [2, 0, 2])),
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=2),
        helper.make_node("Concat", ["x", "o"], ["c"], axis=1),
        helper.make_node("Constant", [], ["starts"], value=i64("starts", [1])),
        helper.make_node("Constant", [], ["ends"], value=i64("ends", [4])),
        helper.make_node("Constant", [], ["axes"], value=i64("axes", [2])),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
        helper.make_node("Constant", [], ["reps"], value=i64("reps", [1, 2, 1])),
        helper.make_node("Tile", ["x", "reps"], ["ti"]),
        helper.make_node("Where", ["cond", "x", "o"], ["w"]),
        helper.make_node("Identity", ["x"], ["id"]),
    ]
    outs = ["r", "t", "g", "c", "s", "ti", "w", "id"]
    m = model(nodes, [ivi("x", x), ivi("o", other), vi("cond", TensorProto.BOOL, [3, 4])], [vi(o) for o in outs], opset=17)
    cond = rng.random([3, 4]) < 0.5
    got = run(m, {"x": x, "o": other, "cond": cond})
    want = [x.reshape(4, 6), x.transpose(2, 0, 1), x[:, :, [2, 0, 2]], np.concatenate([x, other], 1), x[:, :, 1:4],
            np.tile(x, (1, 2, 1)), np.where(cond, x, other), x]
    assert_same(got, want)


def test_string_into_a_numeric_op_is_refused():
    m = model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [vi("x", S, [1])], [vi("y")], opset=17)
    with pytest.raises(twinfer.Error, match="add.*string"):
        run(m, {"x": np.array(["a"], dtype=object)})


def test_numbers_fed_as_strings_are_refused():
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", S, [2])], [vi("y")])
    with pytest.raises(twinfer.Error, match="string"):
        run(m, {"x": np.array([1.0, 2.0], dtype=np.float32)})
    with pytest.raises(twinfer.Error, match="str or bytes"):
        run(m, {"x": np.array([1, "a"], dtype=object)})


def test_bytes_that_are_not_utf8_survive_and_case_change_refuses_them():
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", S, [2])], [vi("y")])
    x = np.array([b"\xffab", b"ok"], dtype=object)
    (y,) = run(m, {"x": x})
    assert [s.encode("utf-8", "surrogateescape") for s in y] == [b"\xffab", b"ok"]
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", name="norm")
    m = model([node], [vi("x", S, [2])], [vi("y")], opset=10)
    with pytest.raises(twinfer.InvalidArgumentError, match="norm.*not valid UTF-8"):
        run(m, {"x": x})
