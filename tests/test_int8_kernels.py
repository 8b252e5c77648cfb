"""Real int8 execution on the CPU: QDQ models written by onnxruntime's
quantize_static (uint8 activations with zero points, int8 per-channel
weights) run through the fused com.twinfer::QMatMul / QConv kernels and match
onnxruntime running the same file; precision="int8" uses the same kernels;
weight-only int8 (weights="int8") matches NumPy with the same per-channel
quantized weights and holds a quarter of the weight bytes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from twinfer.quantize import calibrate

quantization = pytest.importorskip("onnxruntime.quantization")
F = TensorProto.FLOAT


def graph_model(nodes, inits, x_shape, opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def cnn(rng):
    inits = {
        "w1": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((24, 4, 3, 3)).astype(np.float32) * 0.2,  # groups 4
        "b2": rng.standard_normal(24).astype(np.float32) * 0.1,
        "w3": rng.standard_normal((10, 24, 1, 1)).astype(np.float32) * 0.2,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], group=4),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["y"]),
    ]
    return graph_model(nodes, inits, ["N", 3, 11, 13]), (3, 3, 11, 13)


def mlp(rng):
    inits = {
        "w1": rng.standard_normal((37, 53)).astype(np.float32) * 0.2,
        "b1": rng.standard_normal(53).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((19, 53)).astype(np.float32) * 0.2,  # Gemm transB
        "b2": rng.standard_normal(19).astype(np.float32) * 0.1,
        "shape": np.array([-1, 53], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["r2"]),
        helper.make_node("Gemm", ["r2", "w2", "b2"], ["y"], transB=1, alpha=0.75),
    ]
    return graph_model(nodes, inits, ["N", 7, 37]), (2, 7, 37)


def transformer_block(rng, d=48, ff=96):
    """Single-head attention + ReLU feed-forward, residuals and LayerNorms."""
    def w(*s, k=0.15):
        return rng.standard_normal(s).astype(np.float32) * k

    inits = {"g1": 1 + w(d), "be1": w(d), "g2": 1 + w(d), "be2": w(d), "scale": np.float32(1 / np.sqrt(d))}
    for n in ("q", "k", "v", "o"):
        inits[f"w{n}"], inits[f"b{n}"] = w(d, d), w(d)
    inits["wf1"], inits["bf1"], inits["wf2"], inits["bf2"] = w(d, ff), w(ff), w(ff, d), w(d)
    nodes = [helper.make_node("LayerNormalization", ["x", "g1", "be1"], ["h"], axis=-1)]
    for n in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["h", f"w{n}"], [f"{n}0"]),
                  helper.make_node("Add", [f"{n}0", f"b{n}"], [n])]
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["a"]),
        helper.make_node("MatMul", ["a", "wo"], ["o0"]),
        helper.make_node("Add", ["o0", "bo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["x2"]),
        helper.make_node("LayerNormalization", ["x2", "g2", "be2"], ["h2"], axis=-1),
        helper.make_node("MatMul", ["h2", "wf1"], ["f0"]),
        helper.make_node("Add", ["f0", "bf1"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["f"]),
        helper.make_node("MatMul", ["f", "wf2"], ["g0"]),
        helper.make_node("Add", ["g0", "bf2"], ["g"]),
        helper.make_node("Add", ["x2", "g"], ["y"]),
    ]
    return graph_model(nodes, inits, ["N", 9, d]), (2, 9, d)


def ort_qdq(model, shape, rng, tmp_path, name):
    """The model quantized by onnxruntime.quantization.quantize_static (QDQ)."""
    fp, qp = tmp_path / f"{name}.onnx", tmp_path / f"{name}_qdq.onnx"
    onnx.save(model, fp)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    quantization.quantize_static(str(fp), str(qp), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return qp


def output_scale(qdq_path) -> float:
    """Scale of the DequantizeLinear that produces the graph output."""
    m = onnx.load(str(qdq_path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == m.graph.output[0].name:
            return float(inits[n.input[1]])
    raise AssertionError("the output has no DequantizeLinear")


def ort_run(path, feeds, literal=False):
    """literal: graph optimizations off, so onnxruntime computes the QDQ graph
    as written (dequantize, float op, quantize); else its own int8 fusions
    (QLinearAdd etc. requantize with their own rounding)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if literal:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("make, fused_ops", [
    (cnn, {"com.twinfer::QConv": 3}),
    (mlp, {"com.twinfer::QMatMul": 2}),
    (transformer_block, {"com.twinfer::QMatMul": 6}),
])
def test_onnxruntime_qdq_model_runs_on_int8_kernels(rng, tmp_path, make, fused_ops):
    model, shape = make(rng)
    qp = ort_qdq(model, shape, rng, tmp_path, make.__name__)
    engine = twinfer.load(str(qp), device="cpu")
    report = engine.kernel_report({"x": shape})
    counts = {}
    for _, op, impl, *_ in report:
        counts[op] = counts.get(op, 0) + 1
        if op in ("com.twinfer::QConv", "com.twinfer::QMatMul"):
            assert "onednn int8" in impl and "ref" not in impl.split("(")[-1], impl
    for op, n in fused_ops.items():
        assert counts.get(op, 0) == n, report
    assert "Conv" not in counts and "Gemm" not in counts, report
    step = output_scale(qp)
    for batch in (1, shape[0] + 2):
        x = rng.standard_normal((batch,) + shape[1:]).astype(np.float32)
        got = engine.run({"x": x})["y"].numpy()
        # The QDQ graph as written: the same integers, and the same float
        # rounding of each requantization up to a value landing on the other
        # side of a rounding boundary (one step, rarely; in a chain of
        # requantized layers such a flip early on can reach two steps at the
        # output; with the residual Adds int8 too (QBinary), a flip can pass
        # three requantizations and reach three steps). A flip in K, V or a
        # normalisation reaches many rows: over 4000 runs of the transformer
        # block (2000 seeds, both batches) the share of outputs off by a
        # step or more was 2% at the 99th percentile, 10.5% at the 99.9th
        # and 28% at most, and the largest error 3.0 steps (4 runs; 2 steps
        # in 50). A systematic fault (a zero point, a scale, a rounding
        # mode) moves most outputs, hence "at most half".
        err = np.abs(got - ort_run(qp, {"x": x}, literal=True)) / step
        assert err.max() <= 3.0 + 1e-3, err.max()
        assert (err > 0.5).mean() <= 0.5, (err > 0.5).mean()
        # onnxruntime's own int8 kernels requantize elementwise ops with their
        # own rounding, a step or two away.
        assert (np.abs(got - ort_run(qp, {"x": x})) / step).max() <= 4.0 + 1e-3


