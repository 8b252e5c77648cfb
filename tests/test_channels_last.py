"""The channels-last plan pass of device plans (csrc/graph/passes/channels_last.cc):
convolution regions become NHWC tensors (com.twinfer.nhwc Conv / pools,
GlobalAveragePool as ReduceMean over H and W, elementwise ops and Concat on the
permuted shapes) with Transposes only where a region meets the rest of the
graph. Run here on the simulated device, whose kernels are the CPU's (oneDNN's
NHWC convolution in float32, the NCHW kernel between transposes for other
dtypes), against onnxruntime on fresh random data at odd sizes. The kernel
report shows what was rewritten, so a pass that silently did nothing fails.
The CUDA kernels of the same ops: tests/test_channels_last_cuda.py."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer

NHWC = "com.twinfer.nhwc::"


def _ort(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(engine, feeds):
    return [r.op for r in engine.kernel_report({k: v.shape for k, v in feeds.items()})]


def _run(engine, feeds):
    out = engine.run(feeds)
    return [np.asarray(v) for v in (out.values() if isinstance(out, dict) else out)]


def _close(got, expected, rel, what):
    assert got.shape == expected.shape, what
    err = float(np.linalg.norm(got.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))
    assert err < rel, f"{what}: relative error {err}"


@pytest.fixture
def channels_last(monkeypatch):
    """The pass on for float32 too (it is on by default for tf32/fp16/bf16 only)."""
    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "1")


# --- torchvision CNNs: one region from the first convolution to the head ------


def _export(name, folder):
    import torch
    import torchvision

    torch.manual_seed(11)
    model = getattr(torchvision.models, name)().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 67, 75),), str(path), dynamo=False, input_names=["input"],
                          output_names=["output"], opset_version=17, dynamic_axes={"input": {0: "batch"}})
    return path


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "efficientnet_b0"])
def test_torchvision_cnn_runs_channels_last_on_the_sim_device(name, tmp_path, channels_last, monkeypatch):
    path = _export(name, tmp_path)
    x = np.random.default_rng(5).standard_normal((2, 3, 67, 75)).astype(np.float32)
    (expected,) = _ort(path, {"input": x})
    engine = twinfer.load(str(path), device="sim")
    (got,) = _run(engine, {"input": x})
    _close(got, expected, 1e-5, name)
    ops = _ops(engine, {"input": x})
    convs = sum(op == NHWC + "Conv" for op in ops)
    assert convs == sum(op.endswith("Conv") for op in ops) and convs > 0, ops
    # one transpose in (the image) and one out (the pooled features)
    assert ops.count("Transpose") == 2, ops
    if name == "resnet18":
        assert NHWC + "MaxPool" in ops and "ReduceMean" in ops, ops

    monkeypatch.setenv("TWINFER_CHANNELS_LAST", "0")
    plain = twinfer.load(str(path), device="sim")
    assert not any(op.startswith(NHWC) for op in _ops(plain, {"input": x}))


# --- small graphs at the edges of a region --------------------------------------


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _w(rng, *shape, name):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_region_edges_residuals_broadcasts_concat_and_outputs(rng, channels_last):
    """Two convs with a residual from the graph input, an SE-style scale
    computed from a GlobalAveragePool, a constant [C, 1, 1] bias, a concat over
    channels, an AveragePool with count_include_pad, and a conv output that is
    a graph output and also read by a Flatten outside the region."""
    c = 6
    inits = [_w(rng, c, 5, 3, 3, name="w1"), _w(rng, c, c, 1, 1, name="w2"), _w(rng, c, 1, 3, 3, name="wd"),
             numpy_helper.from_array(rng.standard_normal((c, 1, 1)).astype(np.float32), "cbias"),
             _w(rng, c, 2 * c, 1, 1, name="w3"), numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b3")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "skip"], ["a2"]),  # skip: a graph input, NCHW
        helper.make_node("Conv", ["a2", "wd"], ["d"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["d"], ["gap"]),
        helper.make_node("Sigmoid", ["gap"], ["gate"]),
        helper.make_node("Mul", ["d", "gate"], ["se"]),
        helper.make_node("Add", ["se", "cbias"], ["sb"]),
        helper.make_node("Concat", ["sb", "a2"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w3", "b3"], ["c3"]),
        helper.make_node("AveragePool", ["c3"], ["pool"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1],
                         count_include_pad=1),
        helper.make_node("Flatten", ["c3"], ["flat"]),
    ]
    h, w = 11, 13
    model = _model(nodes, [_vi("x", [2, 5, h, w]), _vi("skip", [2, c, h, w])],
                   [_vi("pool", None), _vi("c3", None), _vi("flat", None)], inits)
    feeds = {"x": rng.standard_normal((2, 5, h, w)).astype(np.float32),
             "skip": rng.standard_normal((2, c, h, w)).astype(np.float32)}
    expected = _ort(model, feeds)
    engine = twinfer.load(model, device="sim")
    for got, exp, what in zip(_run(engine, feeds), expected, ["pool", "c3", "flat"]):
        _close(got, exp, 1e-5, what)
    ops = _ops(engine, feeds)
    assert ops.count(NHWC + "Conv") == 4 and NHWC + "AveragePool" in ops and "ReduceMean" in ops, ops
    # in: x, skip; out: the pool (a graph output) and c3 (graph output and Flatten's input)
    assert ops.count("Transpose") == 4, ops


def test_a_lone_convolution_and_maxpool_indices_stay_nchw(rng, channels_last):
    inits = [_w(rng, 4, 3, 3, 3, name="w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("MaxPool", ["c"], ["p", "idx"], kernel_shape=[2, 2])]
    model = _model(nodes, [_vi("x", [1, 3, 9, 10])], [_vi("p", None), helper.make_tensor_value_info(
        "idx", TensorProto.INT64, None)], inits)
    feeds = {"x": rng.standard_normal((1, 3, 9, 10)).astype(np.float32)}
    expected = _ort(model, feeds)
    engine = twinfer.load(model, device="sim")
    got = _run(engine, feeds)
    _close(got[0], expected[0], 1e-5, "pool")
    np.testing.assert_array_equal(got[1], expected[1])
    ops = _ops(engine, feeds)
    assert not any(op.startswith(NHWC) for op in ops) and "Transpose" not in ops, ops


def test_opset_18_global_pool_becomes_reduce_with_an_axes_input(rng, channels_last):
    inits = [_w(rng, 7, 3, 3, 3, name="w1"), _w(rng, 5, 7, 1, 1, name="w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"]),
             helper.make_node("GlobalMaxPool", ["c2"], ["g"])]
    model = _model(nodes, [_vi("x", [3, 3, 8, 9])], [_vi("g", None)], inits, opset=18)
    feeds = {"x": rng.standard_normal((3, 3, 8, 9)).astype(np.float32)}
    (expected,) = _ort(model, feeds)
    engine = twinfer.load(model, device="sim")
    (got,) = _run(engine, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert "ReduceMax" in _ops(engine, feeds)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_lower_precisions_take_channels_last_by_default(rng, precision, monkeypatch):
    """fp16 / bf16 device plans are channels-last without the environment
    switch; on the simulated device their convolutions and pools run the NCHW
    CPU kernels between transposes, in the 16-bit type (no casts but the
    input's and the output's)."""
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    c = 5
    inits = [_w(rng, c, 3, 3, 3, name="w1"), _w(rng, c, c, 3, 3, name="w2"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3, 13, 10])], [_vi("y", None)], inits)
    feeds = {"x": rng.standard_normal((2, 3, 13, 10)).astype(np.float32)}
    (expected,) = _ort(model, feeds)
    engine = twinfer.load(model, device="sim", precision=precision)
    (got,) = _run(engine, feeds)
    assert got.dtype == np.float32
    _close(got, expected, 1e-2 if precision == "fp16" else 3e-2, precision)
    rows = engine.kernel_report({"x": feeds["x"].shape})
    nhwc = [r for r in rows if r.op.startswith(NHWC)]
    assert len(nhwc) == 3, [(r.op, r.kernel) for r in rows]
    convs = [r.kernel for r in nhwc if r.op == NHWC + "Conv"]
    assert len(convs) == 2 and all("between NHWC transposes" in k for k in convs), convs
    assert all("between NHWC transposes" in r.kernel for r in nhwc), [(r.op, r.kernel) for r in nhwc]
    assert [r.op for r in rows].count("Cast") == 2, [(r.op, r.node) for r in rows]


def test_fp32_device_plans_stay_nchw_by_default(rng, monkeypatch):
    monkeypatch.delenv("TWINFER_CHANNELS_LAST", raising=False)
    inits = [_w(rng, 4, 3, 3, 3, name="w1"), _w(rng, 4, 4, 1, 1, name="w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Conv", ["c1", "w2"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3, 7, 7])], [_vi("y", None)], inits)
    feeds = {"x": rng.standard_normal((1, 3, 7, 7)).astype(np.float32)}
    engine = twinfer.load(model, device="sim")
    assert not any(op.startswith(NHWC) for op in _ops(engine, feeds))


# --- KRSC weights: the graph holds them, the device one copy -------------------


def _nhwc_conv_inputs(engine, feeds):
    """(weights shape, is constant) of each com.twinfer.nhwc::Conv of the plan."""
    steps = engine._core._test_step_inputs([list(v.shape) for v in feeds.values()])
    return [ins[1] for op, ins in steps if op == NHWC + "Conv"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_nhwc_convolutions_hold_krsc_weights_uploaded_once(rng, precision, channels_last):
    """The pass permutes each convolution's constant weights [M, C/group, kh,
    kw] once into a new constant [M, kh, kw, C/group] (the layout cuDNN's
    NHWC engines read), which the plan uploads instead of the original: the
    device holds the model's weight bytes once, and no kernel needs a copy of
    its own (which this report could not see). Plain, depthwise and grouped
    convolutions, one weight shared by two of them."""
    c = 8
    inits = [_w(rng, c, 3, 3, 5, name="w1"), numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
             _w(rng, c, 1, 3, 3, name="wd"), _w(rng, c, 2, 1, 3, name="wg"), _w(rng, c, c, 1, 1, name="w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 2, 1, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["d"], group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "wg"], ["g"], group=4, pads=[0, 1, 0, 1]),
             helper.make_node("Conv", ["g", "w2"], ["p"]),
             helper.make_node("Conv", ["p", "w2"], ["y"])]  # w2 again: one KRSC constant for both
    model = _model(nodes, [_vi("x", ["N", 3, "H", "W"])], [_vi("y", None)], inits)
    feeds = {"x": rng.standard_normal((2, 3, 11, 9)).astype(np.float32)}
    (expected,) = _ort(model, feeds)
    engine = twinfer.load(model, device="sim", precision=precision)
    (got,) = _run(engine, feeds)
    _close(got, expected, 1e-5 if precision == "fp32" else 1e-2, precision)

    weights = _nhwc_conv_inputs(engine, feeds)
    krsc = [[m, kh, kw, cg] for m, cg, kh, kw in ([c, 3, 3, 5], [c, 1, 3, 3], [c, 2, 1, 3], [c, c, 1, 1], [c, c, 1, 1])]
    assert weights == [(s, True) for s in krsc], weights
    itemsize = 4 if precision == "fp32" else 2
    model_bytes = sum(numpy_helper.to_array(t).size for t in inits) * itemsize
    shapes = [[2, 3, 11, 9]]
    # fp16/bf16: also the two float32 bounds of the Clip that saturates the input's cast down.
    clip_bounds = 0 if precision == "fp32" else 2 * 4
    assert engine.memory_report(shapes)["device_constant_bytes"] == model_bytes + clip_bounds

    # A plan for another input shape permutes nothing again: the engine's
    # constant store hands it the same KRSC copies (plan_builder.cc), so the
    # device still holds the weights once.
    feeds2 = {"x": rng.standard_normal((3, 3, 13, 7)).astype(np.float32)}
    (got2,) = _run(engine, feeds2)
    _close(got2, _ort(model, feeds2)[0], 1e-5 if precision == "fp32" else 1e-2, precision)
    report = engine.memory_report(shapes)
    assert report["device_constant_bytes"] == model_bytes + clip_bounds
    assert report["engine_device_constant_bytes"] == model_bytes + 2 * clip_bounds  # both plans' uploads


def _last(a):
    """[N, C, spatial...] -> [N, spatial..., C]; weights [M, C/group, k...] -> KRSC."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


