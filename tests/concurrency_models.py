"""Small models for the Parallel/Pipeline tests (a few ms or less per run),
with the references they are checked against."""

import numpy as np
from onnx import helper

from onnx_helpers import make_model

F32 = np.float32


# -- small models (a few ms or less per run) ----------------------------------
def conv_net(rng, cin=3, c=8, out="feat"):
    """x[N, cin, H, W] -> Conv3x3 -> Relu -> Conv3x3 -> Relu -> GlobalAveragePool -> out[N, c, 1, 1]."""
    w1 = (rng.standard_normal((c, cin, 3, 3)) * 0.3).astype(F32)
    w2 = (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(F32)
    b1, b2 = rng.standard_normal(c).astype(F32), rng.standard_normal(c).astype(F32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], [out]),
    ]
    return make_model(nodes, [("x", F32, ["N", cin, "H", "W"])], [(out, F32, ["N", c, 1, 1])],
                      [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)], name="convnet")


def conv_head(rng, c=8, k=5, inp="feat_in", out="probs"):
    """inp[N, c, 1, 1] -> Conv1x1 -> Softmax over channels -> out[N, k, 1, 1]."""
    w = rng.standard_normal((k, c, 1, 1)).astype(F32)
    b = rng.standard_normal(k).astype(F32)
    nodes = [helper.make_node("Conv", [inp, "head_w", "head_b"], ["logits"]),
             helper.make_node("Softmax", ["logits"], [out], axis=1)]
    return make_model(nodes, [(inp, F32, ["N", c, 1, 1])], [(out, F32, ["N", k, 1, 1])],
                      [("head_w", w), ("head_b", b)], name="head")


def mlp(rng, f=8, hidden=13, k=5):
    """v[N, f] -> MatMul+Add -> Relu -> Gemm -> Softmax -> scores[N, k]."""
    w1 = (rng.standard_normal((f, hidden)) * 0.4).astype(F32)
    b1 = rng.standard_normal(hidden).astype(F32)
    w2 = (rng.standard_normal((hidden, k)) * 0.4).astype(F32)
    b2 = rng.standard_normal(k).astype(F32)
    nodes = [
        helper.make_node("MatMul", ["v", "w1"], ["m"]),
        helper.make_node("Add", ["m", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["g"]),
        helper.make_node("Softmax", ["g"], ["scores"], axis=-1),
    ]
    return make_model(nodes, [("v", F32, ["N", f])], [("scores", F32, ["N", k])],
                      [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)], name="mlp")


def add3(c=8):
    """p + q + s, all [N, c, 1, 1] (for links from several stages and the item)."""
    nodes = [helper.make_node("Add", ["p", "q"], ["pq"]), helper.make_node("Add", ["pq", "s"], ["r"])]
    io = [(n, F32, ["N", c, 1, 1]) for n in ("p", "q", "s")]
    return make_model(nodes, io, [("r", F32, ["N", c, 1, 1])], name="add3")


def images(rng, n=None, h=None, w=None):
    n = n or int(rng.integers(1, 4))
    return rng.standard_normal((n, 3, h or int(rng.integers(9, 24)), w or int(rng.integers(9, 24)))).astype(F32)


def alone(engine, feeds, threads):
    """The engine by itself, in a fresh context with the same thread count."""
    ctx = engine.create_context(threads)
    return {k: v.numpy().copy() for k, v in engine.run(feeds, context=ctx).items()}


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