def test_int8_precision_uses_fused_kernels_with_int8_outputs(rng):
    """precision="int8" (insert_qdq): Conv->Relu->Conv keeps int8 between the
    convolutions (the QuantizeLinear joins the first one) and matches the same
    engine computing the QDQ graph in float (optimize=False: no fusion)."""
    model, shape = cnn(rng)
    data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    cal = calibrate(model, data, calibrator="minmax", progress=False)
    fused = twinfer.load(model, device="cpu", precision="int8", calibration=cal)
    plain = twinfer.load(model, device="cpu", precision="int8", calibration=cal, optimize=False)
    report = fused.kernel_report({"x": shape})
    assert [r.op for r in report].count("com.twinfer::QConv") == 3, report
    assert any("2 with int8 output" in p for p in fused.stats()["passes"]), fused.stats()["passes"]
    # Those two int8 values pass QConv to QConv in NHWC (no reorders); the
    # comparison below checks that layout too.
    assert any("int8_channels_last: 2 QConv / QBinary / MaxPool outputs stay NHWC" in p for p in fused.stats()["passes"]), fused.stats()["passes"]
    graph_ops = [r.op for r in plain.kernel_report({"x": shape})]
    assert "Conv" in graph_ops and "com.twinfer::QConv" not in graph_ops
    x = rng.standard_normal((5,) + shape[1:]).astype(np.float32)
    got = fused.run({"x": x})["y"].numpy()
    want = plain.run({"x": x})["y"].numpy()
    # The same int8 values, but the float path rounds each quantization of a
    # differently summed float: a value of r2 near a rounding boundary may
    # land one step away, which moves the outputs of its pixel (the last
    # convolution is 1x1) by one step of r2 times a weight; the other pixels
    # agree to float rounding. Over 10,000 seeds, of the 150 pixels (n, h, w)
    # none differed in 97.8% of runs, one in 1.7%, two in 0.4%, three in
    # 0.08% and four in 0.01%.
    step = cal.scale("r2")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3 * step)
    pixels_off = (np.abs(got - want) > 1e-4 * np.abs(want).max()).any(axis=1)
    assert pixels_off.sum() <= 6, f"{pixels_off.sum()} of {pixels_off.size} pixels differ"


