"""Where a GPU run's time goes: twinfer's per-op profile (engine.profile_ops)
of the gpu_vs_torch models at their large batch, one table per model and
precision. Not a test and not a comparison: it says which kernels to work on.

    python benchmarks/gpu_profile.py                                  # resnet50, vit_b_16, bert_base; fp16
    python benchmarks/gpu_profile.py --models resnet50 --precisions fp16 int8 --json prof.json
    python benchmarks/gpu_profile.py --models resnet50 --precisions int8 --kernels 25

--kernels N also traces every kernel of a few runs (CUPTI, through a
one-member twinfer.Parallel's profile) and prints the N costliest by name:
an op's time split into its kernels (an int8 convolution's im2col, GEMM and
epilogue apart), with graph replays included.

int8 is calibrated on a few random batches (speed does not depend on the
calibration); every profile is printed as engine.profile_ops prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

from gpu_vs_torch import LARGE, MODELS, build, inputs_for


def main() -> None:
    import torch

    import twinfer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["resnet50", "vit_b_16", "bert_base"], choices=MODELS)
    ap.add_argument("--precisions", nargs="*", default=["fp16"], choices=["fp32", "tf32", "fp16", "bf16", "int8", "fp8"])
    ap.add_argument("--batch", type=int, default=None, help="default: the model's large batch in gpu_vs_torch")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="also trace every kernel (CUPTI) and print the N costliest by name")
    args = ap.parse_args()
    if not twinfer.cuda_available():
        sys.exit("needs a CUDA GPU")
    warnings.filterwarnings("ignore")
    folder = Path(tempfile.mkdtemp(prefix="twinfer-gpu-profile-"))
    out = {}
    for name in args.models:
        module, example, names, dyn = build(name)
        path = folder / f"{name}.onnx"
        torch.onnx.export(module, example, str(path), dynamo=False, input_names=names, output_names=["output"],
                          dynamic_axes=dyn, opset_version=17)
        batch = args.batch or LARGE[name]
        feeds = dict(zip(names, inputs_for(name, batch, "cuda")))
        for p in args.precisions:
            key = f"{name} b{batch} {p}"
            try:
                kw = {}
                if p in ("int8", "fp8"):
                    calib = [{k: v.cpu().numpy() for k, v in dict(zip(names, inputs_for(name, 8, "cpu"))).items()}
                             for _ in range(2)]
                    kw = dict(calibration=calib, progress=False)
                engine = twinfer.load(path, device="cuda", precision=p, **kw)
                prof = engine.profile_ops(feeds, iterations=args.iterations)
            except Exception as e:  # noqa: BLE001 - one failure must not cost the other profiles
                print(f"== {key}: failed: {type(e).__name__}: {e}", flush=True)
                out[key] = {"error": f"{type(e).__name__}: {e}"}
                continue
            print(f"== {key}\n{prof}", flush=True)
            out[key] = prof.to_dict()
            if args.kernels:
                try:
                    table = kernel_table(engine, feeds, args.kernels)
                except Exception as e:  # noqa: BLE001 - CUPTI may be missing; the op profile stands
                    table = {"error": f"{type(e).__name__}: {e}"}
                    print(f"== {key} kernels: failed: {table['error']}", flush=True)
                else:
                    print(format_kernel_table(key, table), flush=True)
                out[key + " kernels"] = table
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def demangle(names: list[str]) -> dict[str, str]:
    """Each CUPTI kernel name readable: c++filt where the machine has it, the
    name as it is otherwise; templates' argument lists cut to keep a row short."""
    import shutil
    import subprocess

    plain = dict(zip(names, names))
    if shutil.which("c++filt"):
        got = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
        if len(got) == len(names):
            plain = dict(zip(names, got))
    return {k: (v if len(v) <= 110 else v[:107] + "...") for k, v in plain.items()}


def kernel_table(engine, feeds, top: int, runs: int = 3) -> dict:
    """The `top` kernels by device time per run, traced through a one-member
    Parallel's profile (its "alone" phase): name, launches and ms per run."""
    import twinfer

    with twinfer.Parallel([engine]) as par:
        prof = par.profile([feeds], iterations=runs, warmup=1, kernels=True)
    totals: dict[str, list[float]] = {}
    for k in prof.kernels:
        if k.phase == "alone":
            t = totals.setdefault(k.kernel, [0, 0.0])
            t[0] += 1
            t[1] += k.duration
    names = demangle(sorted(totals))
    rows = sorted(({"kernel": names[n], "launches": c / runs, "ms": s * 1e3 / runs} for n, (c, s) in totals.items()),
                  key=lambda r: -r["ms"])
    return {"runs": runs, "total_ms": sum(r["ms"] for r in rows), "kernels": rows[:top]}


def format_kernel_table(key: str, table: dict) -> str:
    lines = [f"== {key} kernels: {table['total_ms']:.2f} ms of kernels a run (traced over {table['runs']} runs)",
             f"  {'ms/run':>8}  {'launches':>8}  kernel"]
    lines += [f"  {r['ms']:8.3f}  {r['launches']:8.1f}  {r['kernel']}" for r in table["kernels"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
