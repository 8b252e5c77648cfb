"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the CPU against
onnxruntime: every reduction, with and without weights and ignore_index,
2-D and N-d inputs, int32/int64 targets, float32/float64; plus bad targets
raising twinfer errors."""

from __future__ import annotations

import numpy as np
import pytest

from op_cases import F32, F64, build, check, expect_error, rand

TOL = dict(rtol=1e-5, atol=1e-5)


def targets(rng, shape, C, ignore=None, dtype=np.int64):
    t = rng.integers(0, C, size=shape)
    if ignore is not None:
        t[rng.random(shape) < 0.3] = ignore
    return t.astype(dtype)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -1])
def test_losses(op, reduction, weighted, ignore):
    rng = np.random.default_rng(1)
    x = rand(rng, (3, 5, 4, 2), F32)
    t = targets(rng, (3, 4, 2), 5, ignore)
    ins = [("x", x), ("t", t)]
    if weighted:
        ins.append(("w", rng.random(5).astype(np.float32)))
    attrs = dict(reduction=reduction)
    if ignore is not None:
        attrs["ignore_index"] = ignore
    check(op, ins, attrs, opset=13, **TOL)


def test_softmax_cross_entropy_log_prob_output():
    rng = np.random.default_rng(2)
    x = rand(rng, (4, 7), F64)
    t = targets(rng, (4,), 7, dtype=np.int32)
    check("SoftmaxCrossEntropyLoss", [("x", x), ("t", t)], dict(reduction="mean"), out=[F64, F64], opset=13,
          rtol=1e-10, atol=1e-10)
    check("NegativeLogLikelihoodLoss", [("x", x), ("t", t)], dict(reduction="sum"), opset=13, rtol=1e-10,
          atol=1e-10)


def test_loss_bad_targets():
    x = np.zeros((2, 3), np.float32)
    model, feeds = build("NegativeLogLikelihoodLoss", [("x", x), ("t", np.array([0, 3]))], {}, opset=13)
    expect_error(model, feeds, "target 3 is out of range")
    model, feeds = build("SoftmaxCrossEntropyLoss", [("x", x), ("t", np.array([0, 1, 2]))], {}, opset=13)
    expect_error(model, feeds, "does not match")
