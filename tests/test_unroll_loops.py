"""Scans and Loops unrolled on a device (csrc/graph/passes/unroll_loops.h): a
device plan repeats the body once per iteration instead of running the loop
through the host's evaluator, so with allow_cpu_fallback=False the whole
model runs on the device. Checked against onnxruntime on fresh random data,
on the simulated device placing nodes as CUDA does and, with a GPU, on CUDA."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA

ort = pytest.importorskip("onnxruntime")

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
F = TensorProto.FLOAT


def _load(model, device, fallback=False):
    kw = {"sim_coverage": "cuda"} if device == "sim" else {}
    return twinfer.load(model, device=device, allow_cpu_fallback=fallback, **kw)


def _ort(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "loops", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _close(ours, ref, rtol=1e-5, atol=1e-5):
    ours = list(ours.values())
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert np.asarray(a).shape == b.shape
        np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol)


def _host_steps(engine, feeds):
    return [r for r in engine.kernel_report(feeds) if r.backend == "cpu"]


def _scan_model(seq, rows, cols):
    """Two states (a running sum and a decaying product), three scan inputs on
    different axes and directions, three scan outputs on different axes and
    directions; the body reads an outer value (`gain`, computed outside)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["sum_in", "a_t"], ["sum_mid"]),
            helper.make_node("Mul", ["sum_mid", "gain"], ["sum_out"]),
            helper.make_node("Mul", ["prod_in", "b_t"], ["prod_raw"]),
            helper.make_node("Tanh", ["prod_raw"], ["prod_out"]),
            helper.make_node("MatMul", ["sum_out", "c_t"], ["proj"]),  # [rows] x [rows, cols]
            helper.make_node("Identity", ["sum_out"], ["sum_part"]),
            helper.make_node("Sub", ["prod_out", "a_t"], ["diff_part"]),
        ],
        "scan_body",
        [helper.make_tensor_value_info("sum_in", F, [rows]),
         helper.make_tensor_value_info("prod_in", F, [rows]),
         helper.make_tensor_value_info("a_t", F, [rows]),
         helper.make_tensor_value_info("b_t", F, [rows]),
         helper.make_tensor_value_info("c_t", F, [rows, cols])],
        [helper.make_tensor_value_info("sum_out", F, [rows]),
         helper.make_tensor_value_info("prod_out", F, [rows]),
         helper.make_tensor_value_info("sum_part", F, [rows]),
         helper.make_tensor_value_info("proj", F, [cols]),
         helper.make_tensor_value_info("diff_part", F, [rows])],
    )
    scan = helper.make_node(
        "Scan", ["s0", "p0", "a", "b", "c"], ["s_final", "p_final", "sums", "projs", "diffs"], body=body,
        num_scan_inputs=3,
        scan_input_axes=[0, 1, -1], scan_input_directions=[0, 1, 0],
        scan_output_axes=[1, 0, -1], scan_output_directions=[0, 1, 1])
    nodes = [helper.make_node("Sigmoid", ["g"], ["gain"]), scan]
    inputs = [helper.make_tensor_value_info("s0", F, [rows]),
              helper.make_tensor_value_info("p0", F, [rows]),
              helper.make_tensor_value_info("a", F, [seq, rows]),
              helper.make_tensor_value_info("b", F, [rows, seq]),
              helper.make_tensor_value_info("c", F, [rows, cols, seq]),
              helper.make_tensor_value_info("g", F, [rows])]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ["s_final", "p_final", "sums", "projs", "diffs"]]
    return _model(nodes, inputs, outputs, opset=16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seq, rows, cols", [(1, 3, 2), (7, 5, 3), (13, 1, 4)])
def test_scan_unrolls_with_axes_and_directions(device, seq, rows, cols):
    model = _scan_model(seq, rows, cols)
    rng = np.random.default_rng(seq * 100 + rows)
    feeds = {"s0": rng.standard_normal(rows).astype(np.float32),
             "p0": rng.standard_normal(rows).astype(np.float32),
             "a": rng.standard_normal((seq, rows)).astype(np.float32),
             "b": rng.standard_normal((rows, seq)).astype(np.float32),
             "c": rng.standard_normal((rows, cols, seq)).astype(np.float32),
             "g": rng.standard_normal(rows).astype(np.float32)}
    e = _load(model, device)
    _close(e.run(feeds), _ort(model, feeds))
    assert not _host_steps(e, feeds)
    assert "Scan" not in {r.op for r in e.kernel_report(feeds)}


def _loop_model(counted_by_shape: bool):
    """y = mean(x); for i in range(n): y = y * w[i] + i; every y and its sum
    stacked. n is x's first dim (Shape -> Gather: folds in a plan) or the fed
    trip count."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Gather", ["w", "i"], ["w_i"], axis=0),      # reads the iteration number
            helper.make_node("Mul", ["y_in", "w_i"], ["y_mul"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["y_mul", "i_f"], ["y_out"]),
            helper.make_node("Identity", ["y_out"], ["y_part"]),
            helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
        ],
        "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, None),
         helper.make_tensor_value_info("y_part", F, None),
         helper.make_tensor_value_info("total", F, [])],
    )
    true = numpy_helper.from_array(np.array(True), "true")
    inputs = [helper.make_tensor_value_info("x", F, ["n", "d"]), helper.make_tensor_value_info("w", F, ["n", "d"])]
    nodes = []
    inits = [true]
    if counted_by_shape:
        nodes += [helper.make_node("Shape", ["x"], ["xs"]),
                  helper.make_node("Gather", ["xs", "zero"], ["trips"], axis=0)]
        inits.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
    else:
        inputs.append(helper.make_tensor_value_info("trips", TensorProto.INT64, []))
    nodes += [helper.make_node("ReduceMean", ["x"], ["y0"], axes=[0], keepdims=0),
              helper.make_node("Loop", ["trips", "true", "y0"], ["y_last", "ys", "totals"], body=body)]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ["y_last", "ys", "totals"]]
    return _model(nodes, inputs, outputs, inits, opset=17)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, d", [(1, 3), (6, 5), (11, 2)])
def test_loop_counted_by_a_shape_unrolls(device, n, d):
    model = _loop_model(counted_by_shape=True)
    rng = np.random.default_rng(n * 10 + d)
    feeds = {"x": rng.standard_normal((n, d)).astype(np.float32), "w": rng.standard_normal((n, d)).astype(np.float32)}
    e = _load(model, device)
    _close(e.run(feeds), _ort(model, feeds))
    assert not _host_steps(e, feeds)
    # A second shape: a plan of its own, with its own count.
    feeds2 = {"x": rng.standard_normal((n + 2, d)).astype(np.float32),
              "w": rng.standard_normal((n + 2, d)).astype(np.float32)}
    _close(e.run(feeds2), _ort(model, feeds2))


@pytest.mark.parametrize("device", DEVICES)
def test_loop_counted_by_a_fed_trip_count_keys_plans_by_it(device):
    model = _loop_model(counted_by_shape=False)
    e = _load(model, device)
    assert e.stats()["steering_inputs"] == ["trips"]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((9, 4)).astype(np.float32)
    w = rng.standard_normal((9, 4)).astype(np.float32)
    for trips in [3, 1, 9, 3]:
        feeds = {"x": x, "w": w, "trips": np.array(trips, np.int64)}
        _close(e.run(feeds), _ort(model, feeds))
        assert not _host_steps(e, feeds)


def _while_model():
    """A loop whose body computes its condition (stop once the sum passes a bound)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["y_in", "step"], ["y_out"]),
            helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "bound"], ["cond_out"]),
        ],
        "while_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [3])],
    )
    inits = [numpy_helper.from_array(np.array(20, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.array(5.0, np.float32), "bound")]
    nodes = [helper.make_node("Abs", ["x"], ["step"]),
             helper.make_node("Loop", ["trips", "true", "x"], ["y"], body=body),
             helper.make_node("Neg", ["y"], ["out"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                  [helper.make_tensor_value_info("out", F, [3])], inits)


@pytest.mark.cuda_build
def test_a_loop_whose_body_computes_its_condition_stays_control_flow_and_says_why():
    model = _while_model()
    feeds = {"x": np.array([0.5, -0.25, 1.0], np.float32)}
    e = _load(model, "sim", fallback=True)
    _close(e.run(feeds), _ort(model, feeds))
    loops = [r for r in e.kernel_report(feeds) if r.op == "Loop"]
    assert len(loops) == 1 and loops[0].backend == "cpu"
    assert "not unrolled: its body computes the condition" in loops[0].note
    # Without a fallback the load names the loop and why.
    with pytest.raises(twinfer.errors.UnsupportedOpError, match="'' \\(Loop\\).*its body computes the condition"):
        _load(model, "sim").run(feeds)


@pytest.mark.cuda_build
def test_a_scan_over_the_node_limit_stays_control_flow(monkeypatch):
    monkeypatch.setenv("TWINFER_UNROLL_MAX_NODES", "20")
    model = _scan_model(9, 3, 2)
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal(3).astype(np.float32), "p0": rng.standard_normal(3).astype(np.float32),
             "a": rng.standard_normal((9, 3)).astype(np.float32), "b": rng.standard_normal((3, 9)).astype(np.float32),
             "c": rng.standard_normal((3, 2, 9)).astype(np.float32), "g": rng.standard_normal(3).astype(np.float32)}
    e = _load(model, "sim", fallback=True)
    _close(e.run(feeds), _ort(model, feeds))
    scans = [r for r in e.kernel_report(feeds) if r.op == "Scan"]
    assert len(scans) == 1 and "left of the plan's limit of 20" in scans[0].note
    monkeypatch.setenv("TWINFER_UNROLL_MAX_NODES", "0")  # off: the load-time check refuses it outright
    with pytest.raises(twinfer.errors.UnsupportedOpError, match="Scan"):
        _load(model, "sim")


def _nested_model():
    """A Scan of 5 whose body holds a Loop of constant trip count 3."""
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Mul", ["v_in", "half"], ["v_half"]),
         helper.make_node("Add", ["v_half", "x_t"], ["v_out"])],
        "inner",
        [helper.make_tensor_value_info("j", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [4])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["three", "", "s_in"], ["s_out"], body=inner),
         helper.make_node("Relu", ["s_out"], ["part"])],
        "outer",
        [helper.make_tensor_value_info("s_in", F, [4]), helper.make_tensor_value_info("x_t", F, [4])],
        [helper.make_tensor_value_info("s_out", F, [4]), helper.make_tensor_value_info("part", F, [4])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return _model([helper.make_node("Scan", ["s0", "xs"], ["s", "parts"], body=outer, num_scan_inputs=1)],
                   [helper.make_tensor_value_info("s0", F, [4]), helper.make_tensor_value_info("xs", F, [5, 4])],
                   [helper.make_tensor_value_info("s", F, None), helper.make_tensor_value_info("parts", F, None)],
                   inits)


@pytest.mark.parametrize("device", DEVICES)
def test_a_loop_inside_a_scan_unrolls_too(device):
    """The Scan's body holds a Loop of constant trip count: after the Scan's
    copies are in the graph, their Loops unroll in the next round."""
    model = _nested_model()
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal(4).astype(np.float32), "xs": rng.standard_normal((5, 4)).astype(np.float32)}
    e = _load(model, device)
    _close(e.run(feeds), _ort(model, feeds))
    ops = {r.op for r in e.kernel_report(feeds)}
    assert "Scan" not in ops and "Loop" not in ops


