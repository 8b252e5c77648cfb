"""ai.onnx.preview FlexAttention on the CPU: twinfer's expansion into MatMul,
Softmax and MatMul (graph/passes/expand_flex_attention.cc, the default),
twinfer's reference kernel (optimize=False: what every FlexAttention node ran
before the expansion), and onnxruntime, which has no FlexAttention, running
the same attention spelled out in standard ops (opset 17: K/V repeated per
query-head group, the scale split over Q and K, Softmax, MatMul). One process,
interleaved blocks, one thread by default; outputs compared first. Not a
test: a table and a JSON line.

    python benchmarks/flex_attention.py [--threads 1] [--blocks 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import twinfer
from twinfer._timing import measure, median_ms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_flex_attention import flex_model  # noqa: E402  (the model the tests check)

SHAPES = [  # B, Hq, Hkv, L, S, D
    (1, 8, 8, 128, 128, 64),
    (1, 8, 2, 512, 512, 64),
    (4, 12, 12, 197, 197, 64),
    (1, 32, 8, 1, 1024, 128),  # a decode step with grouped heads
]


def spelled_out(b, hq, hkv, lq, s, d):
    """FlexAttention's definition in opset-17 ops, for onnxruntime."""
    g = hq // hkv
    root = nh.from_array(np.array(np.sqrt(np.float32(1 / np.sqrt(d))), np.float32), "root")
    wide = nh.from_array(np.array([b, hkv, g, s, d], np.int64), "wide")
    flat = nh.from_array(np.array([b, hq, s, d], np.int64), "flat")
    axes = nh.from_array(np.array([2], np.int64), "axes")
    nodes = []
    for x in ("K", "V"):
        nodes += [h.make_node("Unsqueeze", [x, "axes"], [x + "u"]), h.make_node("Expand", [x + "u", "wide"], [x + "e"]),
                  h.make_node("Reshape", [x + "e", "flat"], [x + "r"])]
    nodes += [h.make_node("Mul", ["Q", "root"], ["qs"]), h.make_node("Transpose", ["Kr"], ["kt"], perm=[0, 1, 3, 2]),
              h.make_node("Mul", ["kt", "root"], ["ks"]), h.make_node("MatMul", ["qs", "ks"], ["sc"]),
              h.make_node("Softmax", ["sc"], ["p"], axis=-1), h.make_node("MatMul", ["p", "Vr"], ["Y"])]
    io = [h.make_tensor_value_info(n, TP.FLOAT, sh) for n, sh in (("Q", [b, hq, lq, d]), ("K", [b, hkv, s, d]),
                                                                   ("V", [b, hkv, s, d]))]
    graph = h.make_graph(nodes, "attention", io, [h.make_tensor_value_info("Y", TP.FLOAT, None)],
                         [root, wide, flat, axes])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=5, help="interleaved blocks; the median of their medians")
    ap.add_argument("--calls", type=int, default=5, help="timed calls a block")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    rows = []
    print("| B, Hq, Hkv, L, S, D | twinfer (expanded) ms | twinfer reference kernel ms | onnxruntime (spelled out) ms "
          "| expanded / onnxruntime | reference / expanded |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in SHAPES:
        b, hq, hkv, lq, s, d = shape
        feeds = {"Q": rng.standard_normal((b, hq, lq, d)).astype(np.float32),
                 "K": rng.standard_normal((b, hkv, s, d)).astype(np.float32),
                 "V": rng.standard_normal((b, hkv, s, d)).astype(np.float32)}
        model = flex_model(np.float32, [b, hq, lq, d], [b, hkv, s, d], [b, hkv, s, d])
        expanded = twinfer.load(model, device="cpu", num_threads=args.threads)
        kernel = twinfer.load(model, device="cpu", num_threads=args.threads, optimize=False)
        sess = ort.InferenceSession(spelled_out(*shape).SerializeToString(), so, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)[0]
        for e in (expanded, kernel):
            np.testing.assert_allclose(e.run(feeds)["Y"].numpy(), want, rtol=1e-4, atol=1e-4)
        runs = {"expanded": lambda: expanded.run(feeds), "kernel": lambda: kernel.run(feeds),
                "ort": lambda: sess.run(None, feeds)}
        blocks = {k: [] for k in runs}
        for _ in range(args.blocks):
            for k, fn in runs.items():
                blocks[k].append(median_ms(measure(fn, args.calls, warmup=1)))
        ms = {k: statistics.median(v) for k, v in blocks.items()}
        rows.append({"shape": shape, **ms})
        print(f"| {', '.join(map(str, shape))} | {ms['expanded']:.2f} | {ms['kernel']:.2f} | {ms['ort']:.2f} | "
              f"{ms['expanded'] / ms['ort']:.2f} | {ms['kernel'] / ms['expanded']:.1f}x |", flush=True)
    print(json.dumps({"threads": args.threads, "twinfer": twinfer.__version__, "onnxruntime": ort.__version__,
                      "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
