"""If nodes whose condition folds become their taken branch
(graph/passes/inline_if.cc): conditions computed from shapes fold once a plan
knows them, conditions computed from a steering input (an integer or bool
scalar flag) once the plan is keyed by its value. The branch then runs as
planned nodes (on the device, for a device engine) instead of through the
If kernel's evaluator on the host.

References: onnxruntime on the same files, NumPy; which ops run comes from
kernel_report on the feeds a run uses."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import PLAN_DEVICES, load_on
from merged_decoder import MERGED_DECODER, greedy_steps_against_onnxruntime

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


@pytest.fixture(params=PLAN_DEVICES)
def device(request):
    return request.param


def _ort(m, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "inline_if", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ops(engine, feeds):
    rows = engine.kernel_report(feeds)
    return [r.op for r in rows], [r for r in rows if r.backend == "cpu" and engine.device != "cpu"]


def _branch(name, nodes, out, inits=()):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, None)], list(inits))


def _shape_guard_model():
    # An exporter's shape guard: If(x.shape[1] == 1) squeeze it, else sum the
    # columns; then a layer after. The then branch has its own constant and
    # reads x (an outer value); the else branch nests another If on the
    # same kind of condition (x.shape[0] > 2), folded one round later.
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    idx1 = numpy_helper.from_array(np.array(1, np.int64), "idx1")
    idx0 = numpy_helper.from_array(np.array(0, np.int64), "idx0")
    then_g = _branch("then", [helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(
        np.array([1], np.int64))), helper.make_node("Squeeze", ["x", "ax"], ["t_out"])], "t_out")
    inner_then = _branch("inner_then", [helper.make_node("ReduceSum", ["x", "ax1"], ["it_out"], keepdims=0)], "it_out",
                         [numpy_helper.from_array(np.array([1], np.int64), "ax1")])
    inner_else = _branch("inner_else", [helper.make_node("ReduceMax", ["x", "ax2"], ["ie_out"], keepdims=0)], "ie_out",
                         [numpy_helper.from_array(np.array([1], np.int64), "ax2")])
    else_g = _branch("else", [helper.make_node("Shape", ["x"], ["s2"]),
                              helper.make_node("Gather", ["s2", "idx0"], ["rows"]),
                              helper.make_node("Greater", ["rows", "two"], ["big"]),
                              helper.make_node("If", ["big"], ["e_out"], then_branch=inner_then,
                                               else_branch=inner_else, name="inner")], "e_out")
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "idx1"], ["cols"]),
             helper.make_node("Equal", ["cols", "one"], ["c"]),
             helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g, name="guard"),
             helper.make_node("Tanh", ["r"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", "K"])],
                  [helper.make_tensor_value_info("y", F, None)], [one, two, idx1, idx0])


@pytest.mark.parametrize("shape", [(5, 1), (5, 4), (2, 4)])
def test_a_shape_guard_becomes_its_branch(device, shape, rng):
    m = _shape_guard_model()
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    x = rng.standard_normal(shape).astype(np.float32)
    want = _ort(m, {"x": x})["y"]
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), want, rtol=1e-6, atol=1e-6)
    ops, host = _ops(e, {"x": x})
    assert "If" not in ops and not host, (ops, host)
    assert ops[-1] == "Tanh"


def test_the_toggle_keeps_the_if(monkeypatch, rng):
    monkeypatch.setenv("TWINFER_INLINE_IF", "0")
    m = _shape_guard_model()
    e = twinfer.load(m, device="cpu")
    x = rng.standard_normal((5, 4)).astype(np.float32)
    assert "If" in _ops(e, {"x": x})[0]
    # atol as in the test above: a row of random values can sum to nearly
    # zero, where float32 sums in another order differ by a few 1e-8.
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), _ort(m, {"x": x})["y"], rtol=1e-6, atol=1e-6)


def _mode_model():
    # silero VAD's form: If(mode == 16000) picks one of two networks on the
    # same input; the If's results are the graph outputs themselves (kept by
    # name through an Identity each).
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")
    k = numpy_helper.from_array(np.array(16000, np.int64), "k")
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                                helper.make_node("Identity", ["x"], ["xi"])],
                               "then", [], [helper.make_tensor_value_info("b", F, None),
                                            helper.make_tensor_value_info("xi", F, None)])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["a2"]),
                                helper.make_node("Neg", ["a2"], ["b2"]), helper.make_node("Abs", ["x"], ["x2"])],
                               "else", [], [helper.make_tensor_value_info("b2", F, None),
                                            helper.make_tensor_value_info("x2", F, None)])
    nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
             helper.make_node("If", ["c"], ["y", "z"], then_branch=then_g, else_branch=else_g, name="mode")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 4]), helper.make_tensor_value_info("sr", I64, [])],
                  [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("z", F, None)], [w, k])


def test_a_steering_input_picks_the_branch_per_value(device, rng):
    m = _mode_model()
    e = load_on(m, device, allow_cpu_fallback=device == "cpu")
    assert e.stats()["steering_inputs"] == ["sr"] and e.stats()["shape_inputs"] == []
    for sr, rows in ((16000, 3), (8000, 3), (16000, 5), (8000, 7), (16000, 3)):
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        want = _ort(m, feeds)
        got = e.run(feeds)
        for k in ("y", "z"):
            np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-6, atol=1e-6)
        ops, host = _ops(e, feeds)
        assert "If" not in ops and not host, (sr, ops, host)
    s = e.stats()
    # One graph per value of sr (its If inlined once), whatever the shapes;
    # a plan per (shape, value), no plan for the shapes alone.
    assert s["steering_active"] and s["steered_graphs"] == 2 and s["plans_cached"] == 4, s


@pytest.mark.parametrize("gpu", ["sim", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_steered_model_captured_in_one_graph_per_value(gpu, rng):
    # Parallel.graphed(): the group's graph is keyed by the steering value
    # too, each captured with the plan that value picks (its If inlined),
    # the value read on the host. Before, the capture asked for a plan of
    # the shapes alone, which no run had built, and building it inside the
    # capture failed (the simulated device: an allocation while capturing).
    m = _mode_model()
    e = twinfer.load(m, device=gpu, allow_cpu_fallback=False)
    g = twinfer.Parallel([e]).graphed()
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for sr in (16000, 8000, 16000, 8000, 16000):
        x = x + 1  # new data, same shapes: a replay of that value's graph
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        want = _ort(m, feeds)
        (got,) = g.run([feeds])
        for k in ("y", "z"):
            np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-6, atol=1e-6)
    st = g.stats()
    assert st["captures"] == 2 and st["graphs"] == 2 and st["replays"] == 3, st
    assert e.stats()["plans_cached"] == 2  # a plan per value, none for the shapes alone


def test_a_group_refuses_a_steering_input_fed_by_another_member():
    m = _mode_model()
    first = twinfer.load(m, device="sim")
    second = twinfer.load(m, device="sim")
    g = twinfer.Pipeline([first, second], links={"x": "y", "sr": "z"}).graphed()
    with pytest.raises(twinfer.InvalidArgumentError, match="member 1's input 'sr' picks its plan by value"):
        g.run({"x": np.ones((3, 4), np.float32), "sr": np.array(16000, np.int64)})


def test_a_flag_with_many_values_stops_steering(rng):
    # A counter-like flag would build a plan per value: past eight values the
    # engine stops keying on it and the If runs as control flow, right still.
    m = _mode_model()
    e = twinfer.load(m, device="sim")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for sr in list(range(7990, 8010)) + [16000, 8000]:
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        want = _ort(m, feeds)
        got = e.run(feeds)
        for k in ("y", "z"):
            np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-6, atol=1e-6)
    s = e.stats()
    assert not s["steering_active"], s
    assert "If" in _ops(e, {"x": x, "sr": np.array(16000, np.int64)})[0]


def test_a_condition_read_from_data_is_not_steered(rng):
    # If(ReduceSum(x) > 0): the condition is the data's, nothing keys it.
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    then_g = _branch("then", [helper.make_node("Exp", ["x"], ["t"])], "t")
    else_g = _branch("else", [helper.make_node("Neg", ["x"], ["e2"])], "e2")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, None)], [zero])
    e = twinfer.load(m, device="cpu")
    assert e.stats()["steering_inputs"] == []
    for x in (np.array([1, 2, -1], np.float32), np.array([-3, 2, -1], np.float32)):
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), _ort(m, {"x": x})["y"], rtol=1e-6)
        assert "If" in _ops(e, {"x": x})[0]


def test_a_branch_with_data_sized_shapes_still_runs(rng):
    # The taken branch holds a NonZero: once inlined, its shapes need the
    # evaluator, as the If's did; the answers are onnxruntime's either way.
    then_g = _branch("then", [helper.make_node("NonZero", ["x"], ["nz"]),
                              helper.make_node("Cast", ["nz"], ["t"], to=F)], "t")
    else_g = _branch("else", [helper.make_node("Neg", ["x"], ["e2"])], "e2")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    idx0 = numpy_helper.from_array(np.array(0, np.int64), "idx0")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "idx0"], ["n"]),
             helper.make_node("Greater", ["n", "one"], ["c"]),
             helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Sin", ["x"], ["y2"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["N"])],
               [helper.make_tensor_value_info("r", F, None), helper.make_tensor_value_info("y2", F, None)], [one, idx0])
    for device in ("cpu", "sim"):
        e = twinfer.load(m, device=device)
        for x in (np.array([0, 1.5, 0, -2], np.float32), np.array([3.0], np.float32)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the device's evaluator notice
                got = e.run({"x": x})
            want = _ort(m, {"x": x})
            for k in ("r", "y2"):
                np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-6)


def test_an_optimum_merged_decoder_runs_each_step_planned(device, rng):
    # A 2-layer GPT-2 merged by Hugging Face Optimum (tests/data/
    # make_merged_decoder.py): If(use_cache_branch) picks the first step's
    # network or the one with past. use_cache_branch is a steering input, so
    # each step's plan holds one network, with no host step on a device; and
    # attention_mask's length, named like input_ids' by the merge, differs
    # from it with past, as onnxruntime allows. A short generation loop,
    # against onnxruntime step by step.
    e = load_on(str(MERGED_DECODER), device, allow_cpu_fallback=device == "cpu")
    assert e.stats()["steering_inputs"] == ["use_cache_branch"]

    def planned_on_the_device(step, feeds):
        ops, host = _ops(e, feeds)
        assert "If" not in ops and not host, (step, ops, host)

    greedy_steps_against_onnxruntime(e, rng, steps=4, after_step=planned_on_the_device)
