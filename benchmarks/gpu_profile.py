"""Where a GPU run's time goes: twinfer's per-op profile (engine.profile_ops)
of the gpu_vs_torch models at their large batch, one table per model and
precision. Not a test and not a comparison: it says which kernels to work on.

    python benchmarks/gpu_profile.py                                  # resnet50, vit_b_16, bert_base; fp16
    python benchmarks/gpu_profile.py --models resnet50 --precisions fp16 int8 --json prof.json

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
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
