"""ONNX sequence and optional values: the Sequence* ops, SplitToSequence /
ConcatFromSequence, SequenceMap, Optional*, Loop and If carrying them, and
sequence/optional graph inputs and outputs (fed as lists / None). Compared with
onnxruntime (or the ONNX reference evaluator where onnxruntime cannot take
the feed) on fresh random data with odd sizes."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import assert_close, run_ort, run_reference

import twinfer
import twinfer.backend

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "seq", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def tensor_vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def seq_vi(name, elem=F, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt_vi(name, type_proto):
    return helper.make_value_info(name, helper.make_optional_type_proto(type_proto))


def seq_type(elem=F, shape=None):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape))


def scalar(v):
    return np.array(v, dtype=np.int64)


def assert_same(actual, expected, what=""):
    """Tensors, lists of them (sequences) and None (empty optionals)."""
    if expected is None:
        assert actual is None, f"{what}: expected None, got {actual!r}"
        return
    if isinstance(expected, list):
        assert isinstance(actual, list), f"{what}: expected a list, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{what}: {len(actual)} items, expected {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{k}]")
        return
    assert_close(np.asarray(actual), np.asarray(expected), what=what)


def run(m, feeds):
    """The CPU's results, after checking the simulated GPU gives the same (a
    device engine evaluates sequence graphs on the host, with a warning)."""
    results = {}
    for device in ("cpu", "sim"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = twinfer.load(m, device=device).run(feeds)
        results[device] = [twinfer.backend._numpy(out[o.name]) for o in m.graph.output]
    for k, (a, b) in enumerate(zip(results["cpu"], results["sim"])):
        assert_same(b, a, f"sim output {k}")
    return results["cpu"]


@pytest.fixture
def rng():
    return np.random.default_rng()


# -- Construct / Insert / Erase / At / Length / Concat -----------------------------


@pytest.mark.parametrize("insert_at,erase_at,at", [(1, -1, 0), (0, 0, -1), (-2, 2, 1), (3, -3, 2)])
def test_sequence_ops_chain(rng, insert_at, erase_at, at):
    nodes = [
        helper.make_node("SequenceConstruct", ["x", "y", "w"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "z", "ins"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "era"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "at"], ["item"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0),
        helper.make_node("Relu", ["item"], ["relu"]),
    ]
    m = model(
        nodes,
        [tensor_vi("x", F, [3, 5]), tensor_vi("y", F, [2, 5]), tensor_vi("z", F, [4, 5]),
         tensor_vi("ins", I64, []), tensor_vi("era", I64, []), tensor_vi("at", I64, [])],
        [tensor_vi("relu"), tensor_vi("n", I64, []), tensor_vi("cat"), seq_vi("s3")],
        inits=[helper.make_tensor("w", F, [1, 5], rng.standard_normal(5).astype(np.float32).tolist())],
    )
    feeds = {"x": rng.standard_normal((3, 5), dtype=np.float32), "y": rng.standard_normal((2, 5), dtype=np.float32),
             "z": rng.standard_normal((4, 5), dtype=np.float32), "ins": scalar(insert_at), "era": scalar(erase_at),
             "at": scalar(at)}
    ours = run(m, feeds)
    ref = run_ort(m, feeds)
    for k, (a, e) in enumerate(zip(ours, ref)):
        assert_same(a, e, m.graph.output[k].name)
    assert isinstance(ours[3], list) and len(ours[3]) == 3


def test_empty_and_default_positions(rng):
    # SequenceEmpty of int64, appends (no position), erase of the last (no position).
    nodes = [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=I64),
        helper.make_node("SequenceInsert", ["e", "a"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "b"], ["s2"]),
        helper.make_node("SequenceInsert", ["s2", "a"], ["s3"]),
        helper.make_node("SequenceErase", ["s3"], ["s4"]),
        helper.make_node("ConcatFromSequence", ["s4"], ["cat"], axis=-1),
        helper.make_node("SequenceLength", ["e"], ["n0"]),
    ]
    m = model(nodes, [tensor_vi("a", I64, [2, 3]), tensor_vi("b", I64, [2, 7])],
              [tensor_vi("cat", I64), tensor_vi("n0", I64, []), seq_vi("e", I64)])
    feeds = {"a": rng.integers(-9, 9, (2, 3)), "b": rng.integers(-9, 9, (2, 7))}
    ours = run(m, feeds)
    for k, (a, e) in enumerate(zip(ours, run_ort(m, feeds))):
        assert_same(a, e, m.graph.output[k].name)
    assert ours[2] == []


@pytest.mark.parametrize("axis", [0, 1, -1, 3])
def test_concat_from_sequence_new_axis(rng, axis):
    nodes = [helper.make_node("SequenceConstruct", ["x", "y", "x"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=axis, new_axis=1)]
    m = model(nodes, [tensor_vi("x", F, [3, 2, 5]), tensor_vi("y", F, [3, 2, 5])], [tensor_vi("out")])
    feeds = {"x": rng.standard_normal((3, 2, 5), dtype=np.float32), "y": rng.standard_normal((3, 2, 5), dtype=np.float32)}
    assert_same(run(m, feeds)[0], run_ort(m, feeds)[0])
    # Its rank is not known before the items are: the spec's () said scalar.
    (spec,) = twinfer.load(m).outputs
    assert spec.shape == () and spec.has_shape is False
    assert all(s.has_shape for s in twinfer.load(m).inputs)


# -- SplitToSequence -------------------------------------------------------------------


@pytest.mark.parametrize(
    "split,axis,keepdims",
    [(None, 0, 1), (None, 1, 0), (None, -1, 1), (np.array(2, np.int64), 1, 1),
     (np.array(3, np.int64), 0, 1), (np.array([1, 4, 0, 2], np.int64), 1, 1)],
)
def test_split_to_sequence(rng, split, axis, keepdims):
    inputs = ["x"] + (["split"] if split is not None else [])
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("SequenceAt", ["s", "last"], ["tail"])]
    ins = [tensor_vi("x", F, [5, 7, 3])]
    feeds = {"x": rng.standard_normal((5, 7, 3), dtype=np.float32), "last": scalar(-1)}
    if split is not None:
        ins.append(tensor_vi("split", I64, list(split.shape)))
        feeds["split"] = split
    ins.append(tensor_vi("last", I64, []))
    m = model(nodes, ins, [seq_vi("s"), tensor_vi("n", I64, []), tensor_vi("tail")])
    ours = run(m, feeds)
    for k, (a, e) in enumerate(zip(ours, run_ort(m, feeds))):
        assert_same(a, e, m.graph.output[k].name)


# -- sequence inputs, SequenceMap ----------------------------------------------------


def test_sequence_input_and_map(rng):
    # in_seq (a list of arrays of different lengths) -> SequenceMap(body: x * w + y, ReduceSum(x))
    body = helper.make_graph(
        [helper.make_node("Mul", ["xi", "w"], ["m"]), helper.make_node("Add", ["m", "yi"], ["o1"]),
         helper.make_node("ReduceSum", ["xi"], ["o2"], keepdims=0)],
        "body", [tensor_vi("xi", F, None), tensor_vi("yi", F, None)], [tensor_vi("o1", F, None), tensor_vi("o2", F, None)])
    nodes = [helper.make_node("SequenceMap", ["in_seq", "y"], ["out1", "out2"], body=body)]
    m = model(nodes, [seq_vi("in_seq", F, ["n"]), tensor_vi("y", F, [1])], [seq_vi("out1"), seq_vi("out2")],
              inits=[helper.make_tensor("w", F, [], [1.5])])
    items = [rng.standard_normal((n,), dtype=np.float32) for n in (3, 1, 6, 5)]
    feeds = {"in_seq": items, "y": rng.standard_normal((1,), dtype=np.float32)}
    ours = run(m, feeds)
    for k, (a, e) in enumerate(zip(ours, run_ort(m, feeds))):
        assert_same(a, e, m.graph.output[k].name)
    # The fed arrays are not written and outputs own their memory.
    again = run(m, feeds)
    assert_same(again, ours)


def test_sequence_input_passthrough_does_not_alias(rng):
    m = model([helper.make_node("Identity", ["s"], ["t"])], [seq_vi("s", F, None)], [seq_vi("t")])
    items = [rng.standard_normal((2, 3), dtype=np.float32), rng.standard_normal((4,), dtype=np.float32)]
    engine = twinfer.load(m, device="cpu")
    out = engine.run({"s": items})["t"]
    assert isinstance(out, list) and all(isinstance(t, twinfer.Tensor) for t in out)
    assert_same([t.numpy() for t in out], items)
    out[0].numpy()[...] = 7.0  # writing an output must not touch the input
    assert not np.any(items[0] == 7.0)
    assert engine.run({"s": []})["t"] == []


def test_io_type_names():
    m = model([helper.make_node("OptionalGetElement", ["o"], ["s"]),
               helper.make_node("Optional", ["s"], ["o2"])],
              [opt_vi("o", seq_type(F))], [seq_vi("s"), opt_vi("o2", seq_type(F))], opset=18)
    engine = twinfer.load(m, device="cpu")
    assert [s.dtype for s in engine.inputs] == ["optional(sequence(float32))"]
    assert [s.dtype for s in engine.outputs] == ["sequence(float32)", "optional(sequence(float32))"]


# -- optionals ------------------------------------------------------------------------


@pytest.mark.parametrize("present", [True, False])
def test_optional_tensor_input(rng, present):
    # has = OptionalHasElement(o); value = If(has, OptionalGetElement(o) * 2, zeros)
    then_g = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["v"]),
                                helper.make_node("Mul", ["v", "two"], ["t"])], "then", [], [tensor_vi("t")])
    else_g = helper.make_graph([helper.make_node("Identity", ["zero"], ["e"])], "else", [], [tensor_vi("e")])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["val"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Identity", ["o"], ["o_out"])]
    m = model(nodes, [opt_vi("o", helper.make_tensor_type_proto(F, [3, 5]))],
              [tensor_vi("has", TensorProto.BOOL, []), tensor_vi("val"),
               opt_vi("o_out", helper.make_tensor_type_proto(F, [3, 5]))],
              inits=[helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("zero", F, [1], [0.0])], opset=18)
    x = rng.standard_normal((3, 5), dtype=np.float32) if present else None
    ours = run(m, {"o": x})
    # The reference evaluator cannot pass an empty optional through Identity:
    # it checks the first two outputs, the third is the input itself.
    del m.graph.output[2], m.graph.node[2]
    ref = run_reference(m, {"o": x})
    for k, (a, e) in enumerate(zip(ours[:2], ref)):
        assert_same(a, e, m.graph.output[k].name)
    assert_same(ours[2], x, "o_out")


def test_optional_of_sequence_and_empty_typed(rng):
    # Optional(type=sequence(float)) without input is empty; Optional(seq) is not.
    nodes = [helper.make_node("Optional", [], ["empty"], type=seq_type(F)),
             helper.make_node("OptionalHasElement", ["empty"], ["h0"]),
             helper.make_node("SequenceConstruct", ["x"], ["s"]),
             helper.make_node("Optional", ["s"], ["full"]),
             helper.make_node("OptionalHasElement", ["full"], ["h1"]),
             helper.make_node("OptionalGetElement", ["full"], ["back"])]
    m = model(nodes, [tensor_vi("x", F, [2, 3])],
              [tensor_vi("h0", TensorProto.BOOL, []), tensor_vi("h1", TensorProto.BOOL, []), seq_vi("back"),
               opt_vi("empty", seq_type(F))], opset=18)
    x = rng.standard_normal((2, 3), dtype=np.float32)
    h0, h1, back, empty = run(m, {"x": x})
    assert not h0 and h1 and empty is None
    assert_same(back, [x])


# -- control flow carrying sequences ----------------------------------------------------


def test_loop_carrying_a_sequence(rng):
    # Each iteration appends x[:i+1] * i to the carried sequence; then the
    # sequence's items are summed and the last one is returned.
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Unsqueeze", ["end", "zero_axis"], ["end1"]),
         helper.make_node("Slice", ["x", "start", "end1"], ["part"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["part", "fi"], ["scaled"]),
         helper.make_node("SequenceInsert", ["s_in", "scaled"], ["s_out"])],
        "body", [tensor_vi("i", I64, []), tensor_vi("c_in", TensorProto.BOOL, []), seq_vi("s_in", F, None)],
        [tensor_vi("c_out", TensorProto.BOOL, []), seq_vi("s_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["trips", "", "s0"], ["s_final"], body=body),
             helper.make_node("SequenceAt", ["s_final", "minus_one"], ["last"]),
             helper.make_node("SequenceLength", ["s_final"], ["n"])]
    m = model(nodes, [tensor_vi("x", F, [9]), tensor_vi("trips", I64, [])],
              [seq_vi("s_final"), tensor_vi("last"), tensor_vi("n", I64, [])],
              inits=[helper.make_tensor("one", I64, [], [1]), helper.make_tensor("zero_axis", I64, [1], [0]),
                     helper.make_tensor("start", I64, [1], [0]), helper.make_tensor("minus_one", I64, [], [-1])],
              opset=13)
    feeds = {"x": rng.standard_normal(9, dtype=np.float32), "trips": scalar(int(rng.integers(2, 8)))}
    ours = run(m, feeds)
    for k, (a, e) in enumerate(zip(ours, run_ort(m, feeds))):
        assert_same(a, e, m.graph.output[k].name)


@pytest.mark.parametrize("cond", [True, False])
def test_if_returning_sequences(rng, cond):
    then_g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["ts"], axis=0)], "then", [], [seq_vi("ts")])
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["es"])], "else", [], [seq_vi("es")])
    m = model([helper.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g),
               helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=1)],
              [tensor_vi("c", TensorProto.BOOL, []), tensor_vi("x", F, [3, 4])], [seq_vi("s"), tensor_vi("cat")])
    feeds = {"c": np.array(cond), "x": rng.standard_normal((3, 4), dtype=np.float32)}
    ours = run(m, feeds)
    for k, (a, e) in enumerate(zip(ours, run_ort(m, feeds))):
        assert_same(a, e, m.graph.output[k].name)


# -- errors ---------------------------------------------------------------------------


def test_sequence_at_out_of_range(rng):
    m = model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
               helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")],
              [tensor_vi("x", F, [2]), tensor_vi("p", I64, [])], [tensor_vi("y")])
    engine = twinfer.load(m, device="cpu")
    x = rng.standard_normal(2, dtype=np.float32)
    assert_same(engine.run({"x": x, "p": scalar(-2)})["y"].numpy(), x)
    for bad in (2, -3):
        with pytest.raises(twinfer.errors.InvalidArgumentError, match="out of range") as e:
            engine.run({"x": x, "p": scalar(bad)})
        assert e.value.node == "pick" and e.value.op == "SequenceAt"


def test_wrong_element_dtype_fed():
    m = model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq_vi("s", F, None)], [tensor_vi("n", I64, [])])
    engine = twinfer.load(m, device="cpu")
    assert engine.run({"s": [np.zeros(3, np.float32)] * 4})["n"].numpy() == 4
    with pytest.raises(twinfer.errors.DTypeError, match=r"input 's' item 1 expects float32, got float64"):
        engine.run({"s": [np.zeros(3, np.float32), np.zeros(3, np.float64)]})
    with pytest.raises(twinfer.errors.InvalidArgumentError, match="feed a list"):
        engine.run({"s": np.zeros(3, np.float32)})


def test_insert_of_wrong_dtype_is_refused_at_load():
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"]),
               helper.make_node("SequenceInsert", ["s", "k"], ["s2"], name="ins")],
              [tensor_vi("x", F, [2]), tensor_vi("k", I64, [2])], [seq_vi("s2")])
    with pytest.raises(twinfer.errors.DTypeError, match="cannot insert") as e:
        twinfer.load(m, device="cpu")
    assert e.value.node == "ins"


def test_empty_optional_get_element_raises():
    m = model([helper.make_node("OptionalGetElement", ["o"], ["v"], name="get")],
              [opt_vi("o", helper.make_tensor_type_proto(F, [2]))], [tensor_vi("v")], opset=18)
    engine = twinfer.load(m, device="cpu")
    assert_same(engine.run({"o": np.ones(2, np.float32)})["v"].numpy(), np.ones(2, np.float32))
    with pytest.raises(twinfer.errors.InvalidArgumentError, match="empty") as e:
        engine.run({"o": None})
    assert e.value.node == "get"


def test_concat_of_mismatched_items_raises(rng):
    m = model([helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
               helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0, name="cat")],
              [tensor_vi("x", F, [2, 3]), tensor_vi("y", F, [2, 4])], [tensor_vi("c")])
    with pytest.raises(twinfer.errors.ShapeError, match="does not fit") as e:
        twinfer.load(m, device="cpu").run({"x": np.zeros((2, 3), np.float32), "y": np.zeros((2, 4), np.float32)})
    assert e.value.node == "cat"


def test_backend_returns_lists_and_none(rng):
    m = model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0)],
              [tensor_vi("x", F, [2, 3])], [seq_vi("s")])
    x = rng.standard_normal((2, 3), dtype=np.float32)
    (out,) = twinfer.backend.run_model(m, [x])
    assert isinstance(out, list) and len(out) == 3
    assert_same(out, [x[:, k] for k in range(3)])
    onnx.checker.check_model(m)