def test_cpu_engines_unroll_too():
    """On the CPU the loop kernel builds the body's kernels every run: the
    repeated body is planned once instead."""
    model = _loop_model(counted_by_shape=True)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32), "w": rng.standard_normal((4, 3)).astype(np.float32)}
    e = twinfer.load(model)
    _close(e.run(feeds), _ort(model, feeds))
    assert "Loop" not in {r.op for r in e.kernel_report(feeds)}


def _counted_loop(trip_count_shape, x_shape, scan_output=True):
    """y = y * 2 + i, trips fed (or a huge constant): no data decides anything."""
    body_nodes = [helper.make_node("Identity", ["c"], ["c_out"]),
                  helper.make_node("Cast", ["i"], ["i_f"], to=F),
                  helper.make_node("Mul", ["y", "two"], ["y2"]),
                  helper.make_node("Add", ["y2", "i_f"], ["y_out"])]
    outs = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", F, None)]
    loop_outs = ["y_last"]
    if scan_output:
        body_nodes.append(helper.make_node("Identity", ["y_out"], ["part"]))
        outs.append(helper.make_tensor_value_info("part", F, None))
        loop_outs.append("parts")
    body = helper.make_graph(body_nodes, "b", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                               helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                               helper.make_tensor_value_info("y", F, None)], outs)
    inits = [numpy_helper.from_array(np.array(2, np.float32), "two")]
    inputs = [helper.make_tensor_value_info("x", F, x_shape)]
    if trip_count_shape is None:
        inits.append(numpy_helper.from_array(np.array(2**62, np.int64), "trips"))
    else:
        inputs.append(helper.make_tensor_value_info("trips", TensorProto.INT64, trip_count_shape))
    return _model([helper.make_node("Loop", ["trips", "", "x"], loop_outs, body=body)], inputs,
                  [helper.make_tensor_value_info(n, F, None) for n in loop_outs], inits)


