"""twinfer on a GPU against what users run today, in one run: six models at
batch 1 and a large batch (256 for the CNNs, 64 for the transformers at
sequence 128), twinfer fp32 / fp16 / bf16 next to PyTorch eager fp16 and
torch.compile(mode="max-autotune") fp16. Random weights (speed does not
depend on them); real shapes (224x224 images). Not a test: a table of
latency, throughput and ratios, and one JSON line.

    python benchmarks/gpu_vs_torch.py                        # everything (several minutes)
    python benchmarks/gpu_vs_torch.py --models resnet50 bert_base --batches 1 --no-compile
    python benchmarks/gpu_vs_torch.py --compile-only --budget 500   # torch.compile vs twinfer fp16 only

torch.compile is compiled once per batch with static shapes (dynamic=False),
as a user serving one batch size would; a second batch on one compiled module
would recompile it with a dynamic batch dimension, slower kernels than
torch's best. Its compile time (autotuning included: minutes per model) is
reported beside the row. --budget stops starting new models once that many
seconds have passed, so a time-limited GPU call still prints every finished
row; rows print as JSON lines as they finish.

Timing: CUDA events around each run on one stream, device inputs and
outputs (no host copies in the timed region), warm-up runs excluded (they
include twinfer's graph capture and torch.compile's autotuning), median of
--iterations runs. twinfer runs on torch's current stream.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

MODELS = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert_base", "minilm"]
# Asked for by name only (--models): HardSwish convolutions, whose bias stays in
# cuDNN's graph while the activation runs after it.
EXTRA = ["mobilenet_v3_large"]
LARGE = {"resnet50": 256, "mobilenet_v2": 256, "efficientnet_b0": 256, "vit_b_16": 64, "bert_base": 64, "minilm": 64,
         "mobilenet_v3_large": 256}
SEQ = 128


def build(name: str):
    """(module, example inputs (batch 1, CPU), input names, dynamic axes)."""
    import torch

    torch.manual_seed(0)
    if name in ("bert_base", "minilm"):
        from transformers import BertConfig, BertModel

        cfg = (BertConfig() if name == "bert_base" else
               BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536))
        bert = BertModel(cfg, add_pooling_layer=False).eval()

        class Encoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]

        ids = torch.randint(0, cfg.vocab_size, (1, SEQ))
        mask = torch.ones(1, SEQ, dtype=torch.int64)
        names = ["input_ids", "attention_mask"]
        return Encoder(bert), (ids, mask), names, {n: {0: "batch"} for n in names}
    import torchvision

    model = getattr(torchvision.models, name)().eval()
    return model, (torch.randn(1, 3, 224, 224),), ["input"], {"input": {0: "batch"}}


def inputs_for(name: str, batch: int, device: str):
    import torch

    if name in ("bert_base", "minilm"):
        ids = torch.randint(0, 30000, (batch, SEQ), device=device)
        return (ids, torch.ones(batch, SEQ, dtype=torch.int64, device=device))
    return (torch.randn(batch, 3, 224, 224, device=device),)


def time_cuda(fn, iterations: int, warmup: int) -> float:
    """Median ms of fn() on the current stream, by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_compiled(module, x16, args, result: dict) -> None:
    """torch.compile(max-autotune) for this batch alone: its compile seconds and
    median ms into result, or why it failed (the row keeps twinfer's figures)."""
    import torch

    try:
        torch._dynamo.reset()  # this batch's own static compile, not a recompile of the last one
        compiled = torch.compile(module, mode="max-autotune", dynamic=False)
        t0 = time.monotonic()
        compiled(*x16)
        torch.cuda.synchronize()
        result["torch.compile seconds to compile"] = round(time.monotonic() - t0, 1)
        result["torch.compile fp16"] = time_cuda(lambda: compiled(*x16), args.iterations, args.warmup)
    except Exception as e:  # noqa: BLE001
        result["torch.compile error"] = f"{type(e).__name__}: {e}"[:300]


