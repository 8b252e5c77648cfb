"""Single ops that were slow against onnxruntime on the CPU (stop 35's survey:
docs/performance.md, "CPU cliffs"), twinfer and onnxruntime in one process,
interleaved blocks, one thread by default: median ms and the ratio
twinfer / onnxruntime (lower is better for twinfer). Random data, random
weights. Not a test: no assertion, a table and a JSON line.

    python benchmarks/op_cliffs.py [--threads N] [--blocks 5] [--only Softmax]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from interleaved import abba_medians  # benchmarks/interleaved.py

F = TP.FLOAT


def model(nodes, ins, outs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, F, s) for n, s in ins],
                     [h.make_tensor_value_info(n, F, s) for n, s in outs], list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)
    return m, {n: s for n, s in ins}


def cases(rng):
    w = lambda *s: nh.from_array((rng.standard_normal(s) * 0.05).astype(np.float32))  # noqa: E731
    yield "Gelu tanh [1,128,3072]", model([h.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                                          [("x", [1, 128, 3072])], [("y", [1, 128, 3072])], opset=20)
    yield "Tanh [1,64,2000]", model([h.make_node("Tanh", ["x"], ["y"])], [("x", [1, 64, 2000])], [("y", [1, 64, 2000])])
    yield "TopK k=10 [64,32000]", model([h.make_node("TopK", ["x", "k"], ["y", "i"])], [("x", [64, 32000])],
                                        [("y", [64, 10])], [nh.from_array(np.array([10], np.int64), "k")])
    for op in ("Exp", "Log", "Sqrt", "Softplus", "Mish", "LeakyRelu", "Elu", "Selu", "Floor", "Round", "Sin", "Cos",
               "Atan", "Asin", "Acos", "Celu", "HardSigmoid", "HardSwish", "ThresholdedRelu", "Reciprocal"):
        yield f"{op} [8,128,3072]", model([h.make_node(op, ["x"], ["y"])], [("x", [8, 128, 3072])], [("y", [8, 128, 3072])],
                                          opset=18)
    for to, name in ((TP.FLOAT16, "float16"), (TP.INT32, "int32"), (TP.BOOL, "bool")):
        vi = h.make_tensor_value_info
        g = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=to)], "g", [vi("x", F, [8, 128, 3072])],
                         [vi("y", to, [8, 128, 3072])])
        cast_model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        cast_model.ir_version = 10
        yield f"Cast to {name} [8,128,3072]", (cast_model, {"x": [8, 128, 3072]})
    vi = h.make_tensor_value_info  # bool -> float32: a one-hot as jax2tf writes it (magika: Equal, Cast, MatMul)
    g = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=F)], "g", [vi("x", TP.BOOL, [5, 2048, 257])],
                     [vi("y", F, [5, 2048, 257])])
    cast_model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    cast_model.ir_version = 10
    yield "Cast bool to float [5,2048,257]", (cast_model, {"x": [5, 2048, 257]})
    yield "Sigmoid [1,64,2000]", model([h.make_node("Sigmoid", ["x"], ["y"])], [("x", [1, 64, 2000])],
                                       [("y", [1, 64, 2000])])
    yield "x*sigmoid(x) [1,32,256,256]", model(
        [h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Mul", ["x", "s"], ["y"])],
        [("x", [1, 32, 256, 256])], [("y", [1, 32, 256, 256])])
    yield "Einsum MaxViT q.k", model(
        [h.make_node("Einsum", ["q", "k"], ["y"], equation="B G H I D, B G H J D -> B G H I J")],
        [("q", [1, 64, 2, 49, 32]), ("k", [1, 64, 2, 49, 32])], [("y", [1, 64, 2, 49, 49])])
    yield "Einsum MaxViT a.v", model(
        [h.make_node("Einsum", ["a", "v"], ["y"], equation="B G H I J, B G H J D -> B G H I D")],
        [("a", [1, 64, 2, 49, 49]), ("v", [1, 64, 2, 49, 32])], [("y", [1, 64, 2, 49, 32])])
    # Reductions over a middle axis and the last one, reflect padding, InstanceNorm.
    axis1 = nh.from_array(np.array([1], np.int64), "axes")
    yield "ReduceSum axis 1 [64,128,768]", model([h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                                                 [("x", [64, 128, 768])], [("y", [64, 768])], [axis1])
    yield "ReduceMean axis 1 [8,64,56,56]", model([h.make_node("ReduceMean", ["x"], ["y"], axes=[1])],
                                                  [("x", [8, 64, 56, 56])], [("y", [8, 1, 56, 56])])
    yield "ReduceLogSumExp last [64,128,768]", model(
        [h.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[-1], keepdims=0)], [("x", [64, 128, 768])],
        [("y", [64, 128])])
    yield "ReduceMax last [8,128,768]", model([h.make_node("ReduceMax", ["x"], ["y"], axes=[-1], keepdims=0)],
                                              [("x", [8, 128, 768])], [("y", [8, 128])])
    pads = nh.from_array(np.array([0, 0, 3, 3, 0, 0, 3, 3], np.int64), "pads")
    yield "Pad reflect [1,64,128,128]", model([h.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
                                              [("x", [1, 64, 128, 128])], [("y", [1, 64, 134, 134])], [pads])
    scale, bias = nh.from_array(np.ones(64, np.float32), "s"), nh.from_array(np.zeros(64, np.float32), "b")
    yield "ConvTranspose 2x2/2 [1,64,64,64]", model(
        [h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", [1, 64, 64, 64])], [("y", [1, 64, 128, 128])],
        [nh.from_array((rng.standard_normal((64, 64, 2, 2)) * 0.05).astype(np.float32), "w"),
         nh.from_array((rng.standard_normal(64) * 0.05).astype(np.float32), "b")])
    # 1-D convolutions (backends/cpu/onednn_conv.cc's layout rule): magika's
    # Conv1D as tf2onnx writes it, [N, C, L, 1], and plain [N, C, L] ones.
    for n, c, k, length, kernel, stride, pad, four_d in ((5, 256, 512, 512, 5, 1, 0, True),
                                                         (1, 256, 256, 1000, 5, 1, 2, True),
                                                         (1, 512, 512, 4000, 3, 2, 0, False)):
        xs = [n, c, length, 1] if four_d else [n, c, length]
        ws = (k, c, kernel, 1) if four_d else (k, c, kernel)
        attrs = dict(strides=[stride, 1], pads=[pad, 0, pad, 0]) if four_d else dict(strides=[stride], pads=[pad, pad])
        yield f"Conv1d k{kernel}/{stride} {xs} -> {k}", model(
            [h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], [("x", xs)], [("y", None)],
            [nh.from_array((rng.standard_normal(ws) * 0.05).astype(np.float32), "w"),
             nh.from_array((rng.standard_normal(k) * 0.05).astype(np.float32), "b")])
    yield "DepthToSpace CRD 2 [1,256,64,64]", model(
        [h.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], [("x", [1, 256, 64, 64])],
        [("y", [1, 64, 128, 128])])
    yield "Transpose NCHW->NHWC [8,3,224,224]", model([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])],
                                                      [("x", [8, 3, 224, 224])], [("y", [8, 224, 224, 3])])
    yield "Transpose NCHW->NHWC [8,64,56,56]", model([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])],
                                                     [("x", [8, 64, 56, 56])], [("y", [8, 56, 56, 64])])
    yield "Transpose (0,2,1,3) [64,128,12,64]", model([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])],
                                                       [("x", [64, 128, 12, 64])], [("y", [64, 12, 128, 64])])
    yield "SpaceToDepth 2 [1,64,128,128]", model([h.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)],
                                                 [("x", [1, 64, 128, 128])], [("y", [1, 256, 64, 64])])
    bn = [nh.from_array(np.full(64, v, np.float32), n) for n, v in (("s", 1.0), ("bb", 0.0), ("m", 0.0), ("v", 1.0))]
    yield "BatchNorm [8,64,56,56]", model([h.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"])],
                                          [("x", [8, 64, 56, 56])], [("y", [8, 64, 56, 56])], bn)
    yield "InstanceNorm [4,64,64,64]", model([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
                                             [("x", [4, 64, 64, 64])], [("y", [4, 64, 64, 64])], [scale, bias])
    yield "MaxPool 3x3/2 unpadded [8,64,56,56]", model(
        [h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])], [("x", [8, 64, 56, 56])],
        [("y", [8, 64, 27, 27])])
    yield "MVN [8,64,56,56]", model([h.make_node("MeanVarianceNormalization", ["x"], ["y"])], [("x", [8, 64, 56, 56])],
                                    [("y", [8, 64, 56, 56])])
    yield "Softmax axis 1 [64,1000,49]", model([h.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", [64, 1000, 49])],
                                               [("y", [64, 1000, 49])])
    yield "RMSNorm [64,128,768]", model(
        [h.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1)], [("x", [64, 128, 768])], [("y", [64, 128, 768])],
        [nh.from_array(np.ones(768, np.float32), "g")], opset=23)
    yield "GridSample [1,32,64,64]", model([h.make_node("GridSample", ["x", "grid"], ["y"])],
                                           [("x", [1, 32, 64, 64]), ("grid", [1, 64, 64, 2])], [("y", [1, 32, 64, 64])],
                                           opset=20)
    g768, b768 = nh.from_array(np.ones(768, np.float32), "g"), nh.from_array(np.zeros(768, np.float32), "bb")
    yield "LayerNorm [64,128,768]", model([h.make_node("LayerNormalization", ["x", "g", "bb"], ["y"], axis=-1)],
                                          [("x", [64, 128, 768])], [("y", [64, 128, 768])], [g768, b768])
    win = nh.from_array(np.hanning(512).astype(np.float32), "win")
    step = nh.from_array(np.array(160, np.int64), "step")
    length = nh.from_array(np.array(512, np.int64), "len")
    shape = nh.from_array(np.array([1, 16000, 1], np.int64), "shp")
    yield "STFT 16000 / 512 / 160", model(
        [h.make_node("Reshape", ["x", "shp"], ["x3"]),
         h.make_node("STFT", ["x3", "step", "win", "len"], ["y"], onesided=1)],
        [("x", [1, 16000])], [("y", [1, 97, 257, 2])], [win, step, length, shape])
    # Softmax rows (ops/nn/softmax_rows.h): BERT's scores at batch 64, ViT's,
    # a decode step's, a classifier head's.
    for shape in ([64, 12, 128, 128], [4, 12, 197, 197], [1, 32, 1, 1024], [8, 1000]):
        yield f"Softmax [{','.join(map(str, shape))}]", model(
            [h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", shape)], [("y", shape)])
    for shape in ([64, 12, 128, 128], [200, 32], [8, 1000]):  # LogSoftmax: scores, a CTC head, a classifier
        yield f"LogSoftmax [{','.join(map(str, shape))}]", model(
            [h.make_node("LogSoftmax", ["x"], ["y"], axis=-1)], [("x", shape)], [("y", shape)])
    # The Attention op (opset 23; onnxruntime's contrib attention ops become it
    # at load): B, Hq, Hkv, Sq, S, D.
    for b, hq, hkv, sq, sk, d in ((1, 8, 8, 128, 128, 64), (1, 8, 2, 512, 512, 64), (4, 12, 12, 197, 197, 64),
                                  (1, 32, 8, 1, 1024, 128)):
        yield f"Attention {b},{hq},{hkv},{sq},{sk},{d}", model(
            [h.make_node("Attention", ["q", "k", "v"], ["y"])],
            [("q", [b, hq, sq, d]), ("k", [b, hkv, sk, d]), ("v", [b, hkv, sk, d])], [("y", [b, hq, sq, d])],
            opset=23)
    # Large steps (oneDNN's matmul each step) and small ones (a loop over R^T:
    # backends/cpu/onednn_rnn.cc, StepProduct).
    for op, gates in (("LSTM", 4), ("GRU", 3)):
        for inp, hidden, batch in ((256, 512, 1), (64, 32, 1), (64, 64, 1), (64, 128, 1), (64, 32, 4)):
            ws = [w(1, gates * hidden, inp), w(1, gates * hidden, hidden), w(1, 2 * gates * hidden)]
            for t, n in zip(ws, "WRB"):
                t.name = n
            attrs = {"linear_before_reset": 1} if op == "GRU" else {}
            name = f"{op} seq 100, {inp} -> {hidden}" + (f", batch {batch}" if batch > 1 else "")
            yield name, model(
                [h.make_node(op, ["x", "W", "R", "B"], ["y"], hidden_size=hidden, **attrs)],
                [("x", [100, batch, inp])], [("y", [100, 1, batch, hidden])], ws)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.3)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    import onnxruntime as ort

    import twinfer

    rng = np.random.default_rng(0)
    rows = {}
    print(f"{'op':30s} {'twinfer ms':>11s} {'ort ms':>9s} {'ratio':>6s}   ({args.threads} thread(s))")
    for name, (m, ins) in cases(rng):
        if args.only not in name:
            continue
        bools = {i.name for i in m.graph.input if i.type.tensor_type.elem_type == TP.BOOL}
        feeds = {n: rng.random(s) < 0.5 if n in bools else rng.standard_normal(s).astype(np.float32)
                 for n, s in ins.items()}
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        e = twinfer.load(m.SerializeToString(), device="cpu", num_threads=args.threads)
        runs = {"twinfer": lambda: e.run(feeds), "ort": lambda: sess.run(None, feeds)}
        medians = abba_medians(runs, args.blocks, args.block_seconds)
        tw, o = medians["twinfer"], medians["ort"]
        rows[name] = (tw, o, tw / o)
        print(f"{name:30s} {tw:11.3f} {o:9.3f} {tw / o:6.2f}")
    print(json.dumps({"threads": args.threads, "ms": rows}))


if __name__ == "__main__":
    main()
