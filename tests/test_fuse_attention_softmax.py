"""CPU plans: what lies between attention's two GEMMs (scalar factors on q, k'
and the scores, the additive mask, Softmax, PyTorch's NaN guard) becomes one
com.twinfer::AttentionSoftmax (graph/passes/fuse_attention_softmax.cc), the
MatMuls staying oneDNN's. Each spelling against onnxruntime running the same
graph, NaN where it gives NaN; odd sizes (3 heads, 13 queries, 17 keys) and
masks broadcast every way exporters write them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import run_ort

import twinfer

F = TensorProto.FLOAT
B, H, SQ, SK, D = 2, 3, 13, 17, 24
FUSED = "com.twinfer::AttentionSoftmax"


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.twinfer", 1)])
    m.ir_version = 10
    return m


def _scalar(name, v, shape=()):
    return helper.make_tensor(name, F, list(shape), [v])


def _ops(e, feeds):
    return [r.op for r in e.kernel_report({k: v.shape for k, v in feeds.items()})]


def _qkv(rng):
    return (rng.standard_normal(s).astype(np.float32) for s in ([B, H, SQ, D], [B, H, SK, D], [B, H, SK, D]))


def _sdpa(guard=True, factor_shape=()):
    """PyTorch's scaled_dot_product_attention export: q and k^T each times
    sqrt(scale), an additive mask, Softmax, [Where(IsNaN(p), 0, p)], values."""
    c = float(np.sqrt(1 / np.sqrt(D)))
    nodes = [helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["c", "kt"], ["kts"]), helper.make_node("MatMul", ["qs", "kts"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1)]
    if guard:
        nodes += [helper.make_node("IsNaN", ["p"], ["bad"]), helper.make_node("Where", ["bad", "zero", "p"], ["pz"])]
    nodes.append(helper.make_node("MatMul", ["pz" if guard else "p", "v"], ["o"]))
    return _model(nodes, [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D]), ("mask", [B, 1, 1, SK])],
                  [("o", [B, H, SQ, D])], [_scalar("c", c, factor_shape), _scalar("zero", 0.0)])


@pytest.mark.parametrize("guard", [True, False])
@pytest.mark.parametrize("factor_shape", [(), (1, 1, 1, 1)])
def test_sdpa_export_fuses_and_matches_onnxruntime(guard, factor_shape, rng):
    m = _sdpa(guard, factor_shape)
    q, k, v = _qkv(rng)
    mask = np.zeros((B, 1, 1, SK), np.float32)
    mask[1, ..., 9:] = -np.inf  # the second sample's padding
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    e = twinfer.load(m, device="cpu")
    ops = _ops(e, feeds)
    assert ops.count(FUSED) == 1 and not {"Softmax", "Mul", "Add", "IsNaN", "Where"} & set(ops), ops
    np.testing.assert_allclose(e.run(feeds)["o"].numpy(), run_ort(m, feeds)[0], rtol=2e-5, atol=2e-5)
    # Every key of the first sample masked: the guard gives zeros there,
    # without it Softmax gives NaN, fused or not.
    mask[0] = -np.inf
    got, want = e.run(feeds)["o"].numpy(), run_ort(m, feeds)[0]
    assert (not got[0].any()) if guard else np.isnan(got[0]).all()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=not guard)


@pytest.mark.parametrize("scaler", ["Div", "Mul", None])
@pytest.mark.parametrize("mask_shape", [(SQ, SK), (B, H, SQ, SK), (1, 1, SQ, 1), (B, 1, SQ, SK), None])
def test_classic_spellings_and_mask_broadcasts(scaler, mask_shape, rng):
    """BERT's spelling: MatMul(q, Transpose(k)) / sqrt(d) + mask; masks of
    every broadcast (a causal [Sq, Sk], per head, one value per query row)."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"])]
    inits, cur = [], "s"
    if scaler:
        inits.append(_scalar("d", float(np.sqrt(D)) if scaler == "Div" else float(1 / np.sqrt(D))))
        nodes.append(helper.make_node(scaler, [cur, "d"], ["ss"]))
        cur = "ss"
    inputs = [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D])]
    q, k, v = _qkv(rng)
    feeds = {"q": q, "k": k, "v": v}
    if mask_shape:
        nodes.append(helper.make_node("Add", ["mask", cur], ["sm"]))  # the mask first: either operand order
        cur = "sm"
        inputs.append(("mask", list(mask_shape)))
        feeds["mask"] = (rng.standard_normal(mask_shape) * 3).astype(np.float32)
        if mask_shape == (SQ, SK):
            feeds["mask"] = np.triu(np.full((SQ, SK), -1e9, np.float32), 1)  # causal
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    m = _model(nodes, inputs, [("o", [B, H, SQ, D])], inits)
    e = twinfer.load(m, device="cpu")
    ops = _ops(e, feeds)
    assert ops.count(FUSED) == (1 if scaler or mask_shape else 0) and ("Softmax" in ops) == (FUSED not in ops), ops
    np.testing.assert_allclose(e.run(feeds)["o"].numpy(), run_ort(m, feeds)[0], rtol=2e-5, atol=2e-5)


def test_scores_read_elsewhere_stay_unfused(rng):
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "d"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    m = _model(nodes, [("q", [B, H, SQ, D]), ("kt", [B, H, D, SK]), ("v", [B, H, SK, D])],
               [("o", [B, H, SQ, D]), ("ss", [B, H, SQ, SK])], [_scalar("d", 5.0)])
    q, k, v = _qkv(rng)
    feeds = {"q": q, "kt": np.ascontiguousarray(k.transpose(0, 1, 3, 2)), "v": v}
    e = twinfer.load(m, device="cpu")
    assert FUSED not in _ops(e, feeds)
    got, want = e.run(feeds), run_ort(m, feeds)
    np.testing.assert_allclose(got["o"].numpy(), want[0], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got["ss"].numpy(), want[1], rtol=2e-5, atol=2e-5)


def test_the_op_refuses_a_mask_that_widens_x(rng):
    node = helper.make_node("AttentionSoftmax", ["x", "mask"], ["y"], domain="com.twinfer", scale=0.5)
    m = _model([node], [("x", [3, 5]), ("mask", [2, 3, 5])], [("y", None)])
    with pytest.raises(twinfer.ShapeError, match="mask"):
        twinfer.load(m, device="cpu").run({"x": np.zeros((3, 5), np.float32), "mask": np.zeros((2, 3, 5), np.float32)})


def test_bert_export_fuses_every_layer(rng):
    """A two-layer BERT from transformers (torch's export): one fused
    softmax per layer, the encoder's output as onnxruntime's."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import io

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=64,
                                  vocab_size=100)
    bert = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.randint(0, 100, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    from twinfer.models.minilm import positional_encoder

    buf = io.BytesIO()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(positional_encoder(bert), (ids, mask, torch.zeros_like(ids)), buf, input_names=names,
                      output_names=["h"], opset_version=17, dynamo=False)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": np.zeros_like(ids.numpy())}
    e = twinfer.load(buf.getvalue(), device="cpu")
    assert _ops(e, feeds).count(FUSED) == 2
    from onnx import load_from_string

    np.testing.assert_allclose(e.run(feeds)["h"].numpy(), run_ort(load_from_string(buf.getvalue()), feeds)[0],
                               rtol=1e-4, atol=1e-4)