def main() -> None:
    import torch

    import twinfer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=MODELS, choices=MODELS + EXTRA)
    ap.add_argument("--batches", nargs="*", default=["1", "large"])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile (slow to tune)")
    ap.add_argument("--compile-only", action="store_true",
                    help="torch.compile fp16 against twinfer fp16 only (eager and twinfer fp32/bf16 skipped)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no new model after this (rows finished so far are printed)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.compile_only and not args.compile:
        sys.exit("--compile-only and --no-compile leave nothing to compare")
    started = time.monotonic()
    if not torch.cuda.is_available() or not twinfer.cuda_available():
        sys.exit("needs a CUDA GPU visible to both torch and twinfer")
    warnings.filterwarnings("ignore")
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="twinfer-gpu-bench-"))
    failed = []  # (model, what failed): one model's failure must not cost the others' figures
    for name in args.models:
        if args.budget is not None and time.monotonic() - started > args.budget:
            failed.append((name, f"not started: --budget {args.budget:.0f} s spent"))
            print(json.dumps({"model": name, "error": failed[-1][1]}), flush=True)
            continue
        try:
            module, example, names, dyn = build(name)
            path = folder / f"{name}.onnx"
            torch.onnx.export(module, example, str(path), dynamo=False, input_names=names, output_names=["output"],
                              dynamic_axes=dyn, opset_version=17)
            gpu_module = module.cuda().half()  # the peers run fp16 (the fastest PyTorch setting users pick)
            precisions = ("fp16",) if args.compile_only else ("fp32", "fp16", "bf16")
            engines = {p: twinfer.load(path, device="cuda", precision=p) for p in precisions}
        except Exception as e:  # noqa: BLE001
            failed.append((name, f"{type(e).__name__}: {e}"))
            print(json.dumps({"model": name, "error": failed[-1][1]}), flush=True)
            continue
        for b in args.batches:
            batch = LARGE[name] if b == "large" else int(b)
            if args.budget is not None and time.monotonic() - started > args.budget:
                failed.append((f"{name} b{batch}", f"not started: --budget {args.budget:.0f} s spent"))
                print(json.dumps({"model": name, "batch": batch, "error": failed[-1][1]}), flush=True)
                continue
            x = inputs_for(name, batch, "cuda")
            x16 = tuple(t.half() if t.is_floating_point() else t for t in x)
            result = {"model": name, "batch": batch}
            try:
                with torch.inference_mode():
                    if not args.compile_only:
                        result["torch eager fp16"] = time_cuda(lambda: gpu_module(*x16), args.iterations,
                                                               args.warmup)
                    if args.compile:
                        time_compiled(gpu_module, x16, args, result)
                for p, e in engines.items():
                    feeds = dict(zip(names, x))
                    result[f"twinfer {p}"] = time_cuda(lambda: e.run(feeds), args.iterations, args.warmup)
                    placed = e.kernel_report({n: tuple(t.shape) for n, t in feeds.items()})
                    result[f"twinfer {p} cpu nodes"] = sum(r.backend == "cpu" for r in placed)
            except Exception as e:  # noqa: BLE001
                failed.append((f"{name} b{batch}", f"{type(e).__name__}: {e}"))
                print(json.dumps({"model": name, "batch": batch, "error": failed[-1][1]}), flush=True)
                continue
            rows.append(result)
            print(json.dumps(result), flush=True)
    peers_cols = [c for c in ("torch eager fp16", "torch.compile fp16") if any(c in r for r in rows)]
    ours = [c for c in ("twinfer fp32", "twinfer fp16", "twinfer bf16") if any(c in r for r in rows)]
    print(f"\n{'model':<16} {'batch':>5} " + " ".join(f"{c:>18}" for c in peers_cols + ours) +
          f" {'best peer/ours fp16':>20} {'fp16 items/s':>13}")
    for r in rows:
        best = min((r[c] for c in peers_cols if c in r), default=float("nan"))
        cells = " ".join(f"{r[c]:>15.3f} ms" if c in r else f"{'-':>18}" for c in peers_cols + ours)
        print(f"{r['model']:<16} {r['batch']:>5} {cells} {best / r['twinfer fp16']:>19.2f}x "
              f"{r['batch'] / r['twinfer fp16'] * 1e3:>13.0f}")
    info = {k: v for k, v in twinfer.build_info().items() if k in ("cuda_runtime", "cublaslt", "cudnn", "version")}
    for what, why in failed:
        print(f"FAILED {what}: {why}")
    summary = {"benchmark": "gpu_vs_torch", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "twinfer": info, "rows": rows, "failed": failed}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
