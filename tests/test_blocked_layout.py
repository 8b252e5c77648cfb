"""The blocked-layout plan pass (csrc/graph/passes/blocked_layout.cc): chains of
convolutions, elementwise ops, pools and concats keep their activations in
oneDNN's channel-blocked layout, with ToBlocked / FromBlocked only at the
region's edges. Checked against onnxruntime on torchvision CNNs (random
weights, odd image sizes) and on small graphs that hit each region boundary;
the kernel report shows which nodes ran blocked, so a pass that silently did
nothing fails too."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer

BLOCKED = "com.twinfer.blocked::"


def _ort(path_or_model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = path_or_model.SerializeToString() if isinstance(path_or_model, onnx.ModelProto) else str(path_or_model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check_close(got, expected, what):
    assert got.shape == expected.shape, what
    err = float(np.linalg.norm(got.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))
    assert err < 2e-4, f"{what}: relative error {err}"
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * float(np.abs(expected).max()) + 1e-6,
                               err_msg=what)


def _ops(engine, shapes):
    return [r.op for r in engine.kernel_report(shapes)]


# --- torchvision CNNs ---------------------------------------------------------


def _export_torchvision(name, folder):
    import torch
    import torchvision

    torch.manual_seed(7)
    model = getattr(torchvision.models, name)().eval()
    with torch.no_grad():  # non-trivial batch norms, so folding them is exercised
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 61, 83),), str(path), dynamo=False, input_names=["input"],
                          output_names=["output"], opset_version=17,
                          dynamic_axes={"input": {0: "batch", 2: "h", 3: "w"}})
    return path


@pytest.fixture(scope="module")
def torchvision_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tv")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _export_torchvision(name, folder)
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "resnet18"])
def test_torchvision_matches_onnxruntime(name, torchvision_model, rng):
    path = torchvision_model(name)
    engine = twinfer.load(path, device="cpu")
    for batch, h, w in [(1, 61, 83), (3, 61, 83), (1, 97, 45)]:
        x = rng.standard_normal((batch, 3, h, w)).astype(np.float32)
        (expected,) = _ort(path, {"input": x})
        got = engine.run({"input": x})["output"].numpy()
        _check_close(got, expected, f"{name} {x.shape}")
    ops = _ops(engine, [[1, 3, 61, 83]])
    convs = [op for op in ops if op.endswith("Conv")]
    blocked_convs = [op for op in convs if op.startswith(BLOCKED)]
    # Every convolution runs blocked; the region is left once, for the classifier.
    assert len(blocked_convs) == len(convs), ops
    assert ops.count(BLOCKED + "FromBlocked") == 1, ops
    assert ops.count(BLOCKED + "ToBlocked") == 0, ops  # the RGB input is read plain by the first conv
    if name == "efficientnet_b0":  # squeeze-excitation: pool and per-channel Mul stay blocked
        assert ops.count(BLOCKED + "Mul") == 16 and ops.count(BLOCKED + "GlobalAveragePool") == 17, ops
    if name == "resnet18":
        assert BLOCKED + "MaxPool" in ops


# --- small graphs at the region's edges ---------------------------------------


class G:
    """A tiny ONNX graph builder with random float32 weights."""

    def __init__(self, rng, c_in, h=13, w=11, batch=2):
        self.rng = rng
        self.nodes, self.inits, self.outputs = [], [], []
        self.inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c_in, h, w])]
        self.feeds = {"x": rng.standard_normal((batch, c_in, h, w)).astype(np.float32)}
        self.n = 0

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def const(self, arr):
        nm = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), nm))
        return nm

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out

    def conv(self, x, c_in, c_out, k=3, group=1, stride=1, bias=True):
        w = self.const(self.rng.standard_normal((c_out, c_in // group, k, k)) / np.sqrt(c_in // group * k * k))
        ins = [x, w] + ([self.const(self.rng.standard_normal(c_out) * 0.1)] if bias else [])
        return self.node("Conv", ins, kernel_shape=[k, k], pads=[k // 2] * 4, group=group, strides=[stride] * 2)

    def output(self, v):
        self.outputs.append(helper.make_tensor_value_info(v, TensorProto.FLOAT, None))

    def model(self):
        graph = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def _run_both(g):
    m = g.model()
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    expected = _ort(m, g.feeds)
    got = engine.run(g.feeds)
    for o, e in zip(g.outputs, expected):
        _check_close(got[o.name].numpy(), e, o.name)
    return _ops(engine, [list(v.shape) for v in g.feeds.values()])


def test_channels_not_a_multiple_of_the_block(rng):
    g = G(rng, 3)
    y = g.node("Relu", [g.conv("x", 3, 5)])           # 5 channels: mostly padding
    y = g.node("Clip", [g.conv(y, 5, 24), g.const(-0.5), g.const(0.75)])
    y = g.conv(y, 24, 40, k=1)
    y = g.node("LeakyRelu", [g.node("Add", [y, g.conv(y, 40, 40, k=1)])], alpha=0.1)
    g.output(g.conv(y, 40, 7, k=3, stride=2))
    ops = _run_both(g)
    assert ops.count(BLOCKED + "Conv") == 5 and ops.count(BLOCKED + "FromBlocked") == 1, ops


def test_max_and_min_with_a_constant_stay_blocked(rng):
    # tf2onnx's tf.maximum(LeakyRelu(conv), -0.4) (openwakeword's embedding
    # model): Max / Min of a scalar constant, either operand order, stay in
    # the region; with infinities and NaN in the feature maps, NaN stays NaN
    # as onnxruntime's Max / Min keep it.
    g = G(rng, 16)
    y = g.node("Max", [g.node("LeakyRelu", [g.conv("x", 16, 24)], alpha=0.2), g.const(np.float32(-0.4))])
    y = g.node("Min", [g.const(np.full((1, 1, 1, 1), 0.3, np.float32)), g.conv(y, 24, 24, k=1)])
    y = g.node("Max", [g.conv(y, 24, 24), g.const(np.float32(-0.1))])
    g.output(g.conv(y, 24, 16, k=1))
    ops = _run_both(g)
    assert ops.count(BLOCKED + "Conv") == 4 and ops.count(BLOCKED + "FromBlocked") == 1, ops
    assert ops.count(BLOCKED + "Max") == 2 and ops.count(BLOCKED + "Min") == 1, ops
    g.feeds["x"][0, :3, 4, 5] = [np.inf, -np.inf, np.nan]
    got = twinfer.load(g.model().SerializeToString(), device="cpu").run(g.feeds)[g.outputs[0].name].numpy()
    want = _ort(g.model(), g.feeds)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert finite.mean() < 0.95  # the NaN spread through the convolutions (about 9% of the output)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_squeeze_excitation(rng):
    g = G(rng, 24)
    x = g.conv("x", 24, 40)
    s = g.node("GlobalAveragePool", [x])
    s = g.node("Relu", [g.conv(s, 40, 10, k=1)])
    s = g.node("Sigmoid", [g.conv(s, 10, 40, k=1)])
    y = g.node("Mul", [x, s])
    y2 = g.node("Mul", [s, g.node("HardSwish", [y])])  # the per-channel operand first
    g.output(g.conv(y2, 40, 24, k=1))
    ops = _run_both(g)
    assert ops.count(BLOCKED + "Mul") == 2 and BLOCKED + "GlobalAveragePool" in ops, ops
    assert ops.count(BLOCKED + "ToBlocked") == 1, ops  # x has 24 channels: reordered explicitly


def test_residuals_and_plain_neighbours(rng):
    g = G(rng, 16, h=9, w=14)
    a = g.conv("x", 16, 32)
    b = g.conv(g.node("Relu", [g.conv(a, 32, 32)]), 32, 32)
    c = g.node("Relu", [g.node("Add", [b, a])])        # fused residual, blocked
    d = g.node("Add", [g.node("Relu", [g.conv(c, 32, 16, k=1)]), "x"])  # blocked Add; the plain input joins
    e = g.node("Softmax", [d], axis=1)                 # a plain consumer
    f = g.conv(d, 16, 16)                              # ...and a blocked one of the same value
    g.output(c)                                        # an intermediate is also an output
    g.output(e)
    g.output(f)
    ops = _run_both(g)
    assert ops.count(BLOCKED + "FromBlocked") == 3, ops  # c, d (for Softmax), f
    assert ops.count(BLOCKED + "ToBlocked") == 1, ops    # x, once, for the first conv and the Add
    assert BLOCKED + "Add" in ops and BLOCKED + "Softmax" not in ops, ops


@pytest.mark.parametrize("aligned", [True, False])
def test_concat(rng, aligned):
    g = G(rng, 8)
    c1 = 32 if aligned else 24
    a = g.conv("x", 8, c1)
    b = g.node("MaxPool", [g.conv("x", 8, 48)], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = g.node("Concat", [a, b], axis=1)
    g.output(g.conv(y, c1 + 48, 17))
    ops = _run_both(g)
    assert (BLOCKED + "Concat" in ops) == aligned, ops
    assert ("Concat" in ops) == (not aligned), ops


def test_pools_and_groups(rng):
    g = G(rng, 32, h=17, w=12)
    y = g.node("MaxPool", [g.conv("x", 32, 32, group=32)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.node("AveragePool", [g.conv(y, 32, 32, group=2)], kernel_shape=[3, 2], strides=[1, 2],
               count_include_pad=1, pads=[1, 0, 1, 0])
    y = g.node("AveragePool", [g.conv(y, 32, 48, k=1)], kernel_shape=[2, 2], ceil_mode=1, strides=[2, 2])
    z = g.conv(y, 48, 24, group=2)                    # 12 channels per group: leaves the region
    g.output(g.node("GlobalMaxPool", [g.conv(z, 24, 24, group=24)]))
    ops = _run_both(g)
    assert ops.count(BLOCKED + "Conv") == 4 and "Conv" in ops, ops
    assert BLOCKED + "MaxPool" in ops and ops.count(BLOCKED + "AveragePool") == 2, ops


def test_lone_convolution_keeps_its_own_layout(rng):
    g = G(rng, 24)
    g.output(g.node("Softmax", [g.conv("x", 24, 40)], axis=1))
    ops = _run_both(g)
    assert not any(op.startswith(BLOCKED) for op in ops), ops


def test_memory_report_counts_channel_padding(rng):
    g = G(rng, 3, h=31, w=29, batch=1)
    y = g.conv(g.conv("x", 3, 1, k=1), 1, 1, k=1)    # 1 channel padded to a whole block
    g.output(g.conv(y, 1, 2, k=1))
    m = g.model()
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    (expected,) = _ort(m, g.feeds)
    _check_close(engine.run(g.feeds)[g.outputs[0].name].numpy(), expected, "padded")
    report = engine.memory_report([[1, 3, 31, 29]])
    assert report["naive_bytes"] >= 2 * 8 * 31 * 29 * 4, report  # two blocked 1-channel maps, >= 8 channels each


def _in_place_steps(g):
    engine = twinfer.load(g.model().SerializeToString(), device="cpu")
    return engine.memory_report([list(v.shape) for v in g.feeds.values()])["in_place_steps"]


def test_a_residual_convolution_writes_over_its_residual(rng):
    """A fused convolution's residual that no later step reads lends y its
    block: oneDNN's sum post-op adds it where it lies, with no copy into y
    first (memory_report's in_place_steps counts them). Two residual blocks
    in a row chain the same block; each result against onnxruntime."""
    g = G(rng, 16, h=9, w=14)
    a = g.conv("x", 16, 32)
    for _ in range(2):
        b = g.conv(g.node("Relu", [g.conv(a, 32, 32)]), 32, 32, k=1)
        a = g.node("Relu", [g.node("Add", [b, a])])
    g.output(g.conv(a, 32, 16))
    ops = _run_both(g)
    assert ops.count(BLOCKED + "Conv") == 6, ops
    assert _in_place_steps(g) == 2


@pytest.mark.parametrize("case", ["read later", "also x", "an output"])
def test_a_residual_still_needed_keeps_its_block(rng, case):
    """No in-place write where the residual is read after the convolution,
    is also the convolution's own input, or is a graph output."""
    g = G(rng, 16, h=11, w=7)
    a = g.conv("x", 16, 32)
    x = a if case == "also x" else g.node("Relu", [g.conv(a, 32, 32)])
    c = g.node("Relu", [g.node("Add", [g.conv(x, 32, 32), a])])
    g.output(g.conv(c, 32, 16))
    if case == "read later":
        g.output(g.conv(a, 32, 8, k=1))
    if case == "an output":
        g.output(a)
    ops = _run_both(g)
    assert BLOCKED + "Conv" in ops and BLOCKED + "Add" not in ops, ops  # the Add went into a conv
    assert _in_place_steps(g) == 0
