"""A plan-time rewrite whose graph fails to type-check is undone: the plan
is built again without it (PlanPassOptions::rebuild in
csrc/graph/passes/pipeline.h) and still gives the reference's answer. No
rewrite is known to fail on its own, so the test makes one fail
(TWINFER_TEST_FAIL_REWRITE)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from conftest import PLAN_DEVICES, load_on
from onnx_helpers import make_model

# The attention each backend's kernels fuse when a plan's shapes are
# concrete: the CPU's (also the simulated device's, by default) the steps
# between the GEMMs, CUDA's the whole of it.
CPU_FUSED = ("fuse_attention_softmax", "com.twinfer::AttentionSoftmax")
CUDA_FUSED = ("fuse_attention", "com.twinfer::Attention")
FUSED = {"cpu": CPU_FUSED, "sim": CPU_FUSED, "sim-cuda": CUDA_FUSED, "cuda": CUDA_FUSED}


def _attention_model():
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "root_d"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    qkv = [(n, np.float32, [1, 2, "s", 8]) for n in ("q", "k", "v")]
    return make_model(nodes, qkv + [("mask", np.float32, [1, 1, 1, "s"])], [("y", np.float32, None)],
                      [("root_d", np.array(np.sqrt(8), np.float32))])


def _reference(f):
    s = f["q"] @ f["k"].transpose(0, 1, 3, 2) / np.float32(np.sqrt(8)) + f["mask"]
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ f["v"]


def _ops(e, f):
    return {r.op for r in e.kernel_report({k: list(v.shape) for k, v in f.items()})}


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_a_failed_plan_time_rewrite_is_undone(device, rng, monkeypatch):
    rewrite, fused_op = FUSED[device]
    for s in (5, 11):
        f = {n: rng.standard_normal((1, 2, s, 8)).astype(np.float32) for n in ("q", "k", "v")}
        f["mask"] = np.where(rng.random((1, 1, 1, s)) < 0.3, -1e4, 0).astype(np.float32)
        want = _reference(f)

        e = load_on(_attention_model(), device)
        assert fused_op in _ops(e, f)  # the rewrite happens...
        np.testing.assert_allclose(e.run(f)["y"].numpy(), want, rtol=1e-4, atol=1e-5)

        monkeypatch.setenv("TWINFER_TEST_FAIL_REWRITE", rewrite)
        e = load_on(_attention_model(), device)
        ops = _ops(e, f)
        assert fused_op not in ops and "Softmax" in ops, ops  # ...and is undone when it fails
        np.testing.assert_allclose(e.run(f)["y"].numpy(), want, rtol=1e-4, atol=1e-5)
        monkeypatch.delenv("TWINFER_TEST_FAIL_REWRITE")
