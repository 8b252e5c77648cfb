"""Time twinfer's Conv against onnxruntime on the conv shapes of a CNN.

One single-node model per distinct shape (constant weights + bias, batch 1
unless --batch), both engines with the same thread count; totals are
weighted by how often the shape occurs in the network. Not a test.

    python benchmarks/micro/conv_shapes.py                      # ResNet-50, 2 threads
    python benchmarks/micro/conv_shapes.py --net mobilenetv2
    python benchmarks/micro/conv_shapes.py --layouts            # also force plain / blocked

--layouts re-runs twinfer with TWINFER_CONV_LAYOUT=plain / blocked / any (in
subprocesses, the variable is read once per process) next to the default
rule of backends/cpu/onednn_conv.cc, the measurement that rule came from.
On a shared machine use --rounds 3 (each shape keeps its best time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter

import numpy as np
from onnx import helper, numpy_helper

# (in channels, out channels, input H=W, kernel, stride, pad, group)


def resnet50_shapes():
    shapes = [(3, 64, 224, 7, 2, 3, 1)]
    cin, h = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            shapes.append((cin, width, h, 1, 1, 0, 1))
            shapes.append((width, width, h, 3, s, 1, 1))  # torchvision v1.5: stride on the 3x3
            h2 = h // s
            shapes.append((width, width * 4, h2, 1, 1, 0, 1))
            if i == 0:
                shapes.append((cin, width * 4, h, 1, s, 0, 1))  # downsample
            cin, h = width * 4, h2
    return shapes


def mobilenetv2_shapes():
    shapes = [(3, 32, 224, 3, 2, 1, 1)]
    cin, h = 32, 112
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                shapes.append((cin, hidden, h, 1, 1, 0, 1))
            shapes.append((hidden, hidden, h, 3, stride, 1, hidden))  # depthwise
            h //= stride
            shapes.append((hidden, c, h, 1, 1, 0, 1))
            cin = c
    shapes.append((320, 1280, 7, 1, 1, 0, 1))
    return shapes


NETS = {"resnet50": resnet50_shapes, "mobilenetv2": mobilenetv2_shapes}


def conv_model(shape, batch):
    cin, cout, h, k, s, p, g = shape
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin // g, k, k)) / np.sqrt(cin // g * k * k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                            group=g)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", 1, [batch, cin, h, h])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    x = rng.standard_normal((batch, cin, h, h)).astype(np.float32)
    return model, x


def best_ms(fn, iters, repeats=5):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e3


def time_twinfer(shapes, batch, threads, iters):
    import twinfer

    out = []
    for shape in shapes:
        model, x = conv_model(shape, batch)
        eng = twinfer.load(model, device="cpu", num_threads=threads)
        out.append(best_ms(lambda: eng.run({"x": x}), iters))
    return out


def time_ort(shapes, batch, threads, iters):
    import onnxruntime as ort

    out = []
    for shape in shapes:
        model, x = conv_model(shape, batch)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out.append(best_ms(lambda: sess.run(None, {"x": x}), iters))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", choices=sorted(NETS), default="resnet50")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat all measurements, keeping each shape's best (for shared machines)")
    ap.add_argument("--layouts", action="store_true", help="also time TWINFER_CONV_LAYOUT=plain, =blocked, =any")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--_twinfer_only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    counts = Counter(NETS[args.net]())
    shapes = list(counts)
    if args._twinfer_only:  # subprocess mode for --layouts
        print(json.dumps(time_twinfer(shapes, args.batch, args.threads, args.iters)))
        return

    def measure_all():
        cols = {"twinfer": time_twinfer(shapes, args.batch, args.threads, args.iters)}
        if args.layouts:
            for layout in ("plain", "blocked", "any"):
                env = dict(os.environ, TWINFER_CONV_LAYOUT=layout)
                cmd = [sys.executable, __file__, "--_twinfer_only", "--net", args.net, "--threads",
                       str(args.threads), "--batch", str(args.batch), "--iters", str(args.iters)]
                res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                cols[layout] = json.loads(res.stdout.strip().splitlines()[-1])
        cols["onnxruntime"] = time_ort(shapes, args.batch, args.threads, args.iters)
        return cols

    cols = measure_all()
    for _ in range(args.rounds - 1):
        for name, times in measure_all().items():
            cols[name] = [min(a, b) for a, b in zip(cols[name], times)]

    names = list(cols)
    print(f"{args.net} conv shapes, batch {args.batch}, {args.threads} threads, best-of-5 mean ms per run"
          + (f", best of {args.rounds} rounds" if args.rounds > 1 else ""))
    print(f"{'cin':>5} {'cout':>5} {'hw':>4} {'k':>2} {'s':>2} {'grp':>4} {'x':>3} " +
          " ".join(f"{n:>11}" for n in names) + f" {'ratio':>6}")
    totals = dict.fromkeys(names, 0.0)
    for i, shape in enumerate(shapes):
        cin, cout, h, k, s, p, g = shape
        row = {n: cols[n][i] for n in names}
        for n in names:
            totals[n] += row[n] * counts[shape]
        print(f"{cin:5d} {cout:5d} {h:4d} {k:2d} {s:2d} {g:4d} {counts[shape]:3d} " +
              " ".join(f"{row[n]:11.3f}" for n in names) + f" {row['twinfer'] / row['onnxruntime']:6.2f}")
    print("total (weighted by count): " + ", ".join(f"{n} {totals[n]:.2f} ms" for n in names) +
          f"; twinfer/onnxruntime = {totals['twinfer'] / totals['onnxruntime']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"net": args.net, "threads": args.threads, "batch": args.batch,
                       "shapes": [list(s) + [counts[s]] for s in shapes], "ms": cols, "total_ms": totals}, f, indent=1)


if __name__ == "__main__":
    main()
