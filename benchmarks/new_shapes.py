"""What a new input shape costs: MiniLM (all-MiniLM-L6-v2, real weights)
run at one sentence length after another, batch 1, twinfer against
onnxruntime (CPU EP). twinfer builds a plan per new shape (its kernels,
its memory plan), kept in a cache of 16, so a length's first run pays for
that and a second run at it does not; onnxruntime plans nothing, so its two
are alike. Also the resident memory after 16 lengths (each plan holds its
kernels; packed weights are shared, backends/cpu/onednn_common.h). The
lengths come in a shuffled order: in increasing order twinfer would build
each next length's plan ahead (plan_ahead), which is what decode_steps.py
measures; here every length is one no run foresaw. Last, a length whose
plan is cached, run on one thread alone and then while a second thread runs
new lengths on the same engine (every plan builds outside the plan cache's
lock, so a cached run does not wait for another's plan). Not a test: no
assertion, a table and a JSON line.

    python benchmarks/new_shapes.py                  # lengths 5..44, one thread
    python benchmarks/new_shapes.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def feeds(names, length: int) -> dict:
    f = {"input_ids": np.full((1, length), 7, np.int64), "attention_mask": np.ones((1, length), np.int64)}
    if "token_type_ids" in names:
        f["token_type_ids"] = np.zeros((1, length), np.int64)
    return f


def per_length(run, names, lengths) -> tuple[list[float], list[float]]:
    first, again = [], []
    for n in lengths:
        f = feeds(names, n)
        t = time.perf_counter()
        run(f)
        first.append(time.perf_counter() - t)
        t = time.perf_counter()
        run(f)
        again.append(time.perf_counter() - t)
    return first, again


def cached_while_planning(e, names, length: int, new_lengths, runs: int = 150) -> dict:
    """Per-run ms of a cached length on this thread: alone, and while
    another thread runs `new_lengths` (each a new plan) on the same engine."""
    f = feeds(names, length)
    e.run(f)

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            e.run(f)
            out.append((time.perf_counter() - t) * 1e3)
        return out

    alone = timed(runs)
    stop, planned = threading.Event(), []

    def planner():
        for n in new_lengths:
            if stop.is_set():
                return
            e.run(feeds(names, n))
            planned.append(n)

    th = threading.Thread(target=planner)
    th.start()
    busy = timed(runs)
    stop.set()
    th.join()
    pct = lambda xs, q: float(np.percentile(xs, q))  # noqa: E731
    return {"alone_p50": pct(alone, 50), "alone_p99": pct(alone, 99), "planning_p50": pct(busy, 50),
            "planning_p99": pct(busy, 99), "planning_max": max(busy), "new_plans_meanwhile": len(planned)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--first", type=int, default=5)
    ap.add_argument("--count", type=int, default=40)
    args = ap.parse_args()

    import onnxruntime as ort

    import twinfer
    from twinfer.models import minilm

    path = str(minilm.export_onnx())
    lengths = list(range(args.first, args.first + args.count))
    random.Random(0).shuffle(lengths)  # no progression (see above)
    e = twinfer.load(path, device="cpu", num_threads=args.threads)
    names = [i.name for i in e.inputs]
    before = rss_mb()
    per_length(e.run, names, lengths[:16])
    grown = rss_mb() - before
    tw_first, tw_again = per_length(e.run, names, lengths[16:])  # past the cache: every plan new
    del e
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_first, ort_again = per_length(lambda f: sess.run(None, f), names, lengths[16:])
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    rows = {"twinfer": (ms(tw_first), ms(tw_again)), "onnxruntime": (ms(ort_first), ms(ort_again))}
    print(f"MiniLM, batch 1, {len(lengths) - 16} lengths of {args.first}..{args.first + args.count - 1}, each new, {args.threads} thread(s); ms, median")
    print(f"{'runtime':12s} {'new length':>11s} {'again':>8s}")
    for k, (f, a) in rows.items():
        print(f"{k:12s} {f:11.2f} {a:8.2f}")
    print(f"twinfer resident memory grew {grown:.0f} MB over 16 lengths (16 cached plans)")
    e = twinfer.load(path, device="cpu", num_threads=args.threads, plan_ahead=False)
    new = list(range(60, 260))
    random.Random(1).shuffle(new)
    busy = cached_while_planning(e, names, 24, new)
    print(f"length 24, plan cached, on one thread: alone p50 {busy['alone_p50']:.2f} / p99 "
          f"{busy['alone_p99']:.2f} ms; while another thread planned {busy['new_plans_meanwhile']} new "
          f"lengths p50 {busy['planning_p50']:.2f} / p99 {busy['planning_p99']:.2f} / max "
          f"{busy['planning_max']:.2f} ms")
    print(json.dumps({"threads": args.threads, "ms": rows, "rss_growth_mb_16_plans": grown,
                      "cached_while_planning_ms": busy}))


if __name__ == "__main__":
    main()
