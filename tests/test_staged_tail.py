"""Value-dependent tails on the device (csrc/runtime/staged_tail.h): a model
whose shapes start to depend on values at a NonMaxSuppression or NonZero runs
that node alone on the device (its count read back), then what follows it as
plans of its own, split again at the next such node, with no CPU step.
Checked with allow_cpu_fallback=False (a CPU step would fail the load or the
run) against onnxruntime and NumPy, on the simulated device placing nodes as
CUDA does and, where a GPU is present, on CUDA's own NMS and NonZero kernels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA

ort = pytest.importorskip("onnxruntime")

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]


def _load(model, device):
    kw = {"sim_coverage": "cuda"} if device == "sim" else {}
    return twinfer.load(model, device=device, allow_cpu_fallback=False, **kw)


def _ort(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def _nms_model(nb, n, nc, center, fed_scalars, score_threshold=True):
    """NMS, then the kept boxes' coordinates and scores gathered (so a plan runs after it)."""
    f = TensorProto.FLOAT
    scalars = [("max_out", TensorProto.INT64, np.array([3], np.int64)),
               ("iou", f, np.array([0.45], np.float32))]
    if score_threshold:
        scalars.append(("score_thr", f, np.array([0.2], np.float32)))
    inputs = [helper.make_tensor_value_info("boxes", f, [nb, n, 4]),
              helper.make_tensor_value_info("scores", f, [nb, nc, n])]
    inits = []
    for name, dt, v in scalars:
        if fed_scalars:
            inputs.append(helper.make_tensor_value_info(name, dt, [1]))
        else:
            inits.append(numpy_helper.from_array(v, name))
    flat = numpy_helper.from_array(np.array([-1, 4], np.int64), "flat_shape")
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores"] + [s[0] for s in scalars], ["sel"],
                         center_point_box=int(center)),
        helper.make_node("Gather", ["sel", "two"], ["box_index"], axis=1),   # [K]
        helper.make_node("Reshape", ["boxes", "flat_shape"], ["all_boxes"]),  # batch 0's boxes when nb == 1
        helper.make_node("Gather", ["all_boxes", "box_index"], ["kept_boxes"], axis=0),
        helper.make_node("Mul", ["kept_boxes", "kept_boxes"], ["kept_sq"]),
    ]
    graph = helper.make_graph(nodes, "nms_then_gather", inputs,
                              [helper.make_tensor_value_info("sel", TensorProto.INT64, None),
                               helper.make_tensor_value_info("kept_sq", f, None)], inits + [flat, two])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString(), scalars


def _boxes(rng, nb, n, center):
    if center:
        xy = rng.uniform(0, 50, (nb, n, 2))
        wh = rng.uniform(2, 20, (nb, n, 2))
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    a = rng.uniform(0, 50, (nb, n, 2))
    b = a + rng.uniform(-20, 20, (nb, n, 2))  # corners in any order
    return np.concatenate([a, b], axis=2)[..., [0, 1, 2, 3]].astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("fed_scalars", [False, True])
@pytest.mark.parametrize("nb, n, nc", [(1, 37, 3), (1, 300, 5), (1, 1, 1), (1, 64, 1)])
def test_nms_and_what_follows_run_on_the_device(device, center, fed_scalars, nb, n, nc, rng):
    model, scalars = _nms_model(nb, n, nc, center, fed_scalars)
    eng = _load(model, device)
    for _ in range(2):  # a second draw: another count, another plan after the NMS
        boxes = _boxes(rng, nb, n, center)
        scores = rng.uniform(0, 1, (nb, nc, n)).astype(np.float32)
        scores[..., ::7] = 0.5  # equal scores: the lower box index first
        feeds = {"boxes": boxes, "scores": scores}
        if fed_scalars:
            feeds.update({name: v for name, _, v in scalars})
        want = _ort(model, feeds)
        got = eng.run(feeds)
        np.testing.assert_array_equal(got["sel"].numpy(), want[0])
        np.testing.assert_allclose(got["kept_sq"].numpy(), want[1], rtol=1e-6)
    rows = eng.kernel_report({k: v.shape for k, v in feeds.items()})
    assert all(r.backend == device for r in rows), [r for r in rows if r.backend != device]
    nms = [r for r in rows if r.op == "NonMaxSuppression"]
    assert len(nms) == 1 and "read back" in nms[0].note
    assert any(r.op == "Gather" for r in rows)  # the rest's plan, reported after its run
    if device == "cuda":
        assert nms[0].kernel.startswith("cuda nms"), nms[0]


