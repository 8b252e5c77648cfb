"""Shape inputs: small graph inputs whose values decide shapes (a Range's
bound, a Slice's end, a Reshape's target, a window's length), like TensorRT's
shape tensors. Plans are keyed by their values as well as by the inputs'
shapes, so such models run on the device instead of through the host
evaluator (graph/passes/shape_inputs.h, runtime/engine.cc).

References: NumPy on fresh random data; the host evaluator's warning is the
sign that a device engine did not plan a run."""

import warnings

import numpy as np
import pytest
from conftest import PLAN_DEVICES, load_on, rel_err
from onnx import TensorProto, helper, numpy_helper

import twinfer

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.fixture(params=PLAN_DEVICES)
def device(request):
    return request.param


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "shape_inputs", inputs, [helper.make_tensor_value_info(o, t, None)
                                                          for o, t in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _no_host_fallback(engine, feeds):
    """Runs with warnings as errors: a device engine that went to the host
    evaluator would warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = engine.run(feeds)
    return {k: v.numpy() for k, v in out.items()}


def _head_model():
    # y = Relu(x[:n] * 2) + Range(0, n) along the rows: the row count is n's value.
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    z0 = numpy_helper.from_array(np.array(0, np.int64), "z0")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    ax1 = numpy_helper.from_array(np.array([1], np.int64), "ax1")
    nodes = [
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Slice", ["x", "zero", "n1", "zero"], ["head"]),
        helper.make_node("Mul", ["head", "two"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["r"]),
        helper.make_node("Range", ["z0", "n", "one"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=F),
        helper.make_node("Unsqueeze", ["posf", "ax1"], ["col"]),
        helper.make_node("Add", ["r", "col"], ["y"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 7]), helper.make_tensor_value_info("n", I64, [])],
                  [("y", F)], [two, zero, z0, one, ax1])


def _head_ref(x, n):
    return np.maximum(x[:n] * 2, 0) + np.arange(n, dtype=np.float32)[:, None]


def test_a_scalar_input_that_sizes_a_slice_and_a_range(device, rng):
    m = _head_model()
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    assert e.stats()["shape_inputs"] == ["n"]
    x = rng.standard_normal((11, 7)).astype(np.float32)
    for n in (3, 11, 1, 3, 0, 11, 5):
        got = _no_host_fallback(e, {"x": x, "n": np.array(n, np.int64)})["y"]
        assert got.shape == (n, 7)
        np.testing.assert_allclose(got, _head_ref(x, n), rtol=1e-6)
    s = e.stats()
    # Values 3, 11, 1, 0, 5 each built a plan once (beside the plan for the
    # shapes alone, which needs them); the repeats found theirs.
    assert s["plans_cached"] == 6 and s["plan_misses"] == 6, s


def test_new_data_and_the_same_value_reuse_the_plan(device, rng):
    e = load_on(_head_model(), device)
    ctx = e.create_context()
    n = np.array(6, np.int64)
    for _ in range(5):
        x = rng.standard_normal((9, 7)).astype(np.float32)
        got = e.run({"x": x, "n": n}, context=ctx)["y"].numpy()
        np.testing.assert_allclose(got, _head_ref(x, 6), rtol=1e-6)
    if device != "cpu":  # captured once, replayed after: the value is part of the plan, not stale
        stats = ctx.graph_stats()
        assert stats["captures"] == 1 and stats["replays"] == 3, stats
    x = rng.standard_normal((9, 7)).astype(np.float32)
    np.testing.assert_allclose(e.run({"x": x, "n": np.array(2, np.int64)}, context=ctx)["y"].numpy(),
                               _head_ref(x, 2), rtol=1e-6)


def test_a_reshape_target_and_a_tile_count_from_the_caller(device, rng):
    # A 1-D shape input (Reshape's target) and one read through arithmetic
    # (Tile's repeats = reps + 1): both keyed by value.
    one = numpy_helper.from_array(np.array([1, 1], np.int64), "one")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Add", ["reps", "one"], ["reps1"]),
             helper.make_node("Tile", ["r", "reps1"], ["t"]),
             helper.make_node("Sin", ["t"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["N"]), helper.make_tensor_value_info("shape", I64, [2]),
                       helper.make_tensor_value_info("reps", I64, [2])], [("y", F)], [one])
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    assert sorted(e.stats()["shape_inputs"]) == ["reps", "shape"]
    for shape, reps in (([3, -1], [0, 1]), ([-1, 4], [2, 0]), ([3, -1], [1, 1])):
        x = rng.standard_normal(12).astype(np.float32)
        feeds = {"x": x, "shape": np.array(shape, np.int64), "reps": np.array(reps, np.int64)}
        got = _no_host_fallback(e, feeds)["y"]
        want = np.sin(np.tile(x.reshape(shape), np.array(reps) + 1))
        assert rel_err(got, want) < 1e-6


def test_a_window_length_and_a_filled_shape(device):
    # The window functions and ConstantOfShape take their size from an input.
    nodes = [helper.make_node("HannWindow", ["size"], ["w"], periodic=0),
             helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32))),
             helper.make_node("Add", ["c", "w"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("size", TensorProto.INT32, []),
                       helper.make_tensor_value_info("shape", I64, [2])], [("y", F)], opset=17)
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    for size, rows in ((5, 3), (8, 1), (5, 2)):
        got = _no_host_fallback(e, {"size": np.array(size, np.int32), "shape": np.array([rows, size], np.int64)})["y"]
        want = 2.5 + np.hanning(size)[None, :].repeat(rows, 0)  # NumPy's Hann is the symmetric one
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_model_output_that_is_a_shape_input_only(device):
    # Range's every input from the caller: the output folds to a constant of
    # the plan, still copied out per run.
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["y"])]
    vi = [helper.make_tensor_value_info(n, F, []) for n in "abd"]
    e = load_on(_model(nodes, vi, [("y", F)], opset=11), device,
              allow_cpu_fallback=device == "cpu")
    for a, b, d in ((0.5, 4.0, 0.75), (10.0, 1.0, -3.0), (0.5, 4.0, 0.75)):
        feeds = {"a": np.array(a, np.float32), "b": np.array(b, np.float32), "d": np.array(d, np.float32)}
        got = _no_host_fallback(e, feeds)["y"]
        np.testing.assert_allclose(got, np.arange(a, b, d, dtype=np.float32), rtol=1e-6)


def test_a_shape_input_on_the_device(device, rng):
    # A shape input made on the device by another engine, on its own stream:
    # read back when the run starts, after its producer finished.
    if device == "cpu":
        pytest.skip("device tensors are for device engines")
    add = _model([helper.make_node("Add", ["a", "b"], ["n"])],
                 [helper.make_tensor_value_info("a", I64, []), helper.make_tensor_value_info("b", I64, [])], [("n", I64)])
    producer = load_on(add, device)
    e = load_on(_head_model(), device)
    for n in (4, 9, 4):
        x = rng.standard_normal((10, 7)).astype(np.float32)
        dn = producer.run({"a": np.array(n - 1, np.int64), "b": np.array(1, np.int64)}, outputs="device")["n"]
        got = e.run({"x": x, "n": dn}, outputs="host")["y"].numpy()
        np.testing.assert_allclose(got, _head_ref(x, n), rtol=1e-6)


def test_a_value_out_of_range_is_a_named_error(device, rng):
    # The value decides a shape the model cannot have: the error names the
    # node, as for any other bad shape, and the engine keeps working.
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("shape", I64, [2])], [("y", F)])
    e = load_on(m, device)
    x = rng.standard_normal(6).astype(np.float32)
    with pytest.raises(twinfer.ShapeError):
        e.run({"x": x, "shape": np.array([4, -1], np.int64)})
    np.testing.assert_array_equal(e.run({"x": x, "shape": np.array([2, 3], np.int64)})["y"].numpy(), x.reshape(2, 3))


def test_a_cpu_engine_with_ever_new_values_stops_planning(rng):
    # A counter-like shape input would build a plan per run: past the 16
    # cached plans, new values on a CPU engine are evaluated eagerly, with
    # the same answers, and the plans built stay at 16.
    e = twinfer.load(_head_model(), device="cpu")
    x = rng.standard_normal((40, 7)).astype(np.float32)
    for n in list(range(1, 40)) + [3, 39]:
        np.testing.assert_allclose(e.run({"x": x, "n": np.array(n, np.int64)})["y"].numpy(), _head_ref(x, n), rtol=1e-6)
    s = e.stats()
    assert s["plans_cached"] <= 16 and s["plan_misses"] <= 18, s


def test_data_inputs_are_not_shape_inputs(device, rng):
    # x is rank 2 and w is read only as data (a Mul operand): neither is
    # keyed on. v is read for a Range's bound, so it is, but a value longer
    # than a shape can be is data: that run goes to the host evaluator.
    w = rng.standard_normal(7).astype(np.float32)
    m = _model([helper.make_node("Mul", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", F, ["N", 7]), helper.make_tensor_value_info("w", F, [7])], [("y", F)])
    e = load_on(m, device)
    assert e.stats()["shape_inputs"] == []
    x = rng.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_allclose(_no_host_fallback(e, {"x": x, "w": w})["y"], x * w, rtol=1e-6)

    z0 = numpy_helper.from_array(np.array(0, np.int64), "z0")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [helper.make_node("ReduceMax", ["v"], ["mx"], keepdims=0),
             helper.make_node("Cast", ["mx"], ["m"], to=I64),
             helper.make_node("Range", ["z0", "m", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=F)]
    e = load_on(_model(nodes, [helper.make_tensor_value_info("v", F, ["L"])], [("y", F)], [z0, one]), device,)
    assert e.stats()["shape_inputs"] == ["v"]
    short = np.array([1.0, 6.5, 3.0], np.float32)
    np.testing.assert_array_equal(_no_host_fallback(e, {"v": short})["y"], np.arange(6, dtype=np.float32))
    long = np.zeros(1000, np.float32)
    long[17] = 4.0
    if device == "cpu":
        got = e.run({"v": long})["y"].numpy()
    else:
        with pytest.warns(RuntimeWarning, match="CPU evaluator"):
            got = e.run({"v": long})["y"].numpy()
    np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32))


def test_data_whose_contents_size_the_output_is_not_keyed(device, rng):
    # NonZero counts what its (small, rank-1) input holds: keyed on it, a
    # device engine would build a plan for nearly every run. A device engine
    # runs it alone on the device instead, its count read back
    # (tests/test_staged_tail.py): no plan per value, no host step, no warning.
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    m = _model([helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("NonZero", ["pos"], ["y"])],
               [helper.make_tensor_value_info("x", F, ["N"])], [("y", I64)], [zero])
    e = load_on(m, "sim" if device == "sim-cuda" else device)
    assert e.stats()["shape_inputs"] == []
    x = rng.standard_normal(9).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = e.run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(got, np.stack(np.nonzero(x > 0)))


def test_every_slice_and_pad_argument_fed_at_run_time_keys_the_plan(device, rng):
    # Slice's starts, ends, axes and steps and Pad's pads and axes, all graph
    # inputs: each is a shape input (the rules ask for all of them, not only
    # the first they miss), so a device plan runs them with no host step.
    m = _model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
                helper.make_node("Pad", ["x", "p", "", "pa"], ["z"], mode="constant")],
               [helper.make_tensor_value_info("x", F, [9, 6, 5])] +
               [helper.make_tensor_value_info(n, I64, [2]) for n in ("s", "e", "a", "st")] +
               [helper.make_tensor_value_info("p", I64, [4]), helper.make_tensor_value_info("pa", I64, [2])],
               [("y", F), ("z", F)], opset=18)
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    assert sorted(e.stats()["shape_inputs"]) == ["a", "e", "p", "pa", "s", "st"]
    x = rng.standard_normal((9, 6, 5)).astype(np.float32)
    for s, en, a, st, p, pa in [([1, 5], [8, 0], [0, 2], [2, -1], [1, 0, 2, 3], [0, 2]),
                                ([-3, 0], [100, 6], [0, 1], [1, 3], [0, 1, 1, 0], [-1, 1])]:
        feeds = {"x": x, "s": np.array(s), "e": np.array(en), "a": np.array(a), "st": np.array(st),
                 "p": np.array(p), "pa": np.array(pa)}
        got = _no_host_fallback(e, feeds)
        sl = [slice(None)] * 3
        for ax, b, f, step in zip(a, s, en, st):
            sl[ax] = slice(b, f, step)
        np.testing.assert_array_equal(got["y"], x[tuple(sl)])
        widths = [(0, 0)] * 3
        for i, ax in enumerate(pa):
            widths[ax] = (p[i], p[i + len(pa)])
        np.testing.assert_array_equal(got["z"], np.pad(x, widths))
