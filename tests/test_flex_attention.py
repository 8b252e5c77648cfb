"""ai.onnx.preview FlexAttention expanded into MatMul, Softmax and MatMul
with its score_mod / prob_mod spliced in (graph/passes/expand_flex_attention.h),
against NumPy (and onnx's reference evaluator where it can run the model), on
the CPU, on the simulated device placing as CUDA does with no fallback, and
on CUDA. With optimize=False the reference kernel runs instead."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import twinfer

# "sim" places nodes as CUDA would (sim_coverage="cuda"): a CUDA build's (cuda_build).
DEVICES = ["cpu", pytest.param("sim", marks=pytest.mark.cuda_build), pytest.param("cuda", marks=pytest.mark.cuda)]
ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def mod_graph(name, nodes, inits=()):
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    return helper.make_graph(nodes, name, [io("s")], [io("t")], list(inits))


def flex_model(dtype, q_shape, k_shape, v_shape, scale=None, outer_bias=False, soft_cap=None, prob_scale=None):
    """Y = FlexAttention(Q, K, V) with: score_mod adding the graph input `bias`
    (a read of an outer value), or a soft cap c * tanh(s / c); prob_mod
    multiplying the probabilities by a constant."""
    attrs = {}
    if scale is not None:
        attrs["scale"] = scale
    if outer_bias:
        attrs["score_mod"] = mod_graph("bias_mod", [helper.make_node("Add", ["s", "bias"], ["t"])])
    elif soft_cap is not None:
        c = helper.make_tensor("c", TensorProto.FLOAT, [], [soft_cap])
        attrs["score_mod"] = mod_graph("cap", [helper.make_node("Div", ["s", "c"], ["d"]),
                                               helper.make_node("Tanh", ["d"], ["h"]),
                                               helper.make_node("Mul", ["h", "c"], ["t"])], [c])
    if prob_scale is not None:
        p = helper.make_tensor("p", TensorProto.FLOAT, [], [prob_scale])
        attrs["prob_mod"] = mod_graph("scaled", [helper.make_node("Mul", ["s", "p"], ["t"])], [p])
    t = ONNX_TYPE[dtype]
    inputs = [helper.make_tensor_value_info("Q", t, q_shape), helper.make_tensor_value_info("K", t, k_shape),
              helper.make_tensor_value_info("V", t, v_shape)]
    if outer_bias:
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["one", "one2", "L", "S"]))
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", **attrs)
    g = helper.make_graph([node], "flex", inputs, [helper.make_tensor_value_info("Y", t, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("ai.onnx.preview", 1)])


def numpy_flex(q, k, v, scale=None, bias=None, soft_cap=None, prob_scale=None):
    """The definition, in float64: K/V head h // (Hq / Hkv) for query head h."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if bias is not None:
        s = s + bias
    if soft_cap is not None:
        s = soft_cap * np.tanh(s / soft_cap)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if prob_scale is not None:
        p = p * prob_scale
    return p @ v


CASES = {
    # name: (B, Hq, Hkv, L, S, D, Dv, symbolic dims, model options)
    "plain": (2, 3, 3, 5, 7, 8, 8, False, {}),
    "gqa_odd_sizes": (1, 6, 2, 9, 13, 12, 5, False, {"scale": 0.37}),
    "symbolic_dims_outer_bias": (2, 4, 2, 3, 11, 6, 7, True, {"outer_bias": True}),
    "soft_cap_and_prob_mod": (3, 2, 1, 4, 4, 16, 3, False, {"soft_cap": 2.5, "prob_scale": 0.5}),
}


def shapes(case):
    b, hq, hkv, lq, s, d, dv, symbolic, _ = CASES[case]
    if symbolic:  # the head size unknown at load: the scale is computed from Q's shape when it runs
        return ["B", hq, "L", "D"], ["B", hkv, "S", "D"], ["B", hkv, "S", "Dv"]
    return [b, hq, lq, d], [b, hkv, s, d], [b, hkv, s, dv]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_expanded_flex_attention_matches_numpy(rng, device, dtype, case):
    b, hq, hkv, lq, s, d, dv, _, opts = CASES[case]
    model = flex_model(dtype, *shapes(case), **opts)
    feeds = {"Q": rng.standard_normal((b, hq, lq, d)).astype(dtype),
             "K": rng.standard_normal((b, hkv, s, d)).astype(dtype),
             "V": rng.standard_normal((b, hkv, s, dv)).astype(dtype)}
    bias = None
    if opts.get("outer_bias"):
        bias = feeds["bias"] = (rng.standard_normal((1, 1, lq, s)) * 2).astype(np.float32)
    # On a device every node must have a device kernel; the simulated one places as CUDA does.
    kwargs = {"cpu": {}, "sim": {"sim_coverage": "cuda", "allow_cpu_fallback": False}}.get(
        device, {"allow_cpu_fallback": False})
    e = twinfer.load(model, device=device, **kwargs)
    ops = {r.op for r in e.kernel_report(feeds)}
    assert not any(op.endswith("FlexAttention") for op in ops) and ops & {"MatMul", "com.twinfer::Attention"}, ops
    # Grouped heads: K and V are read once per group, never repeated in memory
    # (the fused attention's grouped heads, or matmul_reads_grouped_heads).
    assert "Expand" not in ops, ops
    if device != "cpu" and dtype == np.float32 and "soft_cap" not in opts:
        # Nothing between the GEMMs but a mask: one fused attention. (float16 keeps
        # its Casts to the float32 softmax, which the fusion does not look through.)
        assert "com.twinfer::Attention" in ops, ops
    y = e.run(feeds)["Y"].numpy()
    assert y.dtype == dtype and y.shape == (b, hq, lq, dv)
    want = numpy_flex(feeds["Q"], feeds["K"], feeds["V"], opts.get("scale"), bias, opts.get("soft_cap"),
                      opts.get("prob_scale"))
    tol = 2e-2 if dtype == np.float16 else 2e-5
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["plain", "gqa_odd_sizes", "soft_cap_and_prob_mod"])
def test_expansion_and_reference_kernel_agree_with_onnx_reference(rng, case):
    b, hq, hkv, lq, s, d, dv, _, opts = CASES[case]
    model = flex_model(np.float32, *shapes(case), **opts)
    feeds = {"Q": rng.standard_normal((b, hq, lq, d)).astype(np.float32),
             "K": rng.standard_normal((b, hkv, s, d)).astype(np.float32),
             "V": rng.standard_normal((b, hkv, s, dv)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    expanded = twinfer.load(model, device="cpu")
    kernel = twinfer.load(model, device="cpu", optimize=False)  # the node as it is: the reference kernel
    assert "ai.onnx.preview::FlexAttention" in {r.op for r in kernel.kernel_report(feeds)}
    for e in (expanded, kernel):
        np.testing.assert_allclose(e.run(feeds)["Y"].numpy(), want, rtol=2e-5, atol=2e-5)


def test_heads_that_do_not_divide_are_refused(rng):
    model = flex_model(np.float32, [1, 5, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4])
    with pytest.raises(twinfer.Error, match="multiple"):
        twinfer.load(model, device="cpu").run({"Q": np.zeros((1, 5, 3, 4), np.float32),
                                               "K": np.zeros((1, 2, 3, 4), np.float32),
                                               "V": np.zeros((1, 2, 3, 4), np.float32)})