NHWC_CONV_CASES = {  # x NCHW, w OIHW, group, attributes
    "3x3": ([2, 6, 9, 7], [5, 6, 3, 3], 1, {"pads": [1, 0, 1, 2], "strides": [2, 1]}),
    "grouped": ([1, 8, 7, 10], [6, 4, 3, 2], 2, {"dilations": [2, 1]}),
    "depthwise": ([2, 5, 8, 6], [5, 1, 3, 3], 5, {"pads": [1, 1, 1, 1]}),
    "1d": ([2, 4, 13], [6, 4, 3], 1, {"pads": [1, 1]}),
    "3d": ([1, 3, 5, 6, 7], [4, 3, 2, 3, 2], 1, {"strides": [1, 2, 1]}),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("runtime_weights", [False, True], ids=["constant", "input"])
@pytest.mark.parametrize("case", list(NHWC_CONV_CASES))
def test_nhwc_conv_cpu_kernels_read_krsc_weights(rng, case, dtype, runtime_weights):
    """com.twinfer.nhwc::Conv's contract on its own: x and y [N, spatial...,
    C], weights [M, k..., C/group]. float32 runs oneDNN's convolution on the
    layouts as they are, float16 the NCHW kernel between transposes (constant
    weights permuted back once, when the kernel is built; weights fed at run
    time, each run). Against onnxruntime's NCHW Conv."""
    xs, ws, group, attrs = NHWC_CONV_CASES[case]
    x = rng.standard_normal(xs).astype(dtype)
    w = (rng.standard_normal(ws) * 0.3).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    nchw = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)],
                  [_vi("x", xs), _vi("w", ws)], [_vi("y", None)], [numpy_helper.from_array(b.astype(np.float32), "b")])
    (expected,) = _ort(nchw, {"x": x.astype(np.float32), "w": w.astype(np.float32)})

    t = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    inputs = [helper.make_tensor_value_info("x", t, _last(x).shape)]
    inits = [numpy_helper.from_array(b, "b")]
    if runtime_weights:
        inputs.append(helper.make_tensor_value_info("w", t, _last(w).shape))
    else:
        inits.append(numpy_helper.from_array(_last(w), "w"))
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], domain="com.twinfer.nhwc", group=group,
                                            **attrs)], "g", inputs, [helper.make_tensor_value_info("y", t, None)],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.twinfer.nhwc", 1)])
    engine = twinfer.load(model)
    feeds = {"x": _last(x), **({"w": _last(w)} if runtime_weights else {})}
    (got,) = _run(engine, feeds)
    _close(got, _last(expected), 1e-5 if dtype == "float32" else 1e-2, case)
    (row,) = engine.kernel_report({k: v.shape for k, v in feeds.items()})
    assert row.kernel.startswith("onednn conv") if dtype == "float32" else "between NHWC transposes" in row.kernel, row


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
], ids=["max", "avg-include-pad", "avg-ceil"])
def test_nhwc_pool_cpu_kernels_take_16bit(rng, op, attrs, dtype):
    """com.twinfer.nhwc MaxPool / AveragePool in float16 and bfloat16 (the
    simulated device's kernels in the GPU's 16-bit plans): pool.cc's loop
    between transposes, computing in float. Against onnxruntime's NCHW pool
    in float32 on the same rounded values."""
    import ml_dtypes

    np_t, t, rtol = {"float16": (np.float16, TensorProto.FLOAT16, 2e-3),
                     "bfloat16": (ml_dtypes.bfloat16, TensorProto.BFLOAT16, 1.2e-2)}[dtype]
    x = (rng.standard_normal((2, 5, 11, 9)) * 3).astype(np_t)
    nchw = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [_vi("x", list(x.shape))], [_vi("y", None)], [])
    (expected,) = _ort(nchw, {"x": x.astype(np.float32)})
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain="com.twinfer.nhwc", **attrs)], "g",
                          [helper.make_tensor_value_info("x", t, _last(x).shape)],
                          [helper.make_tensor_value_info("y", t, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.twinfer.nhwc", 1)])
    engine = twinfer.load(model)
    (got,) = _run(engine, {"x": _last(x)})
    assert got.dtype == np_t
    np.testing.assert_allclose(got.astype(np.float32), _last(expected), rtol=rtol, atol=1e-6)
    (row,) = engine.kernel_report({"x": _last(x).shape})
    assert row.kernel == "cpu loop between NHWC transposes", row
