"""Constant weights packed once per layout and shared by every CPU kernel
that packs the same bytes (backends/cpu/onednn_common.h, PackedWeights): each
plan for a new input shape builds its own MatMul and Conv kernels, which
used to pack the weights again, a copy per cached plan. Answers against
onnxruntime with two engines of one graph and different weights
interleaved (a copy shared across weights would give one engine the other's
answers), and the copies counted while plans for several shapes live."""

import gc

import numpy as np
import pytest
from onnx import helper, numpy_helper

import twinfer
from onnx_helpers import make_model, run_ort
from twinfer import _core


def _mlp(rng):
    # x [batch, tokens, 16] -> MatMul -> Add -> Relu -> MatMul, and a Gemm on
    # a Flatten of it: the fused Gemm/MatMul kernels all pack constant B.
    w1 = numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((24, 8)).astype(np.float32), "w2")
    w3 = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w3")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["z"]),
             helper.make_node("Flatten", ["z"], ["zf"], axis=2),
             helper.make_node("Gemm", ["zf", "w3"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["b", "t", 16])], [("y", np.float32, None)], [w1, b1, w2, w3],
                      name="mlp")


def _conv(rng):
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    return make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                      [("x", np.float32, ["n", 3, "h", "w"])], [("y", np.float32, None)], [w, b], name="conv")


@pytest.mark.parametrize("make, shapes", [
    (_mlp, [(1, 3, 16), (1, 7, 16), (2, 5, 16), (1, 9, 16), (3, 4, 16)]),
    (_conv, [(1, 3, 10, 10), (2, 3, 12, 9), (1, 3, 7, 13), (3, 3, 10, 10)]),
])
def test_engines_with_other_weights_keep_their_own(make, shapes, rng):
    # Two engines of one graph with different weights, run shape after shape
    # in turn: each against onnxruntime on its own weights.
    models = [make(rng), make(rng)]
    engines = [twinfer.load(m.SerializeToString(), device="cpu") for m in models]
    for shape in shapes:
        for m, e in zip(models, engines):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_plans_for_new_shapes_share_the_packed_copies(rng):
    # Five sequence lengths: five plans, each with its three packing kernels.
    # Shared, the live copies stay at one per weight and layout; a copy per
    # plan would be fifteen. Dropping the engine frees them.
    gc.collect()
    before = _core._test_shared_packed_weights()[0]
    m = _mlp(rng)
    e = twinfer.load(m.SerializeToString(), device="cpu", num_threads=1)
    for t in (3, 7, 5, 11, 9):  # no progression: none is planned ahead
        x = rng.standard_normal((1, t, 16)).astype(np.float32)
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert e.stats()["plans_cached"] == 5
    live = _core._test_shared_packed_weights()[0] - before
    assert 3 <= live < 15, live
    del e
    gc.collect()
    assert _core._test_shared_packed_weights()[0] == before
