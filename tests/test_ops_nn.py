"""Compute-heavy NN ops on the CPU (oneDNN-backed Conv / Gemm / MatMul /
Softmax, own loops for pooling and normalisation), each compared with an
independent reference: onnxruntime's CPU provider, the ONNX reference
evaluator (float64) or a few lines of NumPy. Fused com.twinfer nodes are
compared with the unfused graph run by onnxruntime plus the activation in
NumPy.

Tolerances: float32 results use rtol = atol = 1e-4 because oneDNN and
onnxruntime sum the products in different orders (blocked kernels, GEMM
tiling), which moves the last bits of sums of up to a few hundred terms;
float64 results from the reference kernels use 1e-10."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from onnx_helpers import assert_close, make_model, run_ort, run_reference, run_twinfer

F32 = dict(rtol=1e-4, atol=1e-4)
F64 = dict(rtol=1e-10, atol=1e-10)
DOMAIN = "com.twinfer"


def twinfer_error():
    import twinfer

    return twinfer.Error


def with_twinfer_opset(model):
    model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model


def randn(rng, *shape, scale=1.0, dtype=np.float32):
    return np.asarray(rng.standard_normal(shape) * scale, dtype=dtype)


# ----------------------------------------------------------------------------- activations (NumPy)


def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64)).astype(x.dtype)


ACTIVATIONS = {
    # name: (activation_params, numpy function)
    "": ([], lambda x: x),
    "Relu": ([], lambda x: np.maximum(x, 0)),
    "LeakyRelu": ([0.1], lambda x: np.where(x >= 0, x, 0.1 * x)),
    "Clip": ([-0.5, 0.7], lambda x: np.clip(x, -0.5, 0.7)),
    "Sigmoid": ([], lambda x: 1 / (1 + np.exp(-x))),
    "HardSigmoid": ([0.3, 0.4], lambda x: np.clip(0.3 * x + 0.4, 0, 1)),
    "HardSwish": ([], lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "Silu": ([], lambda x: x / (1 + np.exp(-x))),
    "Gelu": ([], lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "Tanh": ([], np.tanh),
}


def fused_attrs(act):
    params, _ = ACTIVATIONS[act]
    attrs = {"activation": act}
    if params:
        attrs["activation_params"] = params
    return attrs


# ----------------------------------------------------------------------------- Conv

# (x shape, out channels, kernel, attrs) — odd sizes, asymmetric pads,
# dilations, strides, groups (incl. depthwise), 1-D / 3-D.
CONV_CASES = [
    ((2, 3, 13, 13), 5, (3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 3, 17, 13), 4, (1, 1), {}),
    ((1, 16, 23, 21), 7, (1, 1), {}),  # 1x1 on a large image: the plain-layout GEMM path
    ((2, 3, 17, 17), 8, (5, 5), dict(strides=[2, 2], pads=[2, 1, 0, 2])),
    ((1, 3, 23, 23), 16, (7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ((2, 4, 13, 13), 6, (3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((2, 6, 13, 17), 9, (3, 3), dict(group=3, pads=[1, 0, 1, 0])),
    ((2, 6, 13, 13), 6, (3, 3), dict(group=6, pads=[1, 1, 1, 1], strides=[2, 2])),  # depthwise
    ((1, 5, 15, 15), 10, (5, 5), dict(group=5, pads=[2, 2, 2, 2])),  # depthwise x2
    ((2, 3, 13, 13), 4, (3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((2, 3, 14, 14), 4, (4, 4), dict(auto_pad="SAME_LOWER", strides=[3, 3])),
    ((2, 3, 13, 13), 4, (3, 2), dict(auto_pad="VALID", strides=[2, 1])),
    ((2, 3, 17), 5, (3,), dict(pads=[2, 1], strides=[2])),  # 1-D
    ((1, 2, 7, 9, 8), 3, (3, 3, 3), dict(pads=[1, 0, 1, 1, 1, 0], strides=[1, 2, 1])),  # 3-D
    ((1, 32, 13, 13), 32, (3, 3), dict(pads=[1, 1, 1, 1])),  # wide enough for blocked kernels
    ((1, 32, 13, 13), 32, (3, 3), dict(group=32, pads=[1, 1, 1, 1], strides=[2, 2])),  # blocked depthwise
    ((1, 128, 9, 9), 24, (3, 3), dict(pads=[1, 1, 1, 1])),  # wide: oneDNN's own (channels-last) layout
    # Maps one pixel wide under kernels one wide (Conv1D as tf2onnx writes it):
    # oneDNN is handed them as [N, C, 1, L]. Pads, strides and dilations along
    # the length; a stride and pad along the width that still leave it 1 wide.
    ((2, 20, 37, 1), 24, (5, 1), dict(pads=[2, 0, 1, 0])),
    ((1, 3, 29, 1), 5, (3, 1), dict(strides=[2, 1], dilations=[2, 1])),
    ((1, 128, 19, 1), 24, (3, 1), dict(pads=[1, 0, 1, 0])),
    ((1, 8, 15, 1), 8, (3, 1), dict(strides=[1, 2], pads=[1, 0, 1, 1])),
    ((1, 16, 21, 1), 16, (3, 1), dict(group=16, pads=[1, 0, 1, 0])),  # depthwise
]


def conv_model(x_shape, w, b, attrs, const_w=True, domain="", residual_shape=None, act_attrs=None):
    ins = ["x", "w", "b" if b is not None else ""]
    inputs = [("x", np.float32 if w.dtype == np.float32 else w.dtype, list(x_shape))]
    inits = []
    if const_w:
        inits.append(("w", w))
    else:
        inputs.append(("w", w.dtype, list(w.shape)))
    if b is not None:
        inits.append(("b", b))
    if residual_shape is not None:
        ins.append("r")
        inputs.append(("r", w.dtype, list(residual_shape)))
    while ins and ins[-1] == "":
        ins.pop()
    node = helper.make_node("Conv", ins, ["y"], domain=domain, **attrs, **(act_attrs or {}))
    model = make_model([node], inputs, [("y", w.dtype, None)], inits)
    return with_twinfer_opset(model) if domain else model


def conv_weights(rng, x_shape, m, kernel, attrs, dtype=np.float32):
    group = attrs.get("group", 1)
    fan_in = x_shape[1] // group * int(np.prod(kernel))
    w = randn(rng, m, x_shape[1] // group, *kernel, scale=1 / np.sqrt(fan_in), dtype=dtype)
    b = randn(rng, m, dtype=dtype)
    return w, b


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("bias", [True, False])
def test_conv_matches_onnxruntime(rng, case, bias):
    x_shape, m, kernel, attrs = CONV_CASES[case]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    model = conv_model(x_shape, w, b if bias else None, dict(attrs, kernel_shape=list(kernel)))
    feeds = {"x": randn(rng, *x_shape)}
    assert_close(run_twinfer(model, feeds)[0], run_ort(model, feeds)[0], **F32, what=f"case {case}")


@pytest.mark.parametrize("case", [0, 3, 6, 7, 12])
def test_conv_runtime_weights(rng, case):
    x_shape, m, kernel, attrs = CONV_CASES[case]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    model = conv_model(x_shape, w, b, attrs, const_w=False)
    feeds = {"x": randn(rng, *x_shape), "w": w}
    assert_close(run_twinfer(model, feeds)[0], run_ort(model, feeds)[0], **F32)


@pytest.mark.parametrize("case", [0, 6, 12, 13])
def test_conv_float64_reference_kernel(rng, case):
    x_shape, m, kernel, attrs = CONV_CASES[case]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs, dtype=np.float64)
    model = conv_model(x_shape, w, b, attrs)
    feeds = {"x": randn(rng, *x_shape, dtype=np.float64)}
    assert_close(run_twinfer(model, feeds)[0], run_reference(model, feeds)[0], **F64)


@pytest.mark.parametrize("threads", [1, 2])
def test_conv_thread_budgets(rng, threads):
    # Primitives are built per thread budget; every budget must compute the same.
    x_shape, m, kernel, attrs = CONV_CASES[14]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    model = conv_model(x_shape, w, b, attrs)
    feeds = {"x": randn(rng, *x_shape)}
    assert_close(run_twinfer(model, feeds, num_threads=threads)[0], run_ort(model, feeds)[0], **F32)


# (x shape, out channels, kernel, attrs): covers the channel-blocked layout
# (3x3, depthwise), the plain one (1x1 on 21x21) and oneDNN's own choice
# (depthwise on 6 channels, 3x3 on 128), which handle the residual differently.
FUSED_CONV_CASES = [
    ((2, 8, 13, 13), 8, (3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 8, 21, 21), 16, (1, 1), {}),
    ((2, 6, 11, 11), 6, (3, 3), dict(group=6, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 32, 9, 9), 32, (3, 3), dict(group=32, pads=[1, 1, 1, 1])),
    ((1, 128, 7, 7), 16, (3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 16, 23, 1), 16, (3, 1), dict(pads=[1, 0, 1, 0])),  # one pixel wide, as [N, C, 1, L]
]


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("case", range(len(FUSED_CONV_CASES)))
def test_fused_conv(rng, act, residual, case):
    x_shape, m, kernel, attrs = FUSED_CONV_CASES[case]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    plain = conv_model(x_shape, w, b, attrs)
    x = randn(rng, *x_shape)
    conv = run_ort(plain, {"x": x})[0]
    feeds = {"x": x}
    if residual:
        feeds["r"] = randn(rng, *conv.shape)
        conv = conv + feeds["r"]
    fused = conv_model(x_shape, w, b, attrs, domain=DOMAIN, residual_shape=conv.shape if residual else None,
                       act_attrs=fused_attrs(act))
    expected = ACTIVATIONS[act][1](conv).astype(np.float32)
    assert_close(run_twinfer(fused, feeds)[0], expected, **F32, what=f"{act} residual={residual}")


def test_fused_conv_gelu_tanh_form(rng):
    x_shape, m, kernel, attrs = FUSED_CONV_CASES[0]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    x = randn(rng, *x_shape)
    conv = run_ort(conv_model(x_shape, w, b, attrs), {"x": x})[0]
    fused = conv_model(x_shape, w, b, attrs, domain=DOMAIN,
                       act_attrs={"activation": "Gelu", "activation_params": [1.0]})
    expected = 0.5 * conv * (1 + np.tanh(np.sqrt(2 / np.pi) * (conv + 0.044715 * conv**3)))
    assert_close(run_twinfer(fused, {"x": x})[0], expected.astype(np.float32), **F32)


def test_conv1d_stack_written_one_pixel_wide(rng, device):
    # A Keras Conv1D stack as tf2onnx writes it ([N, C, L, 1] maps, kx1
    # kernels; magika's is one): optimised as a model (the blocked layout
    # between the convolutions, Relu and the residual Add fused), each
    # convolution handed to oneDNN as [N, C, 1, L], against onnxruntime.
    import twinfer

    n, c, length = 3, 32, 45
    nodes, inits = [], []
    prev = "x"
    for i, (k, pad) in enumerate([(5, 2), (3, 1), (3, 1)]):
        w, b = conv_weights(rng, (n, c, length, 1), c, (k, 1), {})
        inits += [(f"w{i}", w), (f"b{i}", b)]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, 1],
                                      pads=[pad, 0, pad, 0]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("Add", [prev, "r0"], ["y"]))
    model = make_model(nodes, [("x", np.float32, [n, c, length, 1])], [("y", np.float32, None)], inits)
    feeds = {"x": randn(rng, n, c, length, 1)}
    engine = twinfer.load(model, device=device)
    assert sum("Conv" in row.op for row in engine.kernel_report()) == 3
    assert_close(engine.run(feeds)["y"].numpy(), run_ort(model, feeds)[0], **F32)


# ----------------------------------------------------------------------------- Gemm


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (1.5, 0.0)])
@pytest.mark.parametrize("c_shape", [None, "N", "1N", "MN", "M1", "scalar"])
@pytest.mark.parametrize("const", [True, False])
def test_gemm(rng, trans_a, trans_b, alpha, beta, c_shape, const):
    M, K, N = 5, 7, 3
    a = randn(rng, *((K, M) if trans_a else (M, K)))
    b = randn(rng, *((N, K) if trans_b else (K, N)))
    cs = {None: None, "N": (N,), "1N": (1, N), "MN": (M, N), "M1": (M, 1), "scalar": ()}[c_shape]
    ins = ["a", "b"] + (["c"] if cs is not None else [])
    node = helper.make_node("Gemm", ins, ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    inputs, inits, feeds = [("a", np.float32, list(a.shape))], [], {"a": a}
    tensors = {"b": b}
    if cs is not None:
        tensors["c"] = randn(rng, *cs)
    for name, t in tensors.items():
        if const:
            inits.append((name, t))
        else:
            inputs.append((name, np.float32, list(t.shape)))
            feeds[name] = t
    model = make_model([node], inputs, [("y", np.float32, None)], inits)
    assert_close(run_twinfer(model, feeds)[0], run_ort(model, feeds)[0], **F32)


@pytest.mark.parametrize("act", ["", "Relu", "Gelu", "Clip", "Tanh"])
@pytest.mark.parametrize("const", [True, False])
def test_fused_gemm(rng, act, const):
    M, K, N = 9, 13, 11
    a, b, c = randn(rng, M, K), randn(rng, N, K), randn(rng, N)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], domain=DOMAIN, transB=1, alpha=0.7, beta=1.3,
                            **fused_attrs(act))
    inputs, inits, feeds = [("a", np.float32, [M, K])], [], {"a": a}
    for name, t in (("b", b), ("c", c)):
        if const:
            inits.append((name, t))
        else:
            inputs.append((name, np.float32, list(t.shape)))
            feeds[name] = t
    model = with_twinfer_opset(make_model([node], inputs, [("y", np.float32, None)], inits))
    expected = ACTIVATIONS[act][1](0.7 * (a @ b.T) + 1.3 * c)
    assert_close(run_twinfer(model, feeds)[0], expected.astype(np.float32), **F32)


# ----------------------------------------------------------------------------- MatMul

MATMUL_SHAPES = [
    ((7,), (7,)),
    ((3, 7), (7,)),
    ((7,), (7, 4)),
    ((7,), (3, 7, 4)),
    ((5, 7), (7, 4)),
    ((2, 3, 5, 7), (7, 4)),  # batch folded into M against a 2-D B
    ((4, 5, 7), (1, 7, 3)),  # B batch of 1: folded as well
    ((2, 1, 5, 7), (3, 7, 4)),  # batch broadcasting on both sides
    ((2, 3, 5, 7), (2, 3, 7, 4)),
    ((1, 3, 13, 8), (1, 3, 8, 13)),  # attention-like
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul(rng, shapes, const_b):
    sa, sb = shapes
    a, b = randn(rng, *sa), randn(rng, *sb)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    if const_b:
        model = make_model([node], [("a", np.float32, list(sa))], [("y", np.float32, None)], [("b", b)])
        feeds = {"a": a}
    else:
        model = make_model([node], [("a", np.float32, list(sa)), ("b", np.float32, list(sb))],
                           [("y", np.float32, None)])
        feeds = {"a": a, "b": b}
    out = run_twinfer(model, feeds)[0]
    assert_close(out, np.matmul(a, b), **F32)
    assert_close(out, run_ort(model, feeds)[0], **F32)


@pytest.mark.parametrize("shapes", [((2, 1, 5, 7), (3, 7, 4)), ((7,), (7, 4))], ids=str)
def test_matmul_float64_reference_kernel(rng, shapes):
    sa, sb = shapes
    a, b = randn(rng, *sa, dtype=np.float64), randn(rng, *sb, dtype=np.float64)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", np.float64, list(sa)), ("b", np.float64, list(sb))], [("y", np.float64, None)])
    assert_close(run_twinfer(model, {"a": a, "b": b})[0], np.matmul(a, b), **F64)


@pytest.mark.parametrize("act", ["", "Relu", "Gelu", "Silu", "HardSwish"])
@pytest.mark.parametrize("shapes", [((2, 13, 16), (16, 24)), ((2, 1, 5, 7), (3, 7, 4))], ids=str)
@pytest.mark.parametrize("const", [True, False])
def test_fused_matmul(rng, act, shapes, const):
    sa, sb = shapes
    a, b, bias = randn(rng, *sa), randn(rng, *sb), randn(rng, sb[-1])
    node = helper.make_node("MatMul", ["a", "b", "bias"], ["y"], domain=DOMAIN, **fused_attrs(act))
    inputs, inits, feeds = [("a", np.float32, list(sa))], [], {"a": a}
    for name, t in (("b", b), ("bias", bias)):
        if const:
            inits.append((name, t))
        else:
            inputs.append((name, np.float32, list(t.shape)))
            feeds[name] = t
    model = with_twinfer_opset(make_model([node], inputs, [("y", np.float32, None)], inits))
    expected = ACTIVATIONS[act][1](np.matmul(a, b) + bias)
    assert_close(run_twinfer(model, feeds)[0], expected.astype(np.float32), **F32)


# ----------------------------------------------------------------------------- BatchNormalization


@pytest.mark.parametrize("x_shape", [(2, 3, 13, 13), (3, 5), (2, 4, 7), (1, 3, 3, 5, 4)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm(rng, x_shape, dtype):
    c = x_shape[1]
    params = [randn(rng, c, dtype=dtype), randn(rng, c, dtype=dtype), randn(rng, c, dtype=dtype),
              (rng.random(c) + 0.5).astype(dtype)]
    names = ["scale", "bias", "mean", "var"]
    node = helper.make_node("BatchNormalization", ["x"] + names, ["y"], epsilon=1e-3)
    model = make_model([node], [("x", dtype, list(x_shape))], [("y", dtype, None)], list(zip(names, params)))
    feeds = {"x": randn(rng, *x_shape, dtype=dtype)}
    ref = run_ort(model, feeds)[0] if dtype == np.float32 else run_reference(model, feeds)[0]
    assert_close(run_twinfer(model, feeds)[0], ref, **(F32 if dtype == np.float32 else F64))


def test_batchnorm_training_mode_is_rejected(rng):
    c = 3
    names = ["scale", "bias", "mean", "var"]
    inits = [(n, np.ones(c, np.float32)) for n in names]
    node = helper.make_node("BatchNormalization", ["x"] + names, ["y"], training_mode=1)
    model = make_model([node], [("x", np.float32, [2, c, 4, 4])], [("y", np.float32, None)], inits)
    with pytest.raises(twinfer_error(), match="training_mode"):
        run_twinfer(model, {"x": randn(rng, 2, c, 4, 4)})


# ----------------------------------------------------------------------------- pooling

POOL_CASES = [
    ((2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 17, 13), dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1)),
    ((2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 2, 1], ceil_mode=1)),
    ((1, 2, 13, 13), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((2, 3, 14, 14), dict(kernel_shape=[4, 4], strides=[3, 3], auto_pad="SAME_LOWER")),
    ((2, 3, 17), dict(kernel_shape=[3], strides=[2], pads=[1, 2])),
    ((1, 2, 7, 9, 8), dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0])),
    ((2, 3, 6), dict(kernel_shape=[2], strides=[2], pads=[1, 0], ceil_mode=1)),
    ((2, 3, 16, 15), dict(kernel_shape=[3, 3], strides=[2, 2])),  # the last windows end before x does
    ((2, 3, 17, 16), dict(kernel_shape=[2, 3], strides=[3, 2], pads=[1, 0, 0, 0])),
]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_windows_ending_before_the_input_run_on_onednn(rng, op):
    # A 3x3 stride-2 window over an even size without padding leaves the last
    # row and column unread: oneDNN's floored output size gives the same
    # windows with no right padding (before: pool.cc's loop, 30x slower for
    # MaxPool on [8, 64, 56, 56]).
    model = make_model([helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                       [("x", np.float32, [2, 5, 16, 14])], [("y", np.float32, None)])
    feeds = {"x": randn(rng, 2, 5, 16, 14)}
    assert_close(run_twinfer(model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-6, atol=1e-6)
    import twinfer

    engine = twinfer.load(model.SerializeToString())
    assert [r.kernel for r in engine.kernel_report({"x": (2, 5, 16, 14)})] == ["onednn pooling"]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("indices", [False, True])  # Indices: the loop kernel; without: oneDNN
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxpool(rng, case, indices, dtype):
    x_shape, attrs = POOL_CASES[case]
    outs = ["y", "i"] if indices else ["y"]
    model = make_model([helper.make_node("MaxPool", ["x"], outs, **attrs)], [("x", dtype, list(x_shape))],
                       [("y", dtype, None), ("i", np.int64, None)][: len(outs)])
    feeds = {"x": randn(rng, *x_shape, dtype=dtype)}
    got, ref = run_twinfer(model, feeds), run_ort(model, feeds)
    assert_close(got[0], ref[0], what="values")
    if indices:
        assert_close(got[1], ref[1], what="indices")


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_averagepool(rng, case, include_pad, dtype):
    # float32 runs on oneDNN except where count_include_pad meets a ceil_mode
    # window past the padding (cases 1, 2, 8): pool.cc's float32 loop; float64
    # takes pool.cc's generic loop.
    x_shape, attrs = POOL_CASES[case]
    opset = 19 if "dilations" in attrs else 17  # AveragePool takes dilations from opset 19
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=include_pad, **attrs)
    model = make_model([node], [("x", dtype, list(x_shape))], [("y", dtype, None)], opset=opset)
    feeds = {"x": randn(rng, *x_shape, dtype=dtype)}
    # onnxruntime has no float64 AveragePool: the ONNX reference evaluator checks those.
    ref = run_ort(model, feeds) if dtype == np.float32 else run_reference(model, feeds)
    assert_close(run_twinfer(model, feeds)[0], ref[0], rtol=1e-5, atol=1e-6)


def test_averagepool_dilations_opset19(rng):
    x_shape = (1, 2, 13, 13)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", np.float32, list(x_shape))], [("y", np.float32, None)], opset=19)
    feeds = {"x": randn(rng, *x_shape)}
    assert_close(run_twinfer(model, feeds)[0], run_reference(model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("x_shape", [(2, 5, 13, 11), (2, 3, 17), (1, 4, 3, 5, 7)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_pool(rng, op, x_shape, dtype):
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", dtype, list(x_shape))], [("y", dtype, None)])
    x = randn(rng, *x_shape, dtype=dtype)
    axes = tuple(range(2, len(x_shape)))
    expected = x.mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else x.max(axis=axes, keepdims=True)
    assert_close(run_twinfer(model, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- 16-bit pooling and LayerNormalization

# float16 / bfloat16 compute in float and round once, as the CUDA kernels do
# (the simulated device runs these CPU kernels in the GPU's 16-bit plans).
# The reference is onnxruntime in float32 on the same rounded values; a result
# may differ from it by the final rounding (a sum landing near a tie can round
# either way): rtol 1.5 units of the type's epsilon.
HALF = {"float16": (np.float16, 1.5 * 2.0**-10), "bfloat16": (ml_dtypes.bfloat16, 1.5 * 2.0**-7)}


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("half", list(HALF))
def test_pools_16bit(rng, case, op, half):
    dtype, rtol = HALF[half]
    x_shape, attrs = POOL_CASES[case]
    opset = 19 if "dilations" in attrs else 17
    variants = [{"count_include_pad": 0}, {"count_include_pad": 1}] if op == "AveragePool" else [{}]
    for extra in variants:
        outs = ["y", "i"] if op == "MaxPool" else ["y"]  # MaxPool with Indices: the same loop kernel

        def make(t):
            node = helper.make_node(op, ["x"], outs, **attrs, **extra)
            return make_model([node], [("x", t, list(x_shape))],
                              [("y", t, None), ("i", np.int64, None)][: len(outs)], opset=opset)

        model, wide = make(dtype), make(np.float32)
        x = randn(rng, *x_shape, scale=3.0).astype(dtype)
        got = run_twinfer(model, {"x": x})
        ref = run_ort(wide, {"x": x.astype(np.float32)})
        assert got[0].dtype == dtype
        if op == "MaxPool":  # a maximum of representable values is exact
            np.testing.assert_array_equal(got[0].astype(np.float32), ref[0])
            np.testing.assert_array_equal(got[1], ref[1])
        else:
            assert_close(got[0].astype(np.float32), ref[0], rtol=rtol, atol=1e-6, what=str(extra))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("x_shape", [(2, 5, 13, 11), (2, 3, 17), (1, 4, 3, 5, 7), (3, 2, 1, 1)], ids=str)
@pytest.mark.parametrize("half", list(HALF))
def test_global_pools_16bit(rng, op, x_shape, half):
    dtype, rtol = HALF[half]
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", dtype, list(x_shape))], [("y", dtype, None)])
    x = randn(rng, *x_shape, scale=3.0).astype(dtype)
    x.flat[5] = np.nan  # the maximum and the mean of a plane holding NaN are NaN
    wide = x.astype(np.float64)
    axes = tuple(range(2, len(x_shape)))
    expected = wide.mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else wide.max(axis=axes, keepdims=True)
    got = run_twinfer(model, {"x": x})[0]
    assert got.dtype == dtype
    assert_close(got.astype(np.float64), expected, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("x_shape,axis", [((2, 13, 24), -1), ((2, 5, 7), 1), ((3, 17), -1), ((2, 3, 5, 7), -2),
                                          ((2, 7, 771), -1)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("half", list(HALF))
def test_layernorm_16bit(rng, x_shape, axis, bias, half):
    # Statistics in float (Mean / InvStdDev written as float32, the
    # stash_type), the affine map in float, y rounded once.
    dtype, rtol = HALF[half]
    norm_shape = x_shape[axis:]
    scale = randn(rng, *norm_shape).astype(dtype)
    b = randn(rng, *norm_shape).astype(dtype)

    def make(t):
        ins = ["x", "scale"] + (["bias"] if bias else [])
        node = helper.make_node("LayerNormalization", ins, ["y", "mean", "inv"], axis=axis, epsilon=1e-4)
        inits = [("scale", scale.astype(t))] + ([("bias", b.astype(t))] if bias else [])
        return make_model([node], [("x", t, list(x_shape))],
                          [("y", t, None), ("mean", np.float32, None), ("inv", np.float32, None)], inits)

    model, wide = make(dtype), make(np.float32)
    x = (randn(rng, *x_shape, scale=2.0) + 1.0).astype(dtype)
    got = run_twinfer(model, {"x": x})
    ref = run_ort(wide, {"x": x.astype(np.float32)})
    assert got[0].dtype == dtype
    assert_close(got[0].astype(np.float32), ref[0], rtol=rtol, atol=1e-5, what="y")
    for g, r, name in zip(got[1:], ref[1:], ["mean", "inv"]):
        assert_close(g, r, rtol=1e-5, atol=1e-5, what=name)


# ----------------------------------------------------------------------------- Softmax / LogSoftmax


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 0), (13, 1), (13, 2), (11, 1), (11, 2), (11, 0), (11, -1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax(rng, op, opset, axis, dtype):
    x_shape = (3, 5, 7)
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    model = make_model([node], [("x", dtype, list(x_shape))], [("y", dtype, None)], opset=opset)
    x = randn(rng, *x_shape, scale=3.0, dtype=dtype)
    # NumPy reference of both semantics: opset 13 reduces one axis, older
    # opsets flatten to 2-D at `axis` and reduce each row.
    if opset >= 13:
        shifted = x - x.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        expected = shifted - lse
    else:
        a = axis % len(x_shape)
        flat = x.reshape(int(np.prod(x_shape[:a], dtype=np.int64)), -1)
        shifted = flat - flat.max(axis=1, keepdims=True)
        expected = (shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).reshape(x_shape)
    if op == "Softmax":
        expected = np.exp(expected)
    # oneDNN's vectorised exp/log are accurate to a few ulp of the shifted
    # inputs (|x - max| up to ~20), hence an absolute 1e-5 for float32.
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else F64
    assert_close(run_twinfer(model, {"x": x})[0], expected.astype(dtype), **tol)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_float16_matches_onnxruntime(rng, op):
    # float16 computes in float32 and rounds once; onnxruntime does the same.
    node = helper.make_node(op, ["x"], ["y"], axis=-1)
    model = make_model([node], [("x", np.float16, [3, 5, 37])], [("y", np.float16, None)], opset=13)
    x = randn(rng, 3, 5, 37, scale=3.0).astype(np.float16)
    got = run_twinfer(model, {"x": x})[0]
    assert got.dtype == np.float16
    assert_close(got.astype(np.float32), run_ort(model, {"x": x})[0].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_softmax_bad_axis_is_rejected(rng):
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=3)], [("x", np.float32, [2, 3, 4])],
                       [("y", np.float32, None)], opset=13)
    with pytest.raises(twinfer_error(), match="axis"):
        run_twinfer(model, {"x": randn(rng, 2, 3, 4)})


# ----------------------------------------------------------------------------- LayerNormalization / InstanceNormalization


@pytest.mark.parametrize("x_shape,axis", [((2, 13, 24), -1), ((2, 5, 7), 1), ((3, 17), -1), ((2, 3, 5, 7), -2)],
                         ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("stats", [False, True])
def test_layernorm(rng, x_shape, axis, bias, stats):
    norm_shape = x_shape[axis:]
    ins = ["x", "scale"] + (["bias"] if bias else [])
    outs = ["y"] + (["mean", "inv"] if stats else [])
    node = helper.make_node("LayerNormalization", ins, outs, axis=axis, epsilon=1e-4)
    inits = [("scale", randn(rng, *norm_shape))] + ([("bias", randn(rng, *norm_shape))] if bias else [])
    model = make_model([node], [("x", np.float32, list(x_shape))], [(o, np.float32, None) for o in outs], inits)
    feeds = {"x": randn(rng, *x_shape, scale=2.0) + 1.0}
    got, ref = run_twinfer(model, feeds), run_ort(model, feeds)
    for g, r, name in zip(got, ref, outs):
        assert_close(g, r, rtol=1e-5, atol=1e-5, what=name)


def test_layernorm_float64(rng):
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)
    inits = [("scale", randn(rng, 9, dtype=np.float64)), ("bias", randn(rng, 9, dtype=np.float64))]
    model = make_model([node], [("x", np.float64, [4, 9])], [("y", np.float64, None)], inits)
    feeds = {"x": randn(rng, 4, 9, dtype=np.float64)}
    assert_close(run_twinfer(model, feeds)[0], run_reference(model, feeds)[0], **F64)


@pytest.mark.parametrize("x_shape", [(2, 3, 13, 11), (2, 5, 17), (1, 2, 3, 5, 7)], ids=str)
def test_instancenorm(rng, x_shape):
    c = x_shape[1]
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    model = make_model([node], [("x", np.float32, list(x_shape))], [("y", np.float32, None)],
                       [("s", randn(rng, c)), ("b", randn(rng, c))])
    feeds = {"x": randn(rng, *x_shape) * 3 + 1}
    assert_close(run_twinfer(model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- bad input


def _conv_node_model(rng, **attrs):
    w = randn(rng, 4, 3, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    return make_model([node], [("x", np.float32, [1, 3, 7, 7])], [("y", np.float32, None)], [("w", w)])


@pytest.mark.parametrize("attrs,match", [
    (dict(group=2), "group|channels"),
    (dict(auto_pad="SAME_MIDDLE"), "auto_pad"),
    (dict(strides=[1, 1, 1]), "strides"),
    (dict(kernel_shape=[5, 5]), "kernel_shape"),
    (dict(dilations=[0, 1]), "dilations"),
])
def test_conv_bad_attributes(rng, attrs, match):
    with pytest.raises(twinfer_error(), match=match):
        run_twinfer(_conv_node_model(rng, **attrs), {"x": randn(rng, 1, 3, 7, 7)})


@pytest.mark.parametrize("attrs,match", [
    (dict(activation="Swishy"), "Swishy"),
    (dict(activation="Relu", activation_params=[1.0]), "activation_params"),
    (dict(activation="Clip", activation_params=[0.0, 1.0, 2.0]), "activation_params"),
])
def test_fused_bad_activation(rng, attrs, match):
    w = randn(rng, 4, 3, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], domain=DOMAIN, **attrs)
    model = with_twinfer_opset(make_model([node], [("x", np.float32, [1, 3, 7, 7])], [("y", np.float32, None)],
                                          [("w", w)]))
    with pytest.raises(twinfer_error(), match=match):
        run_twinfer(model, {"x": randn(rng, 1, 3, 7, 7)})


def test_gemm_inner_dim_mismatch(rng):
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)
    model = make_model([node], [("a", np.float32, [3, 5])], [("y", np.float32, None)], [("b", randn(rng, 4, 6))])
    with pytest.raises(twinfer_error(), match="inner"):
        run_twinfer(model, {"a": randn(rng, 3, 5)})


def test_matmul_batch_mismatch(rng):
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", np.float32, [2, 3, 5]), ("b", np.float32, [3, 5, 4])], [("y", np.float32, None)])
    with pytest.raises(twinfer_error(), match="broadcast"):
        run_twinfer(model, {"a": randn(rng, 2, 3, 5), "b": randn(rng, 3, 5, 4)})


@pytest.mark.parametrize("x_shape,kernel,strides", [([2, 3, 5, 7], [2, 3], [1, 2]), ([1, 2, 9], [3], [2]),
                                                     ([1, 2, 4, 5, 3], [2, 2, 2], [1, 1, 1])])
def test_maxpool_column_major_indices(rng, x_shape, kernel, strides):
    # storage_order=1: Indices count the first spatial dim fastest, as onnxruntime does.
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=strides, storage_order=1)
    model = make_model([node], [("x", np.float32, x_shape)], [("y", np.float32, None), ("i", np.int64, None)])
    feeds = {"x": randn(rng, *x_shape)}
    for got, want in zip(run_twinfer(model, feeds), run_ort(model, feeds)):
        assert_close(got, want)


@pytest.mark.parametrize("case", [0, 6, 12])
def test_conv_half_reference_kernel(rng, case):
    # The reference kernel computes 16-bit floats in float32 and rounds once:
    # within a half-precision step of the float32 result on the same values.
    x_shape, m, kernel, attrs = CONV_CASES[case]
    dtype = np.float16
    w, b = conv_weights(rng, x_shape, m, kernel, attrs, dtype=dtype)
    model = conv_model(x_shape, w, b, attrs)
    x = randn(rng, *x_shape).astype(dtype)
    got = run_twinfer(model, {"x": x})[0]
    wide = conv_model(x_shape, w.astype(np.float32), b.astype(np.float32), attrs)
    want = run_ort(wide, {"x": x.astype(np.float32)})[0]
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


# ----------------------------------------------------------------------------- concurrency


def test_concurrent_runs_share_kernels(rng):
    # One engine, several Python threads at once: the kernels' primitives,
    # packed weights and per-thread-budget variants are shared; results must
    # match a sequential reference for every caller.
    import threading

    import twinfer

    x_shape, m, kernel, attrs = CONV_CASES[14]
    w, b = conv_weights(rng, x_shape, m, kernel, attrs)
    model = conv_model(x_shape, w, b, attrs)
    engine = twinfer.load(model, device="cpu", num_threads=1)
    inputs = [randn(rng, *x_shape) for _ in range(4)]
    expected = [run_ort(model, {"x": x})[0] for x in inputs]
    errors = []

    def worker(i):
        try:
            for _ in range(5):
                assert_close(engine.run({"x": inputs[i]})["y"].numpy(), expected[i], **F32)
        except Exception as e:  # reported below: pytest does not see thread failures
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def _softmax_checked(op, x, axis, threads, kernel):
    """Runs op over `axis` of float32 x on the named kernel; checks it against
    NumPy's float64 definition and onnxruntime (NaN where they have NaN, the
    rest within 1e-5), and returns twinfer's result."""
    import onnxruntime as ort
    from onnx import TensorProto as TP

    import twinfer

    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "g",
                                            [vi("x", TP.FLOAT, list(x.shape))], [vi("y", TP.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    e = twinfer.load(m, num_threads=threads)
    assert [r.kernel for r in e.kernel_report({"x": x})] == [kernel]
    got = e.run({"x": x})["y"].numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        x64 = x.astype(np.float64)
        shifted = x64 - x64.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        want = shifted - lse if op == "LogSoftmax" else np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)
    ort_y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ort_y))
    ok = ~np.isnan(want)
    # LogSoftmax near 0 is -log(sum), whose float32 sum carries an ulp of 1.
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-6 if op == "LogSoftmax" else 1e-7)
    return got


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("length", [1, 15, 16, 17, 197, 1000])
@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_rows_of_any_length_with_special_values(rng, op, length, threads):
    # The vectorised rows (ops/nn/softmax_rows.h): 16 lanes and a tail, so
    # lengths around 16; scores 30 apart (exp underflows far below -104);
    # masked (-inf) elements exactly 0 (LogSoftmax: -inf); a row all -inf, a
    # row holding NaN and one holding +inf NaN throughout, as NumPy's float64
    # definition and onnxruntime give.
    x = (rng.standard_normal((7, 3, length)) * 30).astype(np.float32)
    x[1, :, ::3] = -np.inf
    x[2, 1] = -np.inf
    x[3, 0, length // 2] = np.nan
    x[4, 2, length - 1] = np.inf
    got = _softmax_checked(op, x, -1, threads, "vectorised float32 rows")
    if length > 1:
        assert (got[1, :, ::3] == (-np.inf if op == "LogSoftmax" else 0)).all()  # masked: exactly nothing
        assert np.isnan(got[2, 1]).all() and np.isnan(got[3, 0]).all() and np.isnan(got[4, 2]).all()


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("length, inner", [(1, 5), (17, 3), (40, 64), (9, 65), (5, 300)])
@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_down_columns_with_special_values(rng, op, length, inner, threads):
    # A non-innermost axis ([N, classes, positions]): blocks of 64 columns in
    # tasks of 256 (softmax_rows.h's softmax_columns). The same special
    # values as the rows, along the axis: masked entries exactly 0 (-inf),
    # columns all -inf, holding NaN or +inf NaN throughout.
    x = (rng.standard_normal((4, length, inner)) * 30).astype(np.float32)
    x[1, ::3, :] = -np.inf
    x[2, :, 1] = -np.inf
    x[3, length // 2, 0] = np.nan
    x[3, length - 1, inner - 1] = np.inf
    got = _softmax_checked(op, x, 1, threads, "vectorised float32 columns")
    if length > 1:
        assert (got[1, ::3, :] == (-np.inf if op == "LogSoftmax" else 0)).all()
        assert np.isnan(got[2, :, 1]).all() and np.isnan(got[3, :, 0]).all() and np.isnan(got[3, :, inner - 1]).all()


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_of_a_row_holding_nan_is_nan(op, axis):
    # oneDNN's softmax gave NaN at the NaN and 0 (or -inf) elsewhere in the
    # row; onnxruntime, NumPy and the ONNX reference: the whole row NaN.
    import onnxruntime as ort
    from onnx import TensorProto as TP

    import twinfer

    x = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    x[1, 2] = np.nan
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "g",
                                            [vi("x", TP.FLOAT, [3, 5])], [vi("y", TP.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = twinfer.load(m).run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6)
