"""Graph rewrites, each checked two ways on a tiny model: by op counts after
optimisation, and by equal outputs against onnxruntime on the original graph."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import twinfer
from conftest import PLAN_DEVICES, load_on
from onnx_helpers import run_ort


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def _conv_weights(rng, cout, cin, k):
    return rng.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.3


def _bn(rng, c, prefix):
    return {
        f"{prefix}_scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}_bias": rng.uniform(-0.5, 0.5, c).astype(np.float32),
        f"{prefix}_mean": rng.uniform(-0.5, 0.5, c).astype(np.float32),
        f"{prefix}_var": rng.uniform(0.2, 2.0, c).astype(np.float32),
    }


def _check(model, feeds, rtol=1e-4, atol=1e-4):
    engine = twinfer.load(model, device="cpu")
    expected = run_ort(model, feeds)
    got = engine.run(feeds)
    for (name, t), e in zip(got.items(), expected):
        np.testing.assert_allclose(t.numpy(), e, rtol=rtol, atol=atol, err_msg=name)
    return engine.op_histogram()


@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_batchnorm_folds_into_conv(rng, with_bias):
    inits = {"w": _conv_weights(rng, 5, 3, 3), **_bn(rng, 5, "bn")}
    conv_inputs = ["x", "w"]
    if with_bias:
        inits["b"] = rng.standard_normal(5).astype(np.float32)
        conv_inputs.append("b")
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["y"], epsilon=1e-3),
    ]
    model = _model(nodes, [_vi("x", [2, 3, 11, 13])], [_vi("y", [2, 5, 11, 13])], inits)
    hist = _check(model, {"x": rng.standard_normal((2, 3, 11, 13)).astype(np.float32)})
    assert "BatchNormalization" not in hist and sum(hist.values()) == 1, hist


def test_batchnorm_on_a_shared_conv_output_is_not_folded(rng):
    inits = {"w": _conv_weights(rng, 4, 3, 1), **_bn(rng, 4, "bn")}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["y"]),
        helper.make_node("Neg", ["c"], ["z"]),
    ]
    model = _model(nodes, [_vi("x", [1, 3, 7, 7])], [_vi("y", [1, 4, 7, 7]), _vi("z", [1, 4, 7, 7])], inits)
    hist = _check(model, {"x": rng.standard_normal((1, 3, 7, 7)).astype(np.float32)})
    assert hist.get("BatchNormalization") == 1


@pytest.mark.parametrize("act", ["Relu", "Clip", "Sigmoid", "LeakyRelu", "HardSigmoid", "Silu"])
@pytest.mark.parametrize("residual", [False, True])
def test_conv_epilogue_fusion(rng, act, residual):
    inits = {"w": _conv_weights(rng, 6, 6, 3), "b": rng.standard_normal(6).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    tail = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["x", "c"], ["r"]))
        tail = "r"
    if act == "Clip":
        inits["lo"] = np.array(0.0, np.float32)
        inits["hi"] = np.array(6.0, np.float32)
        nodes.append(helper.make_node("Clip", [tail, "lo", "hi"], ["y"]))
    elif act == "Silu":
        nodes += [helper.make_node("Sigmoid", [tail], ["s"]), helper.make_node("Mul", [tail, "s"], ["y"])]
    elif act == "LeakyRelu":
        nodes.append(helper.make_node(act, [tail], ["y"], alpha=0.07))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node(act, [tail], ["y"], alpha=0.3, beta=0.4))
    else:
        nodes.append(helper.make_node(act, [tail], ["y"]))
    model = _model(nodes, [_vi("x", [2, 6, 9, 10])], [_vi("y", [2, 6, 9, 10])], inits)
    hist = _check(model, {"x": rng.standard_normal((2, 6, 9, 10)).astype(np.float32)})
    assert hist == {"com.twinfer::Conv": 1}, hist


def test_matmul_bias_activation_fusion(rng):
    inits = {"w": rng.standard_normal((17, 11)).astype(np.float32), "b": rng.standard_normal(11).astype(np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["b", "m"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [3, 5, 17])], [_vi("y", [3, 5, 11])], inits)
    hist = _check(model, {"x": rng.standard_normal((3, 5, 17)).astype(np.float32)})
    assert hist == {"com.twinfer::MatMul": 1}, hist


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_matmul_gelu_fusion(rng, approximate):
    # Both GELU forms go into the GEMM's epilogue (oneDNN's gelu_erf / gelu_tanh
    # post-ops); GPT-2's MLP is MatMul + bias + tanh GELU.
    inits = {"w": rng.standard_normal((17, 11)).astype(np.float32) * 0.5,
             "b": rng.standard_normal(11).astype(np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Gelu", ["a"], ["y"], approximate=approximate),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [3, 5, 17])], [_vi("y", [3, 5, 11])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    hist = _check(model, {"x": rng.standard_normal((3, 5, 17)).astype(np.float32) * 2})
    assert hist == {"com.twinfer::MatMul": 1}, hist


@pytest.mark.parametrize("order", ["x_first", "sigmoid_first"])
def test_silu_outside_an_epilogue_becomes_one_swish(rng, order):
    # x * sigmoid(x) after an op no epilogue takes (a normalisation, as in a
    # UNet): one Swish (alpha 1); x also feeds a residual Add, which stays.
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n"]),
        helper.make_node("Sigmoid", ["n"], ["g"]),
        helper.make_node("Mul", ["n", "g"] if order == "x_first" else ["g", "n"], ["silu"]),
        helper.make_node("Add", ["silu", "n"], ["y"]),
    ]
    inits = {"s": rng.uniform(0.5, 1.5, 5).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    model = _model(nodes, [_vi("x", [2, 5, 7, 9])], [_vi("y", [2, 5, 7, 9])], inits)
    hist = _check(model, {"x": (rng.standard_normal((2, 5, 7, 9)) * 4).astype(np.float32)}, rtol=1e-5, atol=1e-6)
    assert hist.get("Swish") == 1 and "Sigmoid" not in hist and "Mul" not in hist, hist


def test_fusion_keeps_values_that_are_graph_outputs(rng):
    inits = {"w": _conv_weights(rng, 3, 3, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3, 5, 5])], [_vi("c", [1, 3, 5, 5]), _vi("y", [1, 3, 5, 5])], inits)
    hist = _check(model, {"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)})
    assert hist.get("Relu") == 1


def test_constant_subgraphs_are_folded(rng):
    # shape arithmetic on a constant: Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    inits = {"c": rng.standard_normal((4, 6)).astype(np.float32), "idx": np.array(0, np.int64),
             "minus1": np.array([-1], np.int64)}
    nodes = [
        helper.make_node("Shape", ["c"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "zero_axes"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits["zero_axes"] = np.array([0], np.int64)
    model = _model(nodes, [_vi("x", [2, 12])], [_vi("y", [4, 6])], inits)
    hist = _check(model, {"x": rng.standard_normal((2, 12)).astype(np.float32)})
    assert hist == {"Reshape": 1}, hist
    stats = twinfer.load(model, device="cpu").stats()
    assert any("folded 4" in line for line in stats["passes"]), stats


def test_identity_and_dropout_are_removed(rng):
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Dropout", ["a"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [3, 7])], [_vi("y", [3, 7])], {})
    hist = _check(model, {"x": rng.standard_normal((3, 7)).astype(np.float32)})
    assert hist == {"Relu": 1}, hist


@pytest.mark.parametrize("x_type,mid,removed", [
    (np.float16, onnx.TensorProto.FLOAT, True),     # float16 -> float32 -> float16: exact
    (np.int32, onnx.TensorProto.INT64, True),       # widening integers: exact
    (np.uint8, onnx.TensorProto.INT16, True),
    (np.float32, onnx.TensorProto.FLOAT16, False),  # through a narrower type rounds
    (np.int16, onnx.TensorProto.UINT16, False),     # through unsigned loses the negatives
])
def test_a_cast_round_trip_through_a_wider_type_is_removed(rng, x_type, mid, removed):
    # TorchScript writes softmax(s, dtype=float32).to(float16) of a float16 s as
    # Softmax then Cast(float32) -> Cast(float16); only an exact round trip goes.
    back = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(x_type))
    nodes = [helper.make_node("Cast", ["x"], ["wide"], to=mid), helper.make_node("Cast", ["wide"], ["back"], to=back),
             helper.make_node("Neg", ["back"], ["y"])]
    io = lambda n: helper.make_tensor_value_info(n, back, [4, 5])  # noqa: E731
    model = _model(nodes, [io("x")], [io("y")], {})
    if np.issubdtype(x_type, np.floating):
        x = (rng.standard_normal((4, 5)) * 300).astype(x_type)
    else:
        x = rng.integers(np.iinfo(x_type).min, np.iinfo(x_type).max, (4, 5)).astype(x_type)
    if x_type == np.uint8:  # Neg of unsigned wraps: the reference is onnxruntime's
        nodes[2] = helper.make_node("Identity", ["back"], ["y"])
        model = _model(nodes, [io("x")], [io("y")], {})
    hist = _check(model, {"x": x})
    assert ("Cast" not in hist) == removed, hist


@pytest.mark.parametrize("spelling", ["div_then_half_last", "mul_then_half_first"])
def test_erf_gelu_pattern_becomes_one_op(rng, spelling):
    inits = {"one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    if spelling == "div_then_half_last":  # TorchScript exporter: x * 0.5 * (1 + erf(x / sqrt 2)) in this order
        inits["k"] = np.array(np.sqrt(2.0), np.float32)
        nodes = [
            helper.make_node("Div", ["x", "k"], ["s"]),
            helper.make_node("Erf", ["s"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["a"]),
            helper.make_node("Mul", ["x", "a"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"]),
        ]
    else:
        inits["k"] = np.array(1.0 / np.sqrt(2.0), np.float32)
        nodes = [
            helper.make_node("Mul", ["x", "k"], ["s"]),
            helper.make_node("Erf", ["s"], ["e"]),
            helper.make_node("Add", ["one", "e"], ["a"]),
            helper.make_node("Mul", ["half", "x"], ["h"]),
            helper.make_node("Mul", ["h", "a"], ["y"]),
        ]
    model = _model(nodes, [_vi("x", [3, 5, 7])], [_vi("y", [3, 5, 7])], inits)
    hist = _check(model, {"x": 3 * rng.standard_normal((3, 5, 7)).astype(np.float32)}, rtol=1e-5, atol=1e-6)
    assert hist == {"Gelu": 1}, hist


@pytest.mark.parametrize("spelling", ["newgelu", "half_last_sum_flipped"])
def test_tanh_gelu_pattern_becomes_one_op(rng, spelling):
    # GPT-2's NewGELU / torch's gelu(approximate="tanh"):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). Left as nodes,
    # its Pow kept the MLP between the GEMMs float32 under fp16.
    inits = {"one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32),
             "three": np.array(3.0, np.float32), "c": np.array(0.044715, np.float32),
             "k": np.array(np.sqrt(2.0 / np.pi), np.float32)}
    nodes = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["p", "c"], ["pc"]),
             helper.make_node("Add", ["x", "pc"] if spelling == "newgelu" else ["pc", "x"], ["a"]),
             helper.make_node("Mul", ["a", "k"], ["ak"]), helper.make_node("Tanh", ["ak"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"])]
    if spelling == "newgelu":
        nodes += [helper.make_node("Mul", ["half", "x"], ["h"]), helper.make_node("Mul", ["h", "t1"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "t1"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    model = _model(nodes, [_vi("x", [3, 5, 7])], [_vi("y", [3, 5, 7])], inits)
    hist = _check(model, {"x": 3 * rng.standard_normal((3, 5, 7)).astype(np.float32)}, rtol=1e-5, atol=1e-5)
    assert hist == {"Gelu": 1}, hist
    stats = twinfer.load(model, device="cpu").stats()
    assert any("1 tanh-GELU" in line for line in stats["passes"]), stats


@pytest.mark.parametrize("shape,conv_bias,first,folds", [
    ((1, 5, 1, 1), True, False, True),   # paddle2onnx's bias
    ((5, 1, 1), False, True, True),      # Add(c, conv)
    ((), True, False, True),             # one value for every channel
    ((1, 1, 1, 1), False, False, True),
    ((1, 1, 1, 11), True, False, False),  # one value per column: not a bias
    ((1, 1, 5, 1, 1), True, False, False),  # raises the rank
    ((1, 5, 1, 1), True, False, "read_twice"),
])
@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_a_per_channel_add_after_a_conv_folds_into_its_bias(rng, shape, conv_bias, first, folds, device):
    inits = {"w": _conv_weights(rng, 5, 3, 3), "c": rng.standard_normal(shape).astype(np.float32)}
    conv_in = ["x", "w"]
    if conv_bias:
        inits["b"] = rng.standard_normal(5).astype(np.float32)
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "y"] if first else ["y", "c"], ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    outputs = [_vi("out", None)]
    if folds == "read_twice":
        outputs.append(_vi("y", None))
    model = _model(nodes, [_vi("x", [2, 3, 9, 11])], outputs, inits)
    feeds = {"x": rng.standard_normal((2, 3, 9, 11)).astype(np.float32)}
    engine = load_on(model, device)
    got = engine.run(feeds)
    for (name, t), want in zip(got.items(), run_ort(model, feeds)):
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)
    hist, passes = engine.op_histogram(), engine.stats()["passes"]
    folded = any("fold_conv_add: folded 1" in line for line in passes)
    assert folded == (folds is True), (hist, passes)
    if folds is True:  # and the Relu then goes into the conv's epilogue
        assert hist == {"com.twinfer::Conv": 1}, hist


def _hard_swish_nodes(spelling):
    """HardSwish of x into y as exporters spell it out; (nodes, constants, opset)."""
    c = {"three": np.array(3.0, np.float32), "zero": np.array(0.0, np.float32), "six": np.array(6.0, np.float32),
         "sixth": np.array(1 / 6, np.float32)}
    clip = helper.make_node("Clip", ["a", "zero", "six"], ["c"])
    if spelling == "paddle":  # x * Clip(x + 3, 0, 6) / 6
        return [helper.make_node("Add", ["x", "three"], ["a"]), clip, helper.make_node("Mul", ["x", "c"], ["m"]),
                helper.make_node("Div", ["m", "six"], ["y"])], c, 17
    if spelling == "sixth_after":  # (3 + x) clipped by attributes (opset 6), * x, * (1/6)
        return [helper.make_node("Add", ["three", "x"], ["a"]), helper.make_node("Clip", ["a"], ["c"], min=0.0, max=6.0),
                helper.make_node("Mul", ["c", "x"], ["m"]), helper.make_node("Mul", ["sixth", "m"], ["y"])], c, 10
    if spelling == "sixth_before":  # x * (Clip(x + 3, 0, 6) / 6)
        return [helper.make_node("Add", ["x", "three"], ["a"]), clip, helper.make_node("Div", ["c", "six"], ["d"]),
                helper.make_node("Mul", ["x", "d"], ["y"])], c, 17
    assert spelling == "hard_sigmoid"  # torch before opset 14: x * hardsigmoid(x)
    return [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["x", "h"], ["y"])], c, 13


@pytest.mark.parametrize("spelling", ["paddle", "sixth_after", "sixth_before", "hard_sigmoid"])
@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_spelled_out_hard_swish_becomes_one_op_and_fuses_into_the_conv(rng, spelling, device):
    # A conv, then HardSwish as paddle2onnx or torch spells it: one HardSwish
    # node, which the conv's epilogue takes; against onnxruntime across the
    # bend points (-3, 3), infinities and NaN.
    nodes, inits, opset = _hard_swish_nodes(spelling)
    nodes = [helper.make_node("Conv", ["img", "w"], ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])] + nodes
    inits = {k: v for k, v in inits.items() if any(k in n.input for n in nodes)}
    inits["w"] = _conv_weights(rng, 6, 3, 3)
    model = _model(nodes, [_vi("img", [2, 3, 9, 11])], [_vi("y", [2, 6, 9, 11])], inits)
    model.opset_import[0].version = opset
    img = 3 * rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    img[0, :, 4, 5] = [np.inf, -np.inf, np.nan]
    engine = load_on(model, device)
    want = run_ort(model, {"img": img})[0]
    got = engine.run({"img": img})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert engine.op_histogram() == {"com.twinfer::Conv": 1}, engine.op_histogram()
    # and without the conv in front: one HardSwish node
    plain = _model(nodes[1:], [_vi("x", [4, 5, 7])], [_vi("y", [4, 5, 7])], {k: v for k, v in inits.items() if k != "w"})
    plain.opset_import[0].version = opset
    x = np.linspace(-5, 5, 140, dtype=np.float32).reshape(4, 5, 7)
    engine = load_on(plain, device)
    np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), run_ort(plain, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert engine.op_histogram() == {"HardSwish": 1}


@pytest.mark.parametrize("change", ["clip_to_5", "add_2", "gate_read_twice", "hard_sigmoid_alpha_0.2"])
def test_near_hard_swish_patterns_stay_as_they_are(rng, change):
    nodes, inits, opset = _hard_swish_nodes("hard_sigmoid" if change.startswith("hard_sigmoid") else "paddle")
    outputs = [_vi("y", [4, 5, 7])]
    if change == "clip_to_5":
        inits["six"] = np.array(5.0, np.float32)
        nodes[3] = helper.make_node("Div", ["m", "six6"], ["y"])
        inits["six6"] = np.array(6.0, np.float32)
    elif change == "add_2":
        inits["three"] = np.array(2.0, np.float32)
    elif change == "gate_read_twice":
        outputs.append(_vi("c", [4, 5, 7]))
    else:
        nodes[0] = helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5)
    inits = {k: v for k, v in inits.items() if any(k in n.input for n in nodes)}
    model = _model(nodes, [_vi("x", [4, 5, 7])], outputs, inits)
    model.opset_import[0].version = opset
    hist = _check(model, {"x": 3 * rng.standard_normal((4, 5, 7)).astype(np.float32)}, rtol=1e-6, atol=1e-6)
    assert "HardSwish" not in hist, hist


@pytest.mark.parametrize("a_shape,b_shape,perm,folded", [
    ([1, 16, 1, 80], [1, 16, 1030, 80], [0, 1, 3, 2], True),  # a decode step over a 5 MiB key cache
    ([2, 1, 5, 64], [1, 4, 4097, 64], [0, 1, 3, 2], True),    # batch dims broadcast both ways
    ([5, 64], [16411, 64], [1, 0], True),                      # plain matrices
    ([2, 3, 5, 7], [2, 3, 9, 7], [0, 1, 3, 2], False),         # a small b: the copy is cheaper than a kernel
    ([2, 5, 7], [7, 2, 9], [1, 0, 2], False),                  # not the last two axes
])
def test_a_matmul_reads_a_transposed_operand_in_place(rng, a_shape, b_shape, perm, folded):
    # CPU plans: MatMul(a, Transpose(b)) -> Einsum reading b with its strides
    # (graph/passes/matmul_reads_transposed.h) where b holds 4 MiB or more;
    # other transposes stay.
    nodes = [helper.make_node("Transpose", ["b"], ["bt"], perm=perm), helper.make_node("MatMul", ["a", "bt"], ["y"])]
    model = _model(nodes, [_vi("a", a_shape), _vi("b", b_shape)], [_vi("y", None)], {})
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    _check(model, feeds)
    ops = [r.op for r in twinfer.load(model, device="cpu").kernel_report(feeds)]  # the plan's nodes
    assert (ops == ["Einsum"]) == folded, ops


def test_a_transpose_read_elsewhere_stays(rng):
    nodes = [helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]), helper.make_node("MatMul", ["a", "bt"], ["y"]),
             helper.make_node("Relu", ["bt"], ["z"])]
    model = _model(nodes, [_vi("a", [2, 5, 7]), _vi("b", [2, 9, 7])], [_vi("y", None), _vi("z", None)], {})
    feeds = {"a": rng.standard_normal((2, 5, 7)).astype(np.float32), "b": rng.standard_normal((2, 9, 7)).astype(np.float32)}
    _check(model, feeds)
    ops = sorted(r.op for r in twinfer.load(model, device="cpu").kernel_report(feeds))
    assert ops == ["MatMul", "Relu", "Transpose"], ops
