"""Loops unrolled into plans (graph/passes/unroll_loops.cc) against the loop
kernel (TWINFER_UNROLL_LOOPS=0: the body's kernels built and run on every
iteration of every run) and onnxruntime (CPU EP), on ONNX's LinearAttention
as its function expands it: a Scan over the sequence carrying a [B, H, Dk,
Dv] state (the onnx package's own test models, the sequence dim made
symbolic). Not a test: no assertion, a table and a JSON line.

    python benchmarks/unrolled_loops.py                 # CPU, one thread
    python benchmarks/unrolled_loops.py --device sim    # the simulated device (says nothing of a GPU)
    python benchmarks/unrolled_loops.py --device cuda

Per-call median over --calls calls after warm-up; "first" is the first run
at that length (the plan built: unrolled, a copy of the body per step).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

CASES = {"linear attention (gated delta rule)": "test_linear_attention_gated_delta_expanded",
         "linear attention (plain)": "test_linear_attention_linear_expanded"}


def _model(case: str) -> bytes:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = next(c for c in load_model_tests(kind="node") if c.name == case).model
    for i in list(m.graph.input) + list(m.graph.output):
        dims = i.type.tensor_type.shape.dim
        if len(dims) > 1:
            dims[1].dim_param = "seq"  # [batch, seq, features]
    return m.SerializeToString()


def _feeds(model: bytes, seq: int, rng) -> dict:
    import onnx

    m = onnx.load_from_string(model)
    feeds = {}
    for i in m.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        dims[1] = seq
        feeds[i.name] = (0.3 * rng.standard_normal(dims)).astype(np.float32)
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--seq", type=int, nargs="+", default=[1, 16, 64, 128])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort

    import twinfer
    from twinfer._timing import measure, median_ms

    def _time(call, calls: int) -> float:
        return median_ms(measure(call, calls, warmup=5))

    rng = np.random.default_rng(0)
    rows = []
    for label, case in CASES.items():
        model = _model(case)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        engines = {}
        for mode, env in (("unrolled", "1"), ("loop_kernel", "0")):
            os.environ["TWINFER_UNROLL_LOOPS"] = env  # read when each plan is built
            engines[mode] = twinfer.load(model, device=args.device, num_threads=args.threads)
        for seq in args.seq:
            feeds = _feeds(model, seq, rng)
            row = {"model": label, "seq": seq}
            ref = sess.run(None, feeds)
            row["onnxruntime_ms"] = _time(lambda: sess.run(None, feeds), args.calls)
            for mode, e in engines.items():
                os.environ["TWINFER_UNROLL_LOOPS"] = "1" if mode == "unrolled" else "0"
                t = time.perf_counter()
                out = e.run(feeds)
                row[f"{mode}_first_ms"] = (time.perf_counter() - t) * 1e3
                row[f"{mode}_ms"] = _time(lambda: e.run(feeds), args.calls)
                row[f"{mode}_max_diff"] = max(float(np.max(np.abs(np.asarray(o.numpy()) - r)))
                                              for o, r in zip(out.values(), ref))
                rep = e.kernel_report(feeds)
                row[f"{mode}_steps"] = len(rep)
                row[f"{mode}_host_steps"] = sum(r.backend == "cpu" for r in rep) if args.device != "cpu" else 0
            rows.append(row)
        os.environ.pop("TWINFER_UNROLL_LOOPS", None)

    print(f"device {args.device}, {args.threads} thread(s), {args.calls} calls, ms per call (median)")
    print(f"{'model':38s} {'seq':>4s} {'unrolled':>9s} {'(first)':>8s} {'loop kernel':>12s} {'onnxruntime':>12s} "
          f"{'loop / unrolled':>16s} {'ort / unrolled':>15s} {'steps':>6s}")
    for r in rows:
        print(f"{r['model']:38s} {r['seq']:4d} {r['unrolled_ms']:9.3f} {r['unrolled_first_ms']:8.1f} "
              f"{r['loop_kernel_ms']:12.3f} {r['onnxruntime_ms']:12.3f} "
              f"{r['loop_kernel_ms'] / r['unrolled_ms']:15.2f}x {r['onnxruntime_ms'] / r['unrolled_ms']:14.2f}x "
              f"{r['unrolled_steps']:6d}")
    out = {"device": args.device, "threads": args.threads, "calls": args.calls, "rows": rows}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
