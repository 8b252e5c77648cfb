"""Soak: one engine shared by 8 threads, mixed input shapes, a million runs
(or an hour), resident memory at the start and the end. Not a test: it prints
a table and writes JSON; it exits 1 when memory grew by more than --tolerance
(5%) or a checked output was wrong.

    nice -n 10 python benchmarks/soak.py                      # 1,000,000 runs, 8 threads
    python benchmarks/soak.py --seconds 3600 --runs 0         # an hour instead
    python benchmarks/soak.py --runs 20000 --json soak.json   # a quick look

The model is a small transformer-style block with two dynamic dims (batch,
sequence): MatMul + bias + Tanh + MatMul, a residual Add,
LayerNormalization, Softmax over the sequence, a reduction. Shapes are drawn
from 12 common (batch, sequence) pairs, and 1 run in 100 takes a random
sequence length in [1, 96], so the per-shape plan cache (16 plans) keeps
building new plans and evicting old ones: what a server with variable
inputs does all day. Every 500th run of each thread is checked against NumPy.

"Start" is measured after a warm-up that ran every common shape on every
thread (first plans, arenas, the context pool, allocator arenas are in
place); "end" after the last run. RSS is sampled every --sample seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time

import numpy as np
import psutil
from onnx import TensorProto, helper, numpy_helper

D, H = 64, 128
COMMON = [(b, s) for b in (1, 2, 4) for s in (8, 16, 33, 64)]


def build_model(rng: np.random.Generator):
    w1 = (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32)
    b1 = (rng.standard_normal(H) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((H, D)) / np.sqrt(H)).astype(np.float32)
    gamma = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(D)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (gamma, "g"), (beta, "b"))]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("Softmax", ["n"], ["p"], axis=1),
        helper.make_node("ReduceMean", ["p"], ["y"], keepdims=0, axes=[1]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", D])
    g = helper.make_graph(nodes, "soak_block", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m, (w1, b1, w2, gamma, beta)


def reference(x, w1, b1, w2, gamma, beta):
    r = np.tanh(x @ w1 + b1) @ w2 + x
    mu = r.mean(-1, keepdims=True)
    var = ((r - mu) ** 2).mean(-1, keepdims=True)
    n = (r - mu) / np.sqrt(var + 1e-5) * gamma + beta
    e = np.exp(n - n.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).mean(1)


def rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1_000_000, help="total runs over all threads (0: no limit)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: no limit)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--warmup", type=int, default=300_000, help="runs before 'start' is measured")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest allowed RSS growth, start to end")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    if not args.runs and not args.seconds:
        ap.error("give --runs or --seconds")

    import twinfer

    rng = np.random.default_rng(2026)
    model, weights = build_model(rng)
    # One CPU thread per run: 8 Python threads already oversubscribe a small machine.
    engine = twinfer.load(model.SerializeToString(), num_threads=1)
    proc = psutil.Process()

    def feed(r: np.random.Generator, b: int, s: int):
        return r.standard_normal((b, s, D)).astype(np.float32)

    lock = threading.Lock()
    done = [0]
    errors: list[str] = []
    stop = threading.Event()
    # Inputs are made ahead (making them costs more than a run): a pool per
    # thread, made before "start" is measured.
    pools = [{bs: [feed(np.random.default_rng(1000 + k), *bs) for _ in range(4)] for bs in COMMON}
             for k in range(args.threads)]

    def worker(k: int, limit: int):
        r = np.random.default_rng(2000 + k + limit)
        pool = pools[k]
        local = 0
        while not stop.is_set():
            if r.random() < 0.01:
                bs = (int(r.integers(1, 5)), int(r.integers(1, 97)))
                x = feed(r, *bs)
            else:
                bs = COMMON[int(r.integers(len(COMMON)))]
                x = pool[bs][int(r.integers(4))]
            y = engine.run({"x": x})["y"].numpy()
            local += 1
            if local % 500 == 0:
                want = reference(x.astype(np.float64), *weights)
                if not np.allclose(y, want, rtol=1e-4, atol=1e-5):
                    with lock:
                        errors.append(f"thread {k}: shape {bs}: max error {np.abs(y - want).max():.3g}")
                    stop.set()
            if local % 100 == 0:
                with lock:
                    done[0] += 100
                    if limit and done[0] >= limit:
                        stop.set()
        with lock:
            done[0] += local % 100

    def phase(limit: int) -> list[threading.Thread]:
        stop.clear()
        done[0] = 0
        ts = [threading.Thread(target=worker, args=(k, limit)) for k in range(args.threads)]
        for t in ts:
            t.start()
        return ts

    # Warm-up: the same mix, until the plan cache, the context pool and the
    # allocator's per-thread arenas have reached their working size.
    for t in phase(args.warmup):
        t.join()
    warmup_runs = done[0]

    t0 = time.perf_counter()
    start_rss = rss_mb(proc)
    samples = [(0.0, start_rss)]
    ts = phase(args.runs)
    while not stop.wait(args.sample):
        elapsed = time.perf_counter() - t0
        samples.append((round(elapsed, 1), rss_mb(proc)))
        print(f"  {elapsed:8.0f} s  {done[0]:>10,} runs  RSS {samples[-1][1]:8.1f} MB", flush=True)
        if args.seconds and elapsed >= args.seconds:
            stop.set()
    for t in ts:
        t.join()
    seconds = time.perf_counter() - t0
    end_rss = rss_mb(proc)
    samples.append((round(seconds, 1), end_rss))
    growth = (end_rss - start_rss) / start_rss
    flat = abs(growth) <= args.tolerance
    result = {
        "runs": done[0], "warmup_runs": warmup_runs, "threads": args.threads, "seconds": round(seconds, 1),
        "runs_per_second": round(done[0] / seconds, 1),
        "rss_start_mb": round(start_rss, 1), "rss_end_mb": round(end_rss, 1),
        "rss_peak_mb": round(max(m for _, m in samples), 1), "growth": round(growth, 4),
        "flat_within_tolerance": flat, "tolerance": args.tolerance, "errors": errors,
        "rss_samples": samples,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(), "twinfer": twinfer.__version__, "numpy": np.__version__,
    }
    print(f"\n{done[0]:,} runs on {args.threads} threads in {seconds:.0f} s ({result['runs_per_second']:,.0f} runs/s)")
    print(f"RSS start {start_rss:.1f} MB, end {end_rss:.1f} MB, peak {result['rss_peak_mb']} MB: "
          f"{growth * 100:+.2f}% ({'flat' if flat else 'GREW'} within {args.tolerance * 100:.0f}%)")
    if errors:
        print("wrong outputs:", *errors, sep="\n  ")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if flat and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