@pytest.mark.cuda_build
def test_a_fed_trip_count_with_static_shapes_loads_without_fallback():
    """All shapes static: the load builds no plan without the trip count's value."""
    model = _counted_loop([], [3])
    e = _load(model, "sim")
    for trips in [2, 5]:
        feeds = {"x": np.array([1, -2, 0.5], np.float32), "trips": np.array(trips, np.int64)}
        _close(e.run(feeds), _ort(model, feeds))
        assert not _host_steps(e, feeds)


@pytest.mark.cuda_build
@pytest.mark.parametrize("fallback", [True, False])
def test_trip_counts_past_the_steering_limit(fallback):
    """After 8 distinct trip counts plans stop being keyed by them: the loop
    then runs as control flow on the host, or, without fallback, the error
    says why."""
    model = _counted_loop([], ["n"])
    e = _load(model, "sim", fallback=fallback)
    x = np.array([1, -2, 0.5], np.float32)
    for trips in range(1, 9):
        feeds = {"x": x, "trips": np.array(trips, np.int64)}
        _close(e.run(feeds), _ort(model, feeds))
    feeds = {"x": x, "trips": np.array(9, np.int64)}
    if fallback:
        _close(e.run(feeds), _ort(model, feeds))
    else:
        with pytest.raises(twinfer.errors.UnsupportedOpError, match="stopped keying plans by after 8"):
            e.run(feeds)