def residual_cnn(rng):
    """A stem convolution and four residual blocks (Conv-Relu-Conv, Add, Relu),
    then a global average pool and a Gemm: the residual spine's Adds become
    QBinarys between QConvs, its last value read by a float tail."""
    inits = {"w0": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3,
             "b0": rng.standard_normal(16).astype(np.float32) * 0.1,
             "wf": rng.standard_normal((10, 16)).astype(np.float32) * 0.3,
             "bf": rng.standard_normal(10).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["s0"])]
    for blk in (1, 2, 3, 4):
        for j in (1, 2):
            inits[f"w{blk}{j}"] = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * (0.15 / j)
            inits[f"b{blk}{j}"] = rng.standard_normal(16).astype(np.float32) * 0.1
        prev = f"s{blk - 1}"
        nodes += [helper.make_node("Conv", [prev, f"w{blk}1", f"b{blk}1"], [f"a{blk}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"a{blk}"], [f"ar{blk}"]),
                  helper.make_node("Conv", [f"ar{blk}", f"w{blk}2", f"b{blk}2"], [f"c{blk}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"c{blk}", prev], [f"sum{blk}"]),
                  helper.make_node("Relu", [f"sum{blk}"], [f"s{blk}"])]
    nodes += [helper.make_node("GlobalAveragePool", ["s4"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return graph_model(nodes, inits, ["N", 3, 15, 13]), (2, 3, 15, 13)


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
def test_int8_residual_spine_stays_channels_last_through_its_adds(rng, device):
    """int8_channels_last keeps a residual network's spine NHWC: each block's
    output (a QBinary's) is read by the next block's QConv as NHWC, and the
    last one is turned back to NCHW (a Reshape and a Transpose) for the float
    tail. The values match the QDQ graph computed in float (optimize=False)
    and onnxruntime's float model. On the simulated device every node is
    placed as CUDA places it (CUDA's int8 plans: symmetric int8 activations)."""
    model, shape = residual_cnn(rng)
    # 8 calibration batches: with 4, one seed in about a hundred left a range
    # so narrow that the QDQ graph itself was 14% off the float model.
    data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
    cal = calibrate(model, data, calibrator="minmax", progress=False)
    kw = {} if device == "cpu" else dict(sim_coverage="cuda", allow_cpu_fallback=False)
    fused = twinfer.load(model, device=device, precision="int8", calibration=cal, **kw)
    plain = twinfer.load(model, device="cpu", precision="int8", calibration=cal, optimize=False)
    if device != "cpu":
        rows = fused.kernel_report({"x": shape})
        assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    ops = [r.op for r in fused.kernel_report({"x": shape})]
    # The first and last blocks' Adds stay float (a float reader beside the
    # next block's convolution); the middle two become QBinarys.
    assert ops.count("com.twinfer::QConv") == 9 and ops.count("com.twinfer::QBinary") == 2, ops
    notes = [p for p in fused.stats()["passes"] if p.startswith("int8_channels_last")]
    # The spine from block 1's conv to block 2's QBinary and the two blocks'
    # inner values: 9 values; the second QBinary's output, also read by the
    # float Add of block 3, back to NCHW once.
    assert notes == ["int8_channels_last: 9 QConv / QBinary / MaxPool outputs stay NHWC, 1 turned back to NCHW for other readers"], notes
    for batch in (1, 3):
        x = rng.standard_normal((batch,) + shape[1:]).astype(np.float32)
        got = fused.run({"x": x})["y"].numpy()
        want = plain.run({"x": x})["y"].numpy()
        # A layout mistake scrambles every channel (errors of the outputs' size
        # on most outputs); rounding differences move an output by a few steps
        # of the last layers. Over 600 seeds the mean error was at most 1.0% of
        # the scale and the largest 2.4%, but one seed in CI moved one output of
        # 30 by 3.1% (its mean: 0.9%).
        scale = np.abs(want).max()
        err = np.abs(got - want)
        assert err.mean() < 0.02 * scale and err.max() < 0.1 * scale, (err.mean() / scale, err.max() / scale)
        ref = ort_run_model(model, {"x": x})
        assert np.abs(got - ref).max() < 0.08 * np.abs(ref).max(), np.abs(got - ref).max() / np.abs(ref).max()


def per_channel_rows(w_nk: np.ndarray):
    """int8 per output channel (rows), symmetric, as weights='int8' stores them."""
    amax = np.abs(w_nk).max(axis=1)
    s = np.where(amax > 0, amax / 127, 1).astype(np.float32)
    q = np.clip(np.rint(w_nk / s[:, None]), -127, 127).astype(np.int8)
    return q.astype(np.float32) * s[:, None]


@pytest.mark.parametrize("k", [131, 1100])  # 1100: K is summed in slices (tiles of <= 1024)
def test_weight_only_int8_matches_numpy_and_shrinks_constants(rng, k):
    n1, n2 = 197, 45
    w1 = rng.standard_normal((k, n1)).astype(np.float32) * 0.1
    b1 = rng.standard_normal(n1).astype(np.float32)
    w2 = rng.standard_normal((n2, n1)).astype(np.float32) * 0.1  # Gemm transB = 1
    b2 = rng.standard_normal(n2).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["r2"]),
        helper.make_node("Gemm", ["r2", "w2", "b2"], ["y"], transB=1, alpha=1.5, beta=0.5),
    ]
    model = graph_model(nodes, {"w1": w1, "b1": b1, "w2": w2, "b2": b2, "shape": np.array([-1, n1], np.int64)},
                        ["N", 3, k])
    e8 = twinfer.load(model, device="cpu", weights="int8")
    e32 = twinfer.load(model, device="cpu")
    for batch in (1, 4):
        x = rng.standard_normal((batch, 3, k)).astype(np.float32)
        r = np.maximum(x @ per_channel_rows(w1.T).T + b1, 0).reshape(-1, n1)
        want = 1.5 * r @ per_channel_rows(w2).T + 0.5 * b2
        got = e8.run({"x": x})["y"].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        # and it is not simply the float32 model
        assert np.abs(e32.run({"x": x})["y"].numpy() - got).max() > 1e-5
    report = e8.kernel_report({"x": (2, 3, k)})
    assert [r.op for r in report].count("com.twinfer::MatMulW8") == 2, report
    b8 = e8.memory_report({"x": (2, 3, k)})["constant_bytes"]
    b32 = e32.memory_report({"x": (2, 3, k)})["constant_bytes"]
    weights32 = w1.nbytes + w2.nbytes
    assert b32 >= weights32 and b8 <= b32 - 0.7 * weights32, (b8, b32)


def test_weight_only_int8_transformer_block_stays_close(rng):
    model, shape = transformer_block(rng, d=64, ff=160)
    e8 = twinfer.load(model, device="cpu", weights="int8")
    ops = [r.op for r in e8.kernel_report({"x": shape})]
    assert ops.count("com.twinfer::MatMulW8") == 6, ops
    x = rng.standard_normal(shape).astype(np.float32)
    want = ort_run_model(model, {"x": x})
    got = e8.run({"x": x})["y"].numpy()
    # int8 weights: relative error of a few per mille.
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def _ort_model_bytes(model) -> bytes:
    """The model for onnxruntime: its IR version capped at 10, what the GPU
    machine's onnxruntime reads (its onnx writes newer)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    m.ir_version = min(m.ir_version, 10)
    return m.SerializeToString()


def ort_run_model(model, feeds):
    # run_ort caps the IR version at what the installed onnxruntime reads (the
    # GPU machine's onnx writes a newer one than its onnxruntime takes).
    from onnx_helpers import run_ort

    return run_ort(model, feeds)[0]


def test_bad_weights_option_is_refused(rng):
    model, _ = mlp(rng)
    with pytest.raises(twinfer.InvalidArgumentError, match="weights"):
        twinfer.load(model, device="cpu", weights="int4")


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_movement_ops_between_qdq_pairs_run_on_int8(rng, qtype):
    """DQ -> Reshape / Transpose / Concat / Slice -> Q with one scale
    and zero point, as onnxruntime's quantize_static writes them: the ops run
    on the integers with the pairs dropped, and the result is exactly the QDQ
    graph's (onnxruntime, optimizations off)."""
    s, z = np.float32(0.037), qtype(3 if qtype == np.uint8 else -2)
    inits = {"s": s, "z": z, "shape": np.int64([0, 6, -1]), "starts": np.int64([1]), "ends": np.int64([6]),
             "axes": np.int64([2])}
    nodes = []

    def qdq(src, dst):  # dst_q = Q(src), dst = DQ(dst_q)
        nodes.extend([helper.make_node("QuantizeLinear", [src, "s", "z"], [dst + "_q"]),
                      helper.make_node("DequantizeLinear", [dst + "_q", "s", "z"], [dst])])

    qdq("x", "x0")
    nodes.append(helper.make_node("MaxPool", ["x0"], ["p"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]))
    qdq("p", "p0")
    nodes.append(helper.make_node("Reshape", ["p0", "shape"], ["r"]))
    qdq("r", "r0")
    nodes.append(helper.make_node("Transpose", ["r0"], ["t"], perm=[0, 2, 1]))
    qdq("t", "t0")
    qdq("x2", "x20")
    nodes.append(helper.make_node("Concat", ["t0", "x20"], ["c"], axis=1))
    qdq("c", "c0")
    nodes.append(helper.make_node("Slice", ["c0", "starts", "ends", "axes"], ["sl"]))
    nodes.append(helper.make_node("QuantizeLinear", ["sl", "s", "z"], ["y_q"]))
    nodes.append(helper.make_node("DequantizeLinear", ["y_q", "s", "z"], ["y"]))
    g = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("x", F, ["N", 6, 5, 7]),
                                           helper.make_tensor_value_info("x2", F, ["N", 4, 6])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    ops = [r.op for r in engine.kernel_report({"x": (2, 6, 5, 7), "x2": (2, 4, 6)})]
    # Left: quantizing the two float inputs and dequantizing the result; the
    # MaxPool runs on the integers too (oneDNN's int8 pooling).
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 1, ops
    assert any("int8 movement: 5 ops" in p for p in engine.stats()["passes"]), engine.stats()["passes"]
    for n in (1, 3):
        feeds = {"x": rng.standard_normal((n, 6, 5, 7)).astype(np.float32) * 3,
                 "x2": rng.standard_normal((n, 4, 6)).astype(np.float32) * 3}
        got = engine.run(feeds)["y"].numpy()
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        want = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("case", ["same_shape_u8", "same_shape_s8", "broadcast_u8", "broadcast_mixed"])
def test_elementwise_between_qdq_pairs_runs_as_one_int8_kernel(rng, op, case):
    """DQ(a), DQ(b) -> Add | Mul -> Q (onnxruntime's residual and mask Adds,
    GELU's Muls) becomes com.twinfer::QBinary and gives the QDQ graph's
    integers (onnxruntime, optimizations off)."""
    ta, tb, ty = {"same_shape_u8": (np.uint8,) * 3, "same_shape_s8": (np.int8,) * 3, "broadcast_u8": (np.uint8,) * 3,
                  "broadcast_mixed": (np.uint8, np.int8, np.uint8)}[case]
    broadcast = case.startswith("broadcast")
    sa, sb = ((2, 5, 9, 11), (5, 1, 11)) if broadcast else ((2, 5, 9, 11), (2, 5, 9, 11))
    scale_y = 0.05 if op == "Add" else 0.2
    inits = {"sa": np.float32(0.031), "za": ta(9 if ta == np.uint8 else -3), "sb": np.float32(0.047),
             "zb": tb(120 if tb == np.uint8 else 4), "sy": np.float32(scale_y), "zy": ty(7 if ty == np.uint8 else -1)}
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]),
             helper.make_node(op, ["ad", "bd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "qbin", [helper.make_tensor_value_info("a", F, ["N", *sa[1:]]),
                                          helper.make_tensor_value_info("b", F, list(sb))],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    report = engine.kernel_report({"a": sa, "b": sb})
    impls = [r.kernel for r in report if r.op == "com.twinfer::QBinary"]
    assert len(impls) == 1 and op not in [r.op for r in report], report
    assert impls[0].endswith("(vectorised)"), impls
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"])
    for n in (2, 3):  # batch 3: b broadcasts against a
        feeds = {"a": (rng.standard_normal((n, *sa[1:])) * 3).astype(np.float32),
                 "b": (rng.standard_normal(sb if broadcast else (n, *sb[1:])) * 3).astype(np.float32)}
        if not broadcast and n == 3:
            continue  # same-shape cases: b's batch is fixed at 2
        np.testing.assert_array_equal(engine.run(feeds)["y"].numpy(), sess.run(None, feeds)[0])


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("fill", [None, 0.0, 0.25, "quantized 0"])
def test_zero_padding_between_qdq_pairs_pads_with_the_zero_point(rng, qtype, fill):
    """DQ -> Pad(constant) -> Q: a fill of 0 runs on the integers, padding with
    the zero point (exactly what 0 quantizes to); any other fill stays float.
    onnxruntime's quantizer writes the fill as DQ(Q(0)) ("quantized 0")."""
    s, z = np.float32(0.043), qtype(5 if qtype == np.uint8 else -7)
    inits = {"s": s, "z": z, "pads": np.int64([0, 0, 1, 2, 0, 0, 2, 1])}
    pad_in = ["x0", "pads"]
    fill_nodes = []
    if fill == "quantized 0":
        inits.update({"zero_f": np.float32(0.0), "fs": np.float32(1.0)})
        fill_nodes = [helper.make_node("QuantizeLinear", ["zero_f", "fs", "z"], ["fq"]),
                      helper.make_node("DequantizeLinear", ["fq", "fs", "z"], ["fill"])]
        pad_in.append("fill")
    elif fill is not None:
        inits["fill"] = np.float32(fill)
        pad_in.append("fill")
    nodes = fill_nodes + [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x0"]),
             helper.make_node("Pad", pad_in, ["p"]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "qpad", [helper.make_tensor_value_info("x", F, ["N", 3, 5, 6])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    moved = any("int8 movement: 1 ops" in p for p in engine.stats()["passes"])
    assert moved == (fill != 0.25), engine.stats()["passes"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"])
    for n in (1, 2):
        x = (rng.standard_normal((n, 3, 5, 6)) * 2).astype(np.float32)
        np.testing.assert_array_equal(engine.run({"x": x})["y"].numpy(), sess.run(None, {"x": x})[0])


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_int8_zero_padding_folds_into_the_int8_convolution(rng, qtype):
    """onnxruntime's QDQ form of a TensorFlow-style padded convolution:
    DQ -> Pad(fill DQ(Q(0))) -> Q -> DQ -> Conv -> Q. The Pad moves onto the
    integers and then into the QConv's pads; the QConv must pad with its x zero
    point (what 0 quantizes to), or the border outputs would be off by many
    steps. Compared with the QDQ graph in onnxruntime, optimizations off."""
    z = qtype(37 if qtype == np.uint8 else -11)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.3
    ws = (np.abs(w).reshape(6, -1).max(1) / 127).astype(np.float32)
    wq = np.clip(np.rint(w / ws[:, None, None, None]), -127, 127).astype(np.int8)
    inits = {"s": np.float32(0.031), "z": z, "pads": np.int64([0, 0, 1, 0, 0, 0, 2, 1]),
             "zero_f": np.float32(0.0), "one": np.float32(1.0), "wq": wq, "ws": ws, "wz": np.zeros(6, np.int8),
             "b": rng.standard_normal(6).astype(np.float32) * 0.1, "sy": np.float32(0.07), "zy": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("QuantizeLinear", ["zero_f", "one", "z"], ["fq"]),
             helper.make_node("DequantizeLinear", ["fq", "one", "z"], ["fill"]),
             helper.make_node("Pad", ["xd", "pads", "fill"], ["p"]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["pd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["pd", "wd", "b"], ["c"], strides=[2, 1]),
             helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "qpadconv", [helper.make_tensor_value_info("x", F, ["N", 4, 7, 9])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    assert any("fold_pad_conv: 1 Pad" in p for p in engine.stats()["passes"]), engine.stats()["passes"]
    ops = [r.op for r in engine.kernel_report({"x": (2, 4, 7, 9)})]
    assert "Pad" not in ops and "com.twinfer::QConv" in ops, ops
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"])
    for n in (1, 3):
        x = (rng.standard_normal((n, 4, 7, 9)) * 2).astype(np.float32)
        err = np.abs(engine.run({"x": x})["y"].numpy() - sess.run(None, {"x": x})[0]) / 0.07
        assert err.max() <= 1.0 + 1e-3, err.max()  # a requantization may round the other way


def residual_block(rng, c=8):
    """x -> Conv -> Relu -> Conv -> Add(x's Relu) -> Relu -> Conv -> y, a ResNet block."""
    def w(*s):
        return (rng.standard_normal(s) * 0.25).astype(np.float32)

    inits = {"w0": w(c, 3, 3, 3), "w1": w(c, c, 3, 3), "w2": w(c, c, 3, 3), "w3": w(5, c, 1, 1),
             "b0": w(c), "b1": w(c), "b2": w(c)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"])]
    return graph_model(nodes, inits, ["N", 3, 9, 11]), (2, 3, 9, 11)


def test_int8_residual_add_runs_as_one_int8_pass(rng):
    """precision="int8": a residual Add whose (ReLU'd) result feeds a quantized
    layer is quantized too and runs, with its ReLU, as one QBinary between the
    int8 convolutions. Checked against the same QDQ graph computed op by op
    (optimize=False: no fusion) and against float32 onnxruntime."""
    model, shape = residual_block(rng)
    data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    cal = calibrate(model, data, calibrator="minmax", progress=False)
    assert {"c2", "r0"} <= set(cal.amax)  # the Add's inputs are calibrated
    fused = twinfer.load(model, device="cpu", precision="int8", calibration=cal)
    plain = twinfer.load(model, device="cpu", precision="int8", calibration=cal, optimize=False)
    ops = [r.op for r in fused.kernel_report({"x": shape})]
    assert ops.count("com.twinfer::QBinary") == 1 and "Add" not in ops and "Relu" not in ops, ops
    x = rng.standard_normal((3,) + shape[1:]).astype(np.float32)
    got = fused.run({"x": x})["y"].numpy()
    # The same integers up to a requantization rounding the other way (one step of r2 times a weight).
    w3 = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w3")
    step = cal.scale("r2") * float(np.abs(w3).sum(axis=(1, 2, 3)).max())
    np.testing.assert_allclose(got, plain.run({"x": x})["y"].numpy(), rtol=0, atol=3 * step)
    want = ort_run_model(model, {"x": x})
    cos = float(np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.995, cos


def _stem_qdq_model(rng, y_scale, pool=None):
    """x -> Q/DQ -> Conv(DQ(w_q)) + bias -> Relu -> MaxPool 3x3/2 -> Q -> DQ -> y:
    a ResNet stem as a QDQ file has it, the MaxPool between the activation and
    the output's QuantizeLinear."""
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.25
    w_scale = (np.abs(w).max(axis=(1, 2, 3)) / 127).astype(np.float32)
    inits = {"xs": np.float32(0.05), "xz": np.int8(0), "wq": np.clip(np.rint(w / w_scale[:, None, None, None]),
                                                                      -127, 127).astype(np.int8),
             "ws": w_scale, "wz": np.zeros(16, np.int8), "b": rng.standard_normal(16).astype(np.float32) * 0.2,
             "ys": np.float32(y_scale), "yz": np.int8(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], **(pool or dict(kernel_shape=[3, 3], strides=[2, 2],
                                                                         pads=[1, 1, 1, 1]))),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["y"])]
    return graph_model(nodes, inits, ["N", 8, 15, 13], opset=13)


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
def test_maxpool_before_a_quantize_runs_on_the_convolutions_int8_output(rng, device):
    """Conv -> Relu -> MaxPool -> QuantizeLinear: the QuantizeLinear moves
    before the MaxPool (the maximum of the integers is the integer of the
    maximum), so the convolution writes int8 and the MaxPool pools int8,
    where before the convolution wrote float32 for a float MaxPool (ResNet's
    stem: 822 MB at batch 256). Against onnxruntime's run of the QDQ graph as
    written: the same integers but for a rounding tie in the convolution's
    requantization."""
    model = _stem_qdq_model(rng, 0.07)
    kw = {} if device == "cpu" else dict(sim_coverage="cuda", allow_cpu_fallback=False)
    engine = twinfer.load(model.SerializeToString(), device=device, **kw)
    rows = {r.op.split("::")[-1]: r for r in engine.kernel_report({"x": (2, 8, 15, 13)})}
    assert rows["QConv"].dtype == "int8" and rows["MaxPool"].dtype == "int8", rows
    assert any("int8 MaxPool: 1 moved" in p for p in engine.stats()["passes"]), engine.stats()["passes"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"])
    for n in (1, 3):
        x = rng.standard_normal((n, 8, 15, 13)).astype(np.float32) * 2
        got, want = engine.run({"x": x})["y"].numpy(), session.run(None, {"x": x})[0]
        diff = np.abs(got.astype(np.float64) - want)
        assert diff.max() <= 0.07 * (1 + 1e-5), diff.max()  # one output step at most
        assert np.mean(diff == 0) > 0.97


def test_maxpool_keeps_its_place_before_a_negative_scale(rng):
    """A negative scale turns the largest float into the smallest integer: no
    move, and the result is still the graph's (onnxruntime's)."""
    model = _stem_qdq_model(rng, -0.07)
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    assert not any("int8 MaxPool" in p for p in engine.stats()["passes"]), engine.stats()["passes"]
    assert {r.op: r.dtype for r in engine.kernel_report({"x": (2, 8, 15, 13)})}["MaxPool"] == "float32"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = rng.standard_normal((2, 8, 15, 13)).astype(np.float32) * 2
    want = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    diff = np.abs(engine.run({"x": x})["y"].numpy().astype(np.float64) - want)
    assert diff.max() <= 0.07 * (1 + 1e-5) and np.mean(diff == 0) > 0.97


def _stem_and_pointwise_qdq_model(rng, pool=None):
    """The stem of _stem_qdq_model, then two 1x1 convolutions (16 -> 16 with
    Relu, 16 -> 8), each output quantized: QConv -> MaxPool -> QConv -> QConv."""
    m = _stem_qdq_model(rng, 0.07, pool)
    g = m.graph
    g.output[0].name = "y0"
    for n in g.node:
        if n.output[0] == "y":
            n.output[0] = "y0"
    inits = {}
    prev = "y0"
    for i, (c, o, act) in enumerate([(16, 16, True), (16, 8, False)]):
        w = rng.standard_normal((o, c, 1, 1)).astype(np.float32) * 0.3
        ws = (np.abs(w).max(axis=(1, 2, 3)) / 127).astype(np.float32)
        inits.update({f"w{i}q": np.clip(np.rint(w / ws[:, None, None, None]), -127, 127).astype(np.int8),
                      f"w{i}s": ws, f"w{i}z": np.zeros(o, np.int8), f"o{i}s": np.float32(0.09), f"o{i}z": np.int8(0)})
        g.node.extend([helper.make_node("DequantizeLinear", [f"w{i}q", f"w{i}s", f"w{i}z"], [f"w{i}d"], axis=0),
                       helper.make_node("Conv", [prev, f"w{i}d"], [f"c{i}"])])
        out = f"c{i}"
        if act:
            g.node.append(helper.make_node("Relu", [out], [f"r{i}"]))
            out = f"r{i}"
        g.node.extend([helper.make_node("QuantizeLinear", [out, f"o{i}s", f"o{i}z"], [f"q{i}"]),
                       helper.make_node("DequantizeLinear", [f"q{i}", f"o{i}s", f"o{i}z"], [f"d{i}"])])
        prev = f"d{i}"
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items())
    g.output[0].name = prev
    return m


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("pool, kernel", [
    (None, "onednn pooling"),  # 3x3/2, padded: oneDNN's int8 pooling on NHWC bytes
    (dict(kernel_shape=[2, 2], strides=[2, 2]), "onednn pooling"),  # an odd size: the last row unread
    (dict(kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1), "onednn pooling"),  # ceil_mode: right padding
])
def test_int8_maxpool_between_channels_last_convolutions_pools_nhwc(rng, device, pool, kernel):
    """QConv -> MaxPool -> QConv -> QConv on int8: the MaxPool joins the NHWC
    group (channels_last_storage), so the stem writes NHWC, the MaxPool pools
    NHWC bytes and the 1x1 convolutions read them, no reorder between (a
    window oneDNN refused would go through pool.cc's loops on NCHW copies;
    since oneDNN takes windows that end before the input does, no valid one
    is left to refuse). The reference is onnxruntime's run of the QDQ graph
    as written."""
    model = _stem_and_pointwise_qdq_model(rng, pool)
    kw = {} if device == "cpu" else dict(sim_coverage="cuda", allow_cpu_fallback=False)
    engine = twinfer.load(model.SerializeToString(), device=device, **kw)
    notes = [p for p in engine.stats()["passes"] if p.startswith("int8_channels_last")]
    # The stem's, the MaxPool's and the first 1x1's (the last 1x1 writes float, its DequantizeLinear fused).
    assert notes == ["int8_channels_last: 3 QConv / QBinary / MaxPool outputs stay NHWC"], notes
    rows = engine.kernel_report({"x": (2, 8, 15, 13)})
    assert [r.op for r in rows].count("com.twinfer::QConv") == 3, rows
    assert {r.op: r.dtype for r in rows}["MaxPool"] == "int8", rows
    if device != "cuda":  # the CPU's kernels (the simulated device runs them too)
        assert {r.op: r.kernel for r in rows}["MaxPool"] == kernel, rows
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(_ort_model_bytes(model), so, providers=["CPUExecutionProvider"])
    for n in (1, 3):
        x = rng.standard_normal((n, 8, 15, 13)).astype(np.float32) * 2
        got, want = engine.run({"x": x})[model.graph.output[0].name].numpy(), session.run(None, {"x": x})[0]
        diff = np.abs(got.astype(np.float64) - want)
        assert diff.max() <= 2 * 0.09 * (1 + 1e-5), diff.max()  # a tie upstream may move a step or two
        assert np.mean(diff == 0) > 0.95, np.mean(diff == 0)
