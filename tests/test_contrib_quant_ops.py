"""onnxruntime's quantized contrib ops (com.microsoft): the QOperator format of
its quantize_static (QLinearAdd, QGemm, QLinearConcat, ...) and the fused forms
of its dynamic quantization (DynamicQuantizeMatMul, MatMulIntegerToFloat).
twinfer rewrites each into DequantizeLinear -> float op -> QuantizeLinear
(graph/passes/expand_contrib_quant.cc); every case is checked against
onnxruntime on fresh random integers.

onnxruntime computes some of these with lookup tables or fixed-point
multipliers, so a value that falls within rounding of a half level may land one
level away: outputs may differ by one level on a few elements, never more."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import ort_quantized_model, run_ort

MS = "com.microsoft"
U8, S8 = TensorProto.UINT8, TensorProto.INT8
NP = {U8: np.uint8, S8: np.int8}


def _model(nodes, inputs, outputs, inits=None, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _ints(rng, shape, elem):
    info = np.iinfo(NP[elem])
    return rng.integers(info.min, info.max + 1, shape).astype(NP[elem])


def _zero(rng, elem):
    return np.array(rng.integers(100, 156) if elem == U8 else rng.integers(-20, 21), NP[elem])


def _scale(rng, lo=0.01, hi=0.05):
    """A scale in no simple ratio to the others: with 0.03 and 0.02, say,
    averages land on exact half levels, where one ulp decides the rounding."""
    return np.float32(rng.uniform(lo, hi))


def _check_levels(model, feeds, device="cpu", max_off_by_one=0.02):
    """Integer outputs within one level of onnxruntime's, on at most
    `max_off_by_one` of the elements; float outputs to 1e-5."""
    engine = twinfer.load(model, device=device)
    assert any("com.microsoft" in line for line in engine.stats()["passes"])
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, run_ort(model, feeds)):
        g = got[out.name].numpy()
        assert g.dtype == want.dtype and g.shape == want.shape, (out.name, g.dtype, g.shape, want.dtype, want.shape)
        if np.issubdtype(want.dtype, np.integer):
            diff = np.abs(g.astype(np.int32) - want.astype(np.int32))
            assert diff.max(initial=0) <= 1, (out.name, diff.max())
            assert (diff > 0).mean() <= max_off_by_one if diff.size else True, (out.name, (diff > 0).mean())
        else:
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5, err_msg=out.name)
    return engine


@pytest.mark.parametrize("device", ["cpu", "sim"])
@pytest.mark.parametrize("zs", [0, 1, 2, 129])
@pytest.mark.parametrize("one", ["constant", "input"])
def test_qlinear_add_on_half_levels_rounds_half_to_even(device, zs, one):
    """GELU's Erf(x) + 1 as quantize_static writes it: Erf on 1/127.5 (zero
    point 128), the 1 on 1/255, the sum on 2/255, so the sum is (x - 128) +
    127.5 output levels: every input is an exact half level. The definition
    rounds those half to even, as onnxruntime does. Summed in real units and
    then divided, float32 rounding put 40% of them one level low, and
    MiniLM's quantized GELUs amplified that to whole layers. onnxruntime adds
    the output zero point before rounding (QuantizeLinear after): an odd one
    moves every tie. With the 1 fed as an input the pattern becomes a QBinary
    with that zero point as its offset; as a constant it stays an Add."""
    s_erf, s_one, s_sum = np.float32(1 / 127.5), np.float32(1 / 255), np.float32(2 / 255)
    inits = {"se": s_erf, "ze": np.uint8(128), "one": np.uint8(255), "so": s_one, "zo": np.uint8(0), "ss": s_sum,
             "zs": np.uint8(zs)}
    inputs = [_vi("x", [256], U8)]
    feeds = {"x": np.arange(256, dtype=np.uint8)}
    if one == "input":
        feeds["one"] = np.full(256, inits.pop("one"), np.uint8)
        inputs.append(_vi("one", [256], U8))
    # y read by a Cast: QBinary does not write graph outputs itself.
    nodes = [helper.make_node("QLinearAdd", ["x", "se", "ze", "one", "so", "zo", "ss", "zs"], ["q"], domain=MS),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT32)]
    model = _model(nodes, inputs, [_vi("y", None, TensorProto.INT32)], inits)
    x = feeds["x"]
    engine = twinfer.load(model, device=device)
    got = engine.run(feeds)["y"].numpy()
    if one == "input":
        assert [r.op for r in engine.kernel_report({k: v.shape for k, v in feeds.items()})][0] == "com.twinfer::QBinary"
    exact = ((x.astype(np.float64) - 128) * np.float64(s_erf) + 255 * np.float64(s_one)) / np.float64(s_sum)
    np.testing.assert_array_equal(got, np.clip(np.round(exact + zs), 0, 255).astype(np.int32))
    np.testing.assert_array_equal(got, run_ort(model, feeds)[0])


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("elem", [U8, S8])
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_qlinear_binary_broadcasts(rng, op, elem, device):
    inits = {"as": np.float32(rng.uniform(0.01, 0.05)), "az": _zero(rng, elem),
             "bs": np.float32(rng.uniform(0.01, 0.05)), "bz": _zero(rng, elem),
             "cs": np.float32(rng.uniform(0.02, 0.08) * (4 if op == "QLinearMul" else 1)), "cz": _zero(rng, elem)}
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"], domain=MS)
    model = _model([node], [_vi("a", [2, 5, 7], elem), _vi("b", [5, 1], elem)], [_vi("c", None, elem)], inits)
    _check_levels(model, {"a": _ints(rng, (2, 5, 7), elem), "b": _ints(rng, (5, 1), elem)}, device)


def test_qlinear_add_without_output_zero_point_keeps_int8(rng):
    """The output's zero point left out: 0 of the inputs' type, so the output
    stays int8 (a plain QuantizeLinear without one would make uint8)."""
    inits = {"as": np.float32(0.02), "az": np.int8(3), "bs": np.float32(0.03), "bz": np.int8(-4),
             "cs": np.float32(0.05)}
    node = helper.make_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs"], ["c"], domain=MS)
    model = _model([node], [_vi("a", [3, 4], S8), _vi("b", [3, 4], S8)], [_vi("c", None, S8)], inits)
    _check_levels(model, {"a": _ints(rng, (3, 4), S8), "b": _ints(rng, (3, 4), S8)})


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2})])
@pytest.mark.parametrize("elem", [U8, S8])
def test_qlinear_activations(rng, op, attrs, elem):
    inits = {"xs": np.float32(0.05), "xz": _zero(rng, elem), "ys": np.float32(1 / 256 if op == "QLinearSigmoid" else 0.04),
             "yz": np.array(0 if elem == U8 or op == "QLinearLeakyRelu" else -128, NP[elem])}
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    model = _model([node], [_vi("x", [4, 9], elem)], [_vi("y", None, elem)], inits)
    _check_levels(model, {"x": _ints(rng, (4, 9), elem)})


@pytest.mark.parametrize("axis,meaning", [(-1, 13), (1, 13), (1, 12), (-1, 12)])
@pytest.mark.parametrize("elem", [U8, S8])
def test_qlinear_softmax_both_meanings(rng, axis, meaning, elem):
    """Before opset 13 Softmax normalises over every dim from `axis` on."""
    inits = {"xs": np.float32(0.1), "xz": _zero(rng, elem), "ys": np.float32(1 / 256),
             "yz": np.array(0 if elem == U8 else -128, NP[elem])}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, axis=axis,
                            opset=meaning)
    model = _model([node], [_vi("x", [2, 3, 6], elem)], [_vi("y", None, elem)], inits)
    _check_levels(model, {"x": _ints(rng, (2, 3, 6), elem)})


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("global_pool", [False, True])
def test_qlinear_average_pools(rng, channels_last, global_pool):
    elem = U8
    shape = (2, 6, 7, 3) if channels_last else (2, 3, 6, 7)
    inits = {"xs": _scale(rng), "xz": _zero(rng, elem), "ys": _scale(rng), "yz": _zero(rng, elem)}
    attrs = {"channels_last": channels_last}
    if not global_pool:
        attrs.update(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=1)
    op = "QLinearGlobalAveragePool" if global_pool else "QLinearAveragePool"
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    model = _model([node], [_vi("x", list(shape), elem)], [_vi("y", None, elem)], inits)
    _check_levels(model, {"x": _ints(rng, shape, elem)})


@pytest.mark.parametrize("elem", [U8, S8])
def test_qlinear_concat_requantizes_each_part(rng, elem):
    inits = {"ys": np.float32(0.05), "yz": _zero(rng, elem)}
    ins, feeds, vis = ["ys", "yz"], {}, []
    for i, width in enumerate((3, 1, 4)):
        inits[f"s{i}"] = np.float32(rng.uniform(0.02, 0.08))
        inits[f"z{i}"] = _zero(rng, elem)
        ins += [f"x{i}", f"s{i}", f"z{i}"]
        vis.append(_vi(f"x{i}", [2, width, 5], elem))
        feeds[f"x{i}"] = _ints(rng, (2, width, 5), elem)
    node = helper.make_node("QLinearConcat", ins, ["y"], domain=MS, axis=1)
    _check_levels(_model([node], vis, [_vi("y", None, elem)], inits), feeds)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [13, 18])
def test_qlinear_reduce_mean(rng, keepdims, opset):
    """onnxruntime has no CPU kernel for it: checked against its documented
    formula, Quantize(ReduceMean(Dequantize(x))), in NumPy."""
    elem = U8
    inits = {"xs": _scale(rng), "xz": _zero(rng, elem), "ys": _scale(rng, 0.005, 0.01), "yz": _zero(rng, elem)}
    node = helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, axes=[1, -1],
                            keepdims=keepdims)
    model = _model([node], [_vi("x", [2, 5, 3, 4], elem)], [_vi("y", None, elem)], inits, opset=opset)
    x = _ints(rng, (2, 5, 3, 4), elem)
    mean = ((x.astype(np.float64) - inits["xz"]) * inits["xs"]).mean(axis=(1, 3), keepdims=bool(keepdims))
    want = np.clip(np.rint(mean / inits["ys"]) + inits["yz"], 0, 255)
    got = twinfer.load(model, device="cpu").run({"x": x})["y"].numpy()
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want).max() <= 1 and (got != want).mean() <= 0.05


def test_qlinear_where(rng):
    elem = S8
    inits = {"xs": np.float32(0.03), "xz": _zero(rng, elem), "ys": np.float32(0.05), "yz": _zero(rng, elem),
             "zs": np.float32(0.06), "zz": _zero(rng, elem)}
    node = helper.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], ["z"], domain=MS)
    model = _model([node], [_vi("c", [3, 1], TensorProto.BOOL), _vi("x", [3, 4], elem), _vi("y", [4], elem)],
                   [_vi("z", None, elem)], inits)
    _check_levels(model, {"c": rng.random((3, 1)) < 0.5, "x": _ints(rng, (3, 4), elem), "y": _ints(rng, (4,), elem)})


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 0, 1.0), (0, 1, 1.0), (1, 1, 0.5)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_qgemm(rng, trans_a, trans_b, alpha, per_column, quantized_out, device):
    m, k, n = 5, 12, 7
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    inits = {"as": np.float32(0.02), "az": np.uint8(rng.integers(110, 140)), "b": _ints(rng, b_shape, S8),
             "bs": (rng.uniform(0.01, 0.03, n) if per_column else rng.uniform(0.01, 0.03, ())).astype(np.float32),
             "bz": np.zeros(n if per_column else (), np.int8),
             "c": rng.integers(-2000, 2000, n).astype(np.int32)}
    ins = ["a", "as", "az", "b", "bs", "bz", "c"]
    out_elem = TensorProto.FLOAT
    if quantized_out:
        inits.update(ys=np.float32(0.2 * alpha), yz=np.uint8(128))
        ins += ["ys", "yz"]
        out_elem = U8
    node = helper.make_node("QGemm", ins, ["y"], domain=MS, transA=trans_a, transB=trans_b, alpha=alpha)
    model = _model([node], [_vi("a", list(a_shape), U8)], [_vi("y", None, out_elem)], inits)
    engine = _check_levels(model, {"a": _ints(rng, a_shape, U8)}, device)
    if device == "cpu":
        assert "QGemm" not in {row.op for row in engine.kernel_report()}


def test_qgemm_without_bias(rng):
    inits = {"as": np.float32(0.02), "az": np.uint8(128), "b": _ints(rng, (6, 4), S8), "bs": np.float32(0.01),
             "bz": np.int8(0)}
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz"], ["y"], domain=MS)
    model = _model([node], [_vi("a", [3, 6], U8)], [_vi("y", None)], inits)
    _check_levels(model, {"a": _ints(rng, (3, 6), U8)})


@pytest.mark.parametrize("with_zero_point,with_bias", [(False, False), (True, True)])
def test_dynamic_quantize_matmul(rng, with_zero_point, with_bias):
    """onnxruntime quantizes A to uint8 per tensor at run time, and so does the
    rewrite (DynamicQuantizeLinear); the two differ by float rounding only."""
    inits = {"b": _ints(rng, (16, 6), S8), "bs": rng.uniform(0.01, 0.02, 6).astype(np.float32)}
    ins = ["a", "b", "bs", "", ""]
    if with_zero_point:
        inits["bz"] = np.zeros(6, np.int8)
        ins[3] = "bz"
    if with_bias:
        inits["bias"] = rng.standard_normal(6).astype(np.float32)
        ins[4] = "bias"
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("DynamicQuantizeMatMul", ins, ["y"], domain=MS)
    model = _model([node], [_vi("a", ["n", 3, 16])], [_vi("y", None)], inits)
    a = rng.standard_normal((2, 3, 16)).astype(np.float32)
    got = twinfer.load(model, device="cpu").run({"a": a})["y"].numpy()
    np.testing.assert_allclose(got, run_ort(model, {"a": a})[0], rtol=1e-4, atol=1e-4)


def test_matmul_integer_to_float(rng):
    inits = {"b": _ints(rng, (10, 4), S8), "as": np.float32(0.03), "bs": rng.uniform(0.01, 0.02, 4).astype(np.float32),
             "az": np.uint8(120), "bias": rng.standard_normal(4).astype(np.float32)}
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "", "bias"], ["y"], domain=MS)
    model = _model([node], [_vi("a", [2, 3, 10], U8)], [_vi("y", None)], inits)
    a = _ints(rng, (2, 3, 10), U8)
    got = twinfer.load(model, device="cpu").run({"a": a})["y"].numpy()
    np.testing.assert_allclose(got, run_ort(model, {"a": a})[0], rtol=1e-5, atol=1e-5)


def test_contrib_quantize_and_dequantize_linear(rng):
    inits = {"s": rng.uniform(0.01, 0.05, 4).astype(np.float32), "z": np.array([0, 3, -2, 5], np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS, axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain=MS, axis=1)]
    model = _model(nodes, [_vi("x", [3, 4, 2])], [_vi("q", None, S8), _vi("y", None)], inits)
    _check_levels(model, {"x": rng.standard_normal((3, 4, 2)).astype(np.float32)}, max_off_by_one=0)


def test_an_output_zero_point_of_unknown_type_is_reported(rng):
    """No zero point anywhere and inputs of undeclared type: the output type
    cannot be told, so the node stays and is named as unsupported."""
    inits = {"s": np.float32(0.1)}
    nodes = [helper.make_node("Identity", ["x"], ["t"]),
             helper.make_node("QLinearSigmoid", ["t", "s", "", "s"], ["y"], domain=MS)]
    graph = helper.make_graph(nodes, "g", [_vi("x", [3], S8)], [helper.make_tensor_value_info("y", S8, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    with pytest.raises(twinfer.UnsupportedOpError, match="com.microsoft::QLinearSigmoid"):
        twinfer.load(model, device="cpu")


@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_a_model_quantize_static_wrote_in_qoperator_format(tmp_path, rng, activation, per_channel):
    """A small CNN (residual Add, SiLU-style Mul by Sigmoid, average pool,
    Concat with a LeakyReLU branch, Linear, Softmax) through onnxruntime's
    quantize_static with QuantFormat.QOperator: every com.microsoft op above
    appears, and the result is onnxruntime's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime.quantization")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.c3 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
            self.fc, self.leaky = nn.Linear(16, 10), nn.LeakyReLU(0.1)

        def forward(self, x):
            a = torch.relu(self.c1(x))
            c = a + self.c2(a)
            d = c * torch.sigmoid(self.c3(c))
            e = nn.functional.avg_pool2d(d, 2)
            f = torch.cat([e, self.leaky(e)], 1)
            return self.fc(nn.functional.adaptive_avg_pool2d(f, 1).flatten(1))

    torch.manual_seed(int(rng.integers(1 << 30)))
    model = ort_quantized_model(Net(), tmp_path, rng, activation, per_channel)
    ms_ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearConcat", "QGemm"} <= ms_ops, ms_ops
    x = rng.standard_normal((3, 3, 15, 17)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got = twinfer.load(model, device="cpu").run({"x": x})["y"].numpy()
    # The logits are QGemm's float output: one level of the last activation
    # (its scale times the weights) at most.
    np.testing.assert_allclose(got, want, rtol=0, atol=0.05 * np.abs(want).max())
