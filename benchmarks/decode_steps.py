"""Autoregressive decoding, where every step has a new shape (the past grows
by one token): a tiny GPT-2 merged by Hugging Face Optimum
(tests/data/gpt2_tiny_merged_decoder.onnx, If on use_cache_branch), greedy,
batch 1, twinfer against onnxruntime (CPU EP) step by step. twinfer builds a
plan per new shape (kept in its cache, 16 by default), so this measures that
cost beside the run itself: "again" repeats each step's inputs, the time of a
run whose plan is cached. Once the past has grown by one token twice, twinfer
builds each next step's plan ahead on a background thread (plan_ahead=True,
the default); the "on demand" row turns that off. Not a test: no assertion,
a table and a JSON line.

    python benchmarks/decode_steps.py                 # 40 steps, one thread
    python benchmarks/decode_steps.py --steps 100 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

MODEL = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpt2_tiny_merged_decoder.onnx"


def decode(run, steps: int, prompt: int = 5) -> tuple[list[float], list[float]]:
    """Per-step seconds of a first call and of the same call again."""
    ids = np.arange(1, prompt + 1, dtype=np.int64)[None]
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, 2, 0, 16), np.float32) for i in range(2) for kv in ("key", "value")}
    total, first, again = 0, [], []
    for step in range(steps):
        seq = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total + seq), np.int64),
                 "position_ids": np.arange(total, total + seq, dtype=np.int64)[None],
                 "use_cache_branch": np.array([step > 0]), **past}
        t = time.perf_counter()
        out = run(feeds)
        first.append(time.perf_counter() - t)
        t = time.perf_counter()
        run(feeds)
        again.append(time.perf_counter() - t)
        total += seq
        past = {f"past_key_values.{i}.{kv}": out[f"present.{i}.{kv}"] for i in range(2) for kv in ("key", "value")}
        ids = out["logits"][:, -1:].argmax(-1).astype(np.int64)
    return first, again


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort

    import twinfer

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(MODEL), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ort_first, ort_again = decode(lambda f: dict(zip(names, sess.run(None, f))), args.steps)
    del sess
    ms = lambda xs: statistics.median(xs[1:]) * 1e3  # noqa: E731  (step 0, the prompt, apart)
    rows = {}
    for name, ahead in (("on demand", False), ("twinfer", True)):
        e = twinfer.load(MODEL, device="cpu", num_threads=args.threads, plan_ahead=ahead)
        tw_first, tw_again = decode(lambda f: {k: v.numpy() for k, v in e.run(f).items()}, args.steps)
        rows[name] = (tw_first[0] * 1e3, ms(tw_first), ms(tw_again))
    rows["onnxruntime"] = (ort_first[0] * 1e3, ms(ort_first), ms(ort_again))
    print(f"{args.steps} greedy steps, batch 1, {args.threads} thread(s); ms, median over steps 1..{args.steps - 1}")
    print(f"{'runtime':12s} {'prompt':>8s} {'new step':>9s} {'again':>8s}")
    for k, (p, f, a) in rows.items():
        print(f"{k:12s} {p:8.3f} {f:9.3f} {a:8.3f}")
    print(f"onnxruntime / twinfer: new step {rows['onnxruntime'][1] / rows['twinfer'][1]:.2f}x, "
          f"again {rows['onnxruntime'][2] / rows['twinfer'][2]:.2f}x")
    out = {"steps": args.steps, "threads": args.threads, "ms": rows, "twinfer_stats": {
        k: v for k, v in e.stats().items() if k != "passes"}}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
