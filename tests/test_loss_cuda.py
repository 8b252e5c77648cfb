"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the device
(csrc/backends/cuda/loss.cu) against a NumPy reference written here, on fresh
random data with odd sizes: every reduction, with and without weights,
ignore_index hitting some targets (in range and negative) or all of them,
int32 and int64 targets, [N, C] and [N, C, d1, d2] inputs, SCE with and
without its log_prob output, float32, float64, float16 (and bfloat16 through
Casts) with tolerances for each.

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: each has a CUDA kernel whose
supports() takes it) and run by the CPU kernel, which shares its per-element
math with the CUDA kernel (csrc/ops/loss/loss_math.h); on a GPU the CUDA
kernel itself runs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_on_device

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]

N, C, SPATIAL = 7, 5, (3, 4)

ONNX_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
          np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}
TOL = {np.float32: 2e-5, np.float64: 1e-12, np.float16: 1e-2, "bf16": 5e-2}

# (float dtype, target dtype) pairs each case runs.
TYPES = [(np.float32, np.int64), (np.float32, np.int32), (np.float64, np.int32), (np.float16, np.int64)]


def reference(x, t, w, reduction, ignore, sce):
    """(loss, log_prob) in float64 from the ONNX definitions."""
    x = np.asarray(x, np.float64)
    if sce:
        m = x.max(axis=1, keepdims=True)
        lp = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    else:
        lp = x
    t = np.asarray(t, np.int64)
    used = np.ones(t.shape, bool) if ignore is None else t != ignore
    tc = np.where(used, t, 0)
    picked = np.take_along_axis(lp, tc[:, None], axis=1)[:, 0]
    wt = (np.ones(t.shape) if w is None else np.asarray(w, np.float64)[tc]) * used
    loss = -picked * wt
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = loss.sum() / wt.sum()  # every target ignored: 0 / 0
    return np.asarray(loss), lp