@pytest.mark.parametrize("device", DEVICES)
def test_nms_with_many_boxes_over_one_class(device, rng):
    # torchvision's batched_nms shape: one class, boxes clustered so that
    # most suppress one another, no score threshold, every box a candidate.
    model, _ = _nms_model(1, 2000, 1, False, False, score_threshold=False)
    eng = _load(model, device)
    centres = rng.uniform(0, 200, (40, 2))
    pick = rng.integers(0, 40, 2000)
    a = centres[pick] + rng.normal(0, 3, (2000, 2))
    boxes = np.concatenate([a, a + rng.uniform(5, 15, (2000, 2))], axis=1)[None].astype(np.float32)
    scores = rng.uniform(0, 1, (1, 1, 2000)).astype(np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    np.testing.assert_array_equal(eng.run(feeds)["sel"].numpy(), _ort(model, feeds)[0])


def _nonzero_model():
    """NonZero(x > 0), then the selected values gathered and summed per row,
    then NMS-free second stage: NonZero of the sums' positive entries."""
    f = TensorProto.FLOAT
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["nz"]),                  # [3, K]
        helper.make_node("Transpose", ["nz"], ["nz_t"], perm=[1, 0]),  # [K, 3]
        helper.make_node("GatherND", ["x", "nz_t"], ["vals"]),         # [K]
        helper.make_node("Sub", ["vals", "half"], ["shifted"]),
        helper.make_node("Greater", ["shifted", "zero"], ["big"]),
        helper.make_node("NonZero", ["big"], ["big_nz"]),              # [1, J]: a second stage
        helper.make_node("Squeeze", ["big_nz", "axis0"], ["big_idx"]),
        helper.make_node("Gather", ["vals", "big_idx"], ["big_vals"]),
    ]
    graph = helper.make_graph(
        nodes, "nonzero_stages", [helper.make_tensor_value_info("x", f, [4, "w", 3])],
        [helper.make_tensor_value_info("nz", TensorProto.INT64, None),
         helper.make_tensor_value_info("big_vals", f, None)],
        [zero, numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("device", DEVICES)
def test_two_nonzero_stages_in_a_row(device, rng):
    eng = _load(_nonzero_model(), device)
    for w in (5, 9, 5):
        x = rng.standard_normal((4, w, 3)).astype(np.float32)
        got = eng.run({"x": x})
        np.testing.assert_array_equal(got["nz"].numpy(), np.array(np.nonzero(x > 0)))
        vals = x[x > 0]
        np.testing.assert_array_equal(got["big_vals"].numpy(), vals[vals - 0.5 > 0])
    rows = eng.kernel_report({"x": (4, 5, 3)})
    assert all(r.backend == device for r in rows), [r for r in rows if r.backend != device]
    assert sum(r.op == "NonZero" for r in rows) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_nothing_selected_and_empty_inputs(device, rng):
    model, _ = _nms_model(1, 16, 2, False, False)
    eng = _load(model, device)
    feeds = {"boxes": _boxes(rng, 1, 16, False), "scores": np.zeros((1, 2, 16), np.float32)}  # none above 0.2
    got = eng.run(feeds)
    assert got["sel"].shape == (0, 3) and got["kept_sq"].shape == (0, 4)
    eng2 = _load(_nonzero_model(), device)
    got = eng2.run({"x": -np.ones((4, 0, 3), np.float32)})
    assert got["nz"].shape == (3, 0) and got["big_vals"].shape == (0,)


def test_the_report_before_a_run_names_the_rest_as_planned_later():
    model, _ = _nms_model(1, 20, 2, False, False)
    eng = twinfer.load(model, device="sim", allow_cpu_fallback=False)
    rows = eng.kernel_report({"boxes": (1, 20, 4), "scores": (1, 2, 20)})
    assert all(r.backend == "sim" for r in rows)
    nms = [i for i, r in enumerate(rows) if r.op == "NonMaxSuppression"]
    later = [i for i, r in enumerate(rows) if r.kernel == "planned at the first run"]
    assert len(nms) == 1 and later and min(later) > nms[0]  # the Gathers after it


@pytest.mark.parametrize("device", DEVICES)
def test_the_detector_head_runs_wholly_on_the_device(device, rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    import io

    from test_detector import DetectorHead

    torch.manual_seed(0)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(DetectorHead().eval(), (torch.randn(1, 3, 61, 83),), buf, dynamo=False,
                          opset_version=17, input_names=["image"], output_names=["boxes", "scores"],
                          dynamic_axes={"image": {2: "h", 3: "w"}})
    eng = _load(buf.getvalue(), device)
    for h, w in [(61, 83), (47, 129)]:
        image = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # twinfer warns when a run falls back to the host
            got = eng.run({"image": image})
        want = _ort(buf.getvalue(), {"image": image})
        assert got["boxes"].shape == want[0].shape and want[0].shape[0] > 0
        np.testing.assert_allclose(got["boxes"].numpy(), want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["scores"].numpy(), want[1], rtol=1e-4, atol=1e-5)
    rows = eng.kernel_report({"image": (1, 3, 47, 129)})
    assert all(r.backend == device for r in rows), [r for r in rows if r.backend != device]


@pytest.mark.parametrize("device", DEVICES)
def test_torchvisions_ssdlite_runs_wholly_on_the_device(device, rng, tmp_path):
    # A real detector's post-processing: per-class score thresholds
    # (NonZero), batched NMS over thousands of boxes, TopK, gathers. Random
    # weights: the detections are what onnxruntime finds, 300 of them.
    pytest.importorskip("torchvision")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from detectors import export
    finally:
        sys.path.pop(0)
    path = export("ssdlite320", tmp_path)
    eng = _load(str(path), device)
    for _ in range(2):
        feeds = {"x": rng.random((3, 320, 320), dtype=np.float32)}
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no CPU evaluator
            got = eng.run(feeds)
        want = _ort(str(path), feeds)
        assert want[0].shape[0] > 0
        for out, w in zip(eng.outputs, want):
            np.testing.assert_allclose(got[out.name].numpy(), w, rtol=1e-3, atol=1e-3, err_msg=out.name)
    rows = eng.kernel_report({"x": (3, 320, 320)})
    assert all(r.backend == device for r in rows), [r for r in rows if r.backend != device][:5]
    assert sum("read back" in r.note for r in rows) >= 2


@pytest.mark.cuda_build
def test_staged_engines_side_by_side_and_from_threads(rng):
    # Two staged engines in a Parallel (each its own context and stream),
    # then one engine from four threads at once: every result is the one
    # onnxruntime gives for its own inputs.
    from concurrent.futures import ThreadPoolExecutor

    model, _ = _nms_model(1, 120, 4, False, False)
    a, b = _load(model, "sim"), _load(model, "sim")

    def draw():
        return {"boxes": _boxes(rng, 1, 120, False), "scores": rng.uniform(0, 1, (1, 4, 120)).astype(np.float32)}

    feeds = [draw(), draw()]
    par = twinfer.Parallel([a, b])
    for got, f in zip(par.run(feeds), feeds):
        np.testing.assert_array_equal(got["sel"].numpy(), _ort(model, f)[0])
    par.close()
    many = [draw() for _ in range(12)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda f: a.run(f)["sel"].numpy(), many))
    for got, f in zip(results, many):
        np.testing.assert_array_equal(got, _ort(model, f)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_constant_boxes_a_constant_output_and_an_input_returned(device, rng):
    # NMS over constant anchors (uploaded to the device once, never read from
    # host memory) with scores computed from the input; beside it an output
    # that folds to a constant and the input itself returned as an output.
    f = TensorProto.FLOAT
    anchors = _boxes(rng, 1, 50, False)
    inits = [numpy_helper.from_array(anchors, "anchors"),
             numpy_helper.from_array(np.array([10], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.3], np.float32), "iou"),
             numpy_helper.from_array(np.array([2.0], np.float32), "k")]
    nodes = [helper.make_node("Sigmoid", ["x"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["anchors", "scores", "max_out", "iou"], ["sel"]),
             helper.make_node("Mul", ["k", "k"], ["four"])]
    graph = helper.make_graph(nodes, "anchors", [helper.make_tensor_value_info("x", f, [1, 3, 50])],
                              [helper.make_tensor_value_info("sel", TensorProto.INT64, None),
                               helper.make_tensor_value_info("four", f, None),
                               helper.make_tensor_value_info("x", f, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    model = m.SerializeToString()
    eng = _load(model, device)
    x = rng.standard_normal((1, 3, 50)).astype(np.float32)
    got = eng.run({"x": x})
    want = _ort(model, {"x": x})
    np.testing.assert_array_equal(got["sel"].numpy(), want[0])
    np.testing.assert_array_equal(got["four"].numpy(), want[1])
    np.testing.assert_array_equal(got["x"].numpy(), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_compress_by_a_computed_condition(device, axis, rng):
    # condition = a row of x above 0 (length 7 against the axis's 7, or
    # longer with falses past it), the selected slices then scaled.
    f = TensorProto.FLOAT
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Gather", ["sel_src", "row"], ["r"], axis=0),
             helper.make_node("Greater", ["r", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["picked"], **kw),
             helper.make_node("Mul", ["picked", "two"], ["y"])]
    graph = helper.make_graph(nodes, "compress", [helper.make_tensor_value_info("x", f, [3, 7, 7]),
                                                  helper.make_tensor_value_info("sel_src", f, [2, 7])],
                              [helper.make_tensor_value_info("y", f, None)],
                              [numpy_helper.from_array(np.array(1, np.int64), "row"),
                               numpy_helper.from_array(np.array(0, np.float32), "zero"),
                               numpy_helper.from_array(np.array(2, np.float32), "two")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    eng = _load(m.SerializeToString(), device)
    for _ in range(3):
        x = rng.standard_normal((3, 7, 7)).astype(np.float32)
        src = rng.standard_normal((2, 7)).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = eng.run({"x": x, "sel_src": src})["y"].numpy()
        np.testing.assert_array_equal(got, np.compress(src[1] > 0, x, axis=axis) * 2)
    rows = eng.kernel_report({"x": (3, 7, 7), "sel_src": (2, 7)})
    assert all(r.backend == device for r in rows), rows
    assert any(r.op == "Compress" and "read back" in r.note for r in rows)


@pytest.mark.parametrize("device", DEVICES)
def test_compress_with_a_true_past_the_axis_names_it(device):
    b = TensorProto.BOOL
    graph = helper.make_graph([helper.make_node("Compress", ["x", "cond"], ["y"], axis=0, name="pick")], "c",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
                               helper.make_tensor_value_info("cond", b, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    eng = _load(m.SerializeToString(), device)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(eng.run({"x": x, "cond": np.array([1, 0, 1, 0, 0], bool)})["y"].numpy(), x[[0, 2]])
    with pytest.raises(twinfer.Error, match="beyond the axis"):
        eng.run({"x": x, "cond": np.array([1, 0, 0, 0, 1], bool)})
    np.testing.assert_array_equal(eng.run({"x": x, "cond": np.array([0, 1, 0, 0, 0], bool)})["y"].numpy(), x[[1]])


@pytest.mark.parametrize("device", DEVICES)
def test_a_later_stage_on_the_host_warns_as_the_engine(device, rng):
    # NonZero runs alone on the device; the Range after it, whose length is
    # the largest coordinate, has no device kernel that sizes its own output,
    # so that stage goes to the host evaluator: the engine warns and says
    # which stage (allow_cpu_fallback=False refuses the model at load).
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["nz"]),
             helper.make_node("ReduceMax", ["nz"], ["top"], keepdims=0),
             helper.make_node("Range", ["start", "top", "step"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=f)]
    graph = helper.make_graph(nodes, "later", [helper.make_tensor_value_info("x", f, [6, 5])],
                              [helper.make_tensor_value_info("y", f, None)],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                               numpy_helper.from_array(np.array(0, np.int64), "start"),
                               numpy_helper.from_array(np.array(1, np.int64), "step")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    kw = {"sim_coverage": "cuda"} if device == "sim" else {}
    eng = twinfer.load(m.SerializeToString(), device=device, **kw)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="a later stage, after nodes run alone on the device"):
        got = eng.run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(got, np.arange(np.max(np.nonzero(x > 0))).astype(np.float32))
    with pytest.raises(twinfer.UnsupportedOpError, match="Range"):
        twinfer.load(m.SerializeToString(), device=device, allow_cpu_fallback=False, **kw)


def _np_unique(x, axis, sorted_):
    """NumPy's unique (NaNs equal, after every number), reordered by first
    occurrence for sorted=0 as ONNX defines it."""
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return y, idx, inv, cnt


def _unique_model(onnx_type, shape, axis, sorted_):
    """Unique, then what follows it planned for the count: the unique slices
    squared and x rebuilt from them by its inverse."""
    kw = {"sorted": int(sorted_)}
    if axis is not None:
        kw["axis"] = axis
    nodes = [helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **kw),
             helper.make_node("Mul", ["y", "y"], ["y_sq"]),
             helper.make_node("Gather", ["y", "inverse"], ["rebuilt"], axis=0 if axis is None else axis)]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            [("y", onnx_type), ("first", TensorProto.INT64), ("inverse", TensorProto.INT64),
             ("counts", TensorProto.INT64), ("y_sq", onnx_type), ("rebuilt", onnx_type)]]
    graph = helper.make_graph(nodes, "unique", [helper.make_tensor_value_info("x", onnx_type, list(shape))], outs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("dtype, onnx_type", [(np.float32, TensorProto.FLOAT), (np.int64, TensorProto.INT64),
                                              (np.float16, TensorProto.FLOAT16), (np.int8, TensorProto.INT8)])
@pytest.mark.parametrize("shape, axis", [((37,), None), ((5, 9, 3), None), ((6, 11), 0), ((4, 7, 3), 1),
                                         ((3, 5, 2), -1), ((1,), None)])
def test_unique_and_what_follows_run_on_the_device(device, sorted_, dtype, onnx_type, shape, axis, rng):
    eng = _load(_unique_model(onnx_type, shape, axis, sorted_), device)
    for _ in range(2):  # new values, new counts: a rest plan per count
        x = rng.integers(-3, 4, size=shape).astype(dtype)  # few values: repeats in every case
        if axis is not None:  # repeated slices along the axis too
            picks = rng.integers(0, 3, size=shape[axis])
            x = np.take(np.take(x, np.arange(3) % shape[axis], axis=axis), picks, axis=axis)
        got = eng.run({"x": x})
        y, idx, inv, cnt = _np_unique(x, axis, sorted_)
        np.testing.assert_array_equal(got["y"].numpy(), y)
        np.testing.assert_array_equal(got["first"].numpy(), idx)
        np.testing.assert_array_equal(got["inverse"].numpy(), inv)
        np.testing.assert_array_equal(got["counts"].numpy(), cnt)
        np.testing.assert_array_equal(got["y_sq"].numpy(), y * y)
        np.testing.assert_array_equal(got["rebuilt"].numpy(), x.reshape(-1) if axis is None else x)
    rows = eng.kernel_report({"x": x})
    assert all(r.backend == device for r in rows), rows
    assert any(r.op == "Unique" and "read back" in r.note for r in rows)


@pytest.mark.parametrize("device", DEVICES)
def test_unique_orders_nan_last_and_equal(device, rng):
    x = rng.integers(-2, 3, size=40).astype(np.float32)
    x[rng.integers(0, 40, size=7)] = np.nan
    x[3] = -0.0
    eng = _load(_unique_model(TensorProto.FLOAT, (40,), None, True), device)
    got = eng.run({"x": x})
    y, idx, inv, cnt = _np_unique(x, None, True)
    np.testing.assert_array_equal(got["y"].numpy(), y)  # NaN compares equal in assert_array_equal
    np.testing.assert_array_equal(got["first"].numpy(), idx)
    np.testing.assert_array_equal(got["inverse"].numpy(), inv)
    np.testing.assert_array_equal(got["counts"].numpy(), cnt)
    # Against onnxruntime where it has no NaN: the same model, a NaN-free input.
    x = rng.integers(-5, 6, size=40).astype(np.float32)
    ref = _ort(_unique_model(TensorProto.FLOAT, (40,), None, True), {"x": x})
    for name, r in zip(["y", "first", "inverse", "counts", "y_sq", "rebuilt"], ref):
        np.testing.assert_array_equal(eng.run({"x": x})[name].numpy(), r)
