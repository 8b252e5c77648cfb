"""Models whose shapes depend on input values (NonZero, NMS) split where the
values start deciding shapes: the nodes before run as a plan (on the device
for a device engine), only the rest through the host evaluator. Checked
against NumPy on fresh data of several sizes, and by where kernel_report
says each node runs. A device engine runs such a tail on the device instead
where it starts with NonZero or NMS (tests/test_staged_tail.py);
TWINFER_STAGED_TAIL=0 keeps the host evaluator's, which these tests check
on devices too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer

F = TensorProto.FLOAT
DEVICES = ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)]


THRESHOLD = 20.0


def rows_some_of_which_pass(rng, n):
    """x [n, 16] whose even rows score far below THRESHOLD (small, either sign) and odd rows
    far above it (positive, through the model's positive weights)."""
    x = rng.standard_normal((n, 16)).astype(np.float32)
    x[0::2] *= 0.01
    x[1::2] = np.abs(x[1::2]) * 3
    return x


def backbone_then_nonzero(rng, tail_reads_input=False, feature_is_output=True):
    """x [N, 16] -> MatMul -> Relu = feat [N, 8] (an output); per-row scores;
    the rows whose score passes a threshold (NonZero: their count is data);
    those rows of feat (and of x, when the tail reads the input too)."""
    w = np.abs(rng.standard_normal((16, 8))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Relu", ["mm"], ["feat"]),
             helper.make_node("ReduceSum", ["feat", "axes1"], ["score"], keepdims=0),
             helper.make_node("Greater", ["score", "thr"], ["pass"]),
             helper.make_node("NonZero", ["pass"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axes0"], ["idx"]),
             helper.make_node("Gather", ["feat", "idx"], ["picked"], axis=0),
             helper.make_node("Mul", ["picked", "two"], ["picked2"])]
    outputs = ["picked2"]
    if tail_reads_input:
        nodes.append(helper.make_node("Gather", ["x", "idx"], ["rows"], axis=0))
        outputs.append("rows")
    if feature_is_output:
        outputs.append("feat")
    for n in nodes:
        n.name = n.output[0] + "_node"
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([1], np.int64), "axes1"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.float32(THRESHOLD), "thr"), numpy_helper.from_array(np.float32(2.0), "two")]
    g = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", F, ["N", 16])],
                          [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9

    def ref(x):
        feat = np.maximum(x.astype(np.float64) @ w, 0)
        idx = np.nonzero(feat.sum(axis=1) > THRESHOLD)[0]
        out = {"picked2": feat[idx] * 2, "feat": feat}
        if tail_reads_input:
            out["rows"] = x[idx]
        return {k: v for k, v in out.items() if k in outputs}

    return m, ref


@pytest.fixture
def host_tail(monkeypatch):
    monkeypatch.setenv("TWINFER_STAGED_TAIL", "0")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tail_reads_input", [False, True])
@pytest.mark.parametrize("staged", [False, True])
def test_the_nodes_before_the_first_value_dependent_shape_run_as_a_plan(device, tail_reads_input, staged, rng,
                                                                        monkeypatch):
    if device == "cpu" and staged:
        pytest.skip("the CPU has no staged tails: its evaluator is the host")
    if not staged:
        monkeypatch.setenv("TWINFER_STAGED_TAIL", "0")
    m, ref = backbone_then_nonzero(rng, tail_reads_input)
    e = twinfer.load(m, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the device engine's "CPU evaluator" note
        for n in (37, 5, 37, 64):
            x = rows_some_of_which_pass(rng, n)
            got = {k: v.numpy() for k, v in e.run({"x": x}).items()}
            want = ref(x)
            assert 0 < len(want["picked2"]) < n  # the threshold picks some rows, not all
            assert set(got) == set(want)
            for k in want:
                assert got[k].shape == want[k].shape, k
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)
    rows = e.kernel_report({"x": (37, 16)})
    where = {r.node: (r.backend, r.kernel) for r in rows}
    kind = "cpu" if device == "cpu" else device.split(":")[0]
    # The MatMul is planned on the engine's device, NonZero and what follows it
    # go to the evaluator, which names the node that made the split.
    assert where["mm_node"][0] == kind and where["mm_node"][1] != "cpu evaluator", rows
    if staged:  # NonZero alone on the device, its count read back, then a plan of the rest
        assert all(r.backend == kind for r in rows), rows
        assert "read back" in next(r.note for r in rows if r.node == "nz_node")
        return
    for n in ("nz_node", "idx_node", "picked_node", "picked2_node"):
        assert where[n] == ("cpu", "cpu evaluator"), (n, rows)
    assert all("nz_node" in r.note for r in rows if r.kernel == "cpu evaluator")


@pytest.mark.parametrize("device", ["sim", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_device_engine_warns_that_the_tail_ran_on_the_host(device, rng, host_tail):
    m, ref = backbone_then_nonzero(rng)
    e = twinfer.load(m, device=device)
    x = rows_some_of_which_pass(rng, 23)
    said = r"CPU evaluator \(part of it: the 4 nodes from node 'nz_node'.*before ran on the device.*that part"
    with pytest.warns(RuntimeWarning, match=said):
        got = e.run({"x": x}, outputs="device")
    assert got["picked2"].device != "cpu"  # device outputs stay on the device, as without a split
    np.testing.assert_allclose(got["picked2"].numpy(), ref(x)["picked2"], rtol=1e-5, atol=1e-5)


def test_allow_cpu_fallback_false_still_refuses_the_tail(rng, host_tail):
    m, _ = backbone_then_nonzero(rng)
    e = twinfer.load(m, device="sim", allow_cpu_fallback=False)
    with pytest.raises(twinfer.UnsupportedOpError, match="CPU evaluator"):
        e.run({"x": rng.standard_normal((9, 16)).astype(np.float32)})


def test_a_graph_whose_first_node_needs_values_is_evaluated_whole(rng):
    # NonZero on the input itself: nothing comes before it to plan, the
    # evaluator runs the whole graph, and kernel_report lists its nodes so.
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz_node"),
             helper.make_node("Cast", ["nz"], ["y"], to=F, name="cast_node")]
    g = helper.make_graph(nodes, "whole", [helper.make_tensor_value_info("x", F, ["N"])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    e = twinfer.load(m, device="cpu")
    x = rng.standard_normal(29).astype(np.float32)
    x[::3] = 0
    np.testing.assert_array_equal(e.run({"x": x})["y"].numpy(), np.stack(np.nonzero(x)).astype(np.float32))
    rows = e.kernel_report({"x": (29,)})
    assert [(r.node, r.backend, r.kernel) for r in rows] == [("nz_node", "cpu", "cpu evaluator"),
                                                            ("cast_node", "cpu", "cpu evaluator")], rows


@pytest.mark.cuda_build
def test_nms_over_large_constants_folds_at_load(rng):
    # Every input of the NMS a constant: its selection is known at load, the
    # model has no value-dependent shape, and a device engine that allows no
    # CPU fallback runs it (the selection made once, not per run).
    from onnx_helpers import run_ort

    n = 5000
    xy = rng.uniform(0, 100, (1, n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 8, (1, n, 2))], -1).astype(np.float32)
    scores = rng.random((1, 1, n)).astype(np.float32)
    inits = [numpy_helper.from_array(boxes, "boxes"), numpy_helper.from_array(scores, "scores"),
             numpy_helper.from_array(np.array([10], np.int64), "m"), numpy_helper.from_array(np.float32(0.5), "iou")]
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou"], ["sel"]),
             helper.make_node("Cast", ["sel"], ["self"], to=F),
             helper.make_node("Add", ["self", "x"], ["y"])]
    g = helper.make_graph(nodes, "const_nms", [helper.make_tensor_value_info("x", F, [10, 3])],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    x = rng.standard_normal((10, 3)).astype(np.float32)
    e = twinfer.load(m, device="sim", sim_coverage="cuda", allow_cpu_fallback=False)
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), run_ort(m, {"x": x})[0], rtol=1e-6)
    assert all(r.kernel != "cpu evaluator" for r in e.kernel_report({"x": (10, 3)}))