def loss_model(op, x_t, t_t, x_shape, reduction, weighted, ignore, log_prob, cast_to=None):
    """One loss node; cast_to: run it in that type between Casts from/to float32."""
    t_shape = (x_shape[0],) + tuple(x_shape[2:])
    inputs = [helper.make_tensor_value_info("x", x_t, list(x_shape)),
              helper.make_tensor_value_info("t", t_t, list(t_shape))]
    ins = ["x", "t"]
    nodes = []
    if weighted:
        inputs.append(helper.make_tensor_value_info("w", x_t, [x_shape[1]]))
        ins.append("w")
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["x"], ["xc"], to=cast_to))
        ins[0] = "xc"
        if weighted:
            nodes.append(helper.make_node("Cast", ["w"], ["wc"], to=cast_to))
            ins[2] = "wc"
    outs = ["loss"] + (["log_prob"] if log_prob else [])
    node_outs = [o + "_c" for o in outs] if cast_to is not None else outs
    attrs = dict(reduction=reduction)
    if ignore is not None:
        attrs["ignore_index"] = ignore
    nodes.append(helper.make_node(op, ins, node_outs, **attrs))
    if cast_to is not None:
        nodes += [helper.make_node("Cast", [c], [o], to=x_t) for c, o in zip(node_outs, outs)]
    loss_shape = list(t_shape) if reduction == "none" else []
    outputs = [helper.make_tensor_value_info("loss", x_t, loss_shape)]
    if log_prob:
        outputs.append(helper.make_tensor_value_info("log_prob", x_t, list(x_shape)))
    m = helper.make_model(helper.make_graph(nodes, "loss", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return m


def run_on(device, model, feeds):
    return run_on_device(model, feeds, device)


def make_targets(rng, shape, ignore_mode):
    t = rng.integers(0, C, size=shape)
    ignore = {None: None, "some": 2, "negative": -1, "all": 3}[ignore_mode]
    if ignore_mode in ("some", "negative"):
        t[rng.random(shape) < 0.3] = ignore
        t.flat[0] = ignore  # at least one
    elif ignore_mode == "all":
        t[...] = ignore
    return t, ignore


def check(got, want, tol):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["NLL", "SCE", "SCE+log_prob"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_mode", [None, "some", "negative", "all"])
@pytest.mark.parametrize("spatial", [False, True])
def test_loss_matches_numpy(device, op, reduction, weighted, ignore_mode, spatial, rng):
    sce, log_prob = op != "NLL", op == "SCE+log_prob"
    onnx_op = "SoftmaxCrossEntropyLoss" if sce else "NegativeLogLikelihoodLoss"
    x_shape = (N, C) + (SPATIAL if spatial else ())
    for ft, it in TYPES:
        x = (rng.standard_normal(x_shape) * 2).astype(ft)
        if not sce:  # NLL reads log-probabilities
            x = -np.abs(x)
        t, ignore = make_targets(rng, (N,) + x_shape[2:], ignore_mode)
        t = t.astype(it)
        w = (rng.random(C) + 0.5).astype(ft) if weighted else None
        feeds = {"x": x, "t": t} | ({"w": w} if weighted else {})
        m = loss_model(onnx_op, ONNX_T[ft], ONNX_T[it], x_shape, reduction, weighted, ignore, log_prob)
        got = run_on(device, m, feeds)
        want, lp = reference(x, t, w, reduction, ignore, sce)
        check(got["loss"], want, TOL[ft])
        assert got["loss"].dtype == ft
        if ignore_mode == "all" and reduction == "mean":
            assert np.isnan(got["loss"]), got["loss"]  # 0 / 0, as the ONNX reference
        if log_prob:
            check(got["log_prob"], lp, TOL[ft])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_loss_bfloat16(device, op, reduction, rng):
    # bfloat16 between Casts (NumPy has no bfloat16): the reference sees the
    # values rounded to bfloat16.
    x_shape = (N, C) + SPATIAL
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    if op == "NegativeLogLikelihoodLoss":
        x = -np.abs(x)
    w = (rng.random(C) + 0.5).astype(np.float32)
    t, ignore = make_targets(rng, (N,) + SPATIAL, "some")
    m = loss_model(op, TensorProto.FLOAT, TensorProto.INT64, x_shape, reduction, True, ignore,
                   op == "SoftmaxCrossEntropyLoss", cast_to=TensorProto.BFLOAT16)
    got = run_on(device, m, {"x": x, "t": t, "w": w})

    def bf16(a):  # round to nearest even, as the Cast does
        b = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
        b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
        return b.astype(np.uint32).view(np.float32)

    want, lp = reference(bf16(x), t, bf16(w), reduction, ignore, op == "SoftmaxCrossEntropyLoss")
    check(got["loss"], want, TOL["bf16"])
    if op == "SoftmaxCrossEntropyLoss":
        check(got["log_prob"], lp, TOL["bf16"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_target_out_of_range_is_an_error(device, op, rng):
    x_shape = (N, C) + SPATIAL
    m = loss_model(op, TensorProto.FLOAT, TensorProto.INT64, x_shape, "sum", False, -1, False)
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    x = rng.standard_normal(x_shape).astype(np.float32)
    good = rng.integers(0, C, size=(N,) + SPATIAL)
    # The CPU kernel (the simulated device's) names the target; CUDA's error
    # flag says a loss target was out of range.
    for bad_value, cpu_msg in ((C, rf"target {C} is out of range \[0, {C}\)"),
                               (-3, rf"target -3 is out of range \[0, {C}\)")):
        bad = good.copy()
        bad[N - 1, 2, 3] = bad_value  # -1 would be ignore_index; -3 is not
        with pytest.raises(twinfer.InvalidArgumentError, match=cpu_msg if device == "sim" else "target was out of range"):
            e.run({"x": x, "t": bad})["loss"].numpy()
        # The engine goes on: the next run with good targets is right.
        got = e.run({"x": x, "t": good})["loss"].numpy()
        want, _ = reference(x, good, None, "sum", -1, op == "SoftmaxCrossEntropyLoss")
        check(got, want, TOL[np.float32])


@pytest.mark.parametrize("device", DEVICES)
def test_loss_empty_batch(device):
    # No elements: none gives an empty loss, sum 0 and mean 0 / 0.
    for reduction, want in (("none", np.zeros((0, 3), np.float32)), ("sum", np.float32(0)),
                            ("mean", np.float32(np.nan))):
        m = loss_model("SoftmaxCrossEntropyLoss", TensorProto.FLOAT, TensorProto.INT32, (0, C, 3), reduction, False,
                       None, True)
        got = run_on(device, m, {"x": np.zeros((0, C, 3), np.float32), "t": np.zeros((0, 3), np.int32)})
        check(got["loss"], want, 0)
        assert got["log_prob"].shape == (0, C, 3)