@pytest.mark.cuda_build
def test_zero_trips_pass_the_carried_values_through():
    model = _counted_loop([], ["n"], scan_output=False)
    e = _load(model, "sim")
    for trips in [0, 3, 0]:
        feeds = {"x": np.array([1, -2, 0.5], np.float32), "trips": np.array(trips, np.int64)}
        _close(e.run(feeds), _ort(model, feeds))
        assert not _host_steps(e, feeds)


@pytest.mark.cuda_build
def test_a_huge_trip_count_is_refused_at_once():
    """2^62 iterations: refused by the node limit (no overflow, no hang)."""
    e = _load(_counted_loop(None, [3]), "sim")  # a Loop with scan outputs: value-dependent unless unrolled
    with pytest.raises(twinfer.errors.UnsupportedOpError, match="left of the plan's limit of 4096"):
        e.run({"x": np.ones(3, np.float32)})


@pytest.mark.cuda_build
def test_nested_loops_share_one_budget(monkeypatch):
    """The Scan's copies (21 nodes) fit in 40; of the five inner Loops (9 nodes
    each) two more do, the rest stay control flow and say why."""
    monkeypatch.setenv("TWINFER_UNROLL_MAX_NODES", "40")
    model = _nested_model()
    rng = np.random.default_rng(4)
    feeds = {"s0": rng.standard_normal(4).astype(np.float32), "xs": rng.standard_normal((5, 4)).astype(np.float32)}
    e = _load(model, "sim", fallback=True)
    _close(e.run(feeds), _ort(model, feeds))
    rows = e.kernel_report(feeds)
    assert "Scan" not in {r.op for r in rows}
    loops = [r for r in rows if r.op == "Loop"]
    assert len(loops) == 3 and all("left of the plan's limit of 40" in r.note for r in loops), loops


@pytest.mark.cuda_build
def test_optimize_false_keeps_loops_and_says_so():
    model = _loop_model(counted_by_shape=True)
    with pytest.raises(twinfer.errors.UnsupportedOpError, match="optimize=False"):
        twinfer.load(model, device="sim", sim_coverage="cuda", allow_cpu_fallback=False, optimize=False).run(
            {"x": np.ones((2, 3), np.float32), "w": np.ones((2, 3), np.float32)})
