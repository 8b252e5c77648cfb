"""How OpenMP's idle-thread waiting affects twinfer when the cores are shared.

    python benchmarks/openmp_wait.py [--busy 3] [--iterations 30] [--spincounts 1000 30000 ...]

Runs MiniLM (seq 128, batch 1) and ResNet-50 (batch 1) in fresh processes
under several GOMP_SPINCOUNT / OMP_WAIT_POLICY settings, first on an idle
machine, then with --busy processes spinning on the CPU, and prints the
median latencies side by side. twinfer sets GOMP_SPINCOUNT at import to
about 50 µs of spinning on this CPU (twinfer/_libs.py) unless the user set
either variable ("default" below is that choice;
"libgomp default" is GOMP_SPINCOUNT=300000, libgomp's own). --spincounts
replaces the settings by a GOMP_SPINCOUNT sweep."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile

CHILD = r'''
# twinfer first: torch brings its own libgomp.so.1, and libgomp reads
# GOMP_SPINCOUNT once, when it loads (twinfer's choice would never apply).
import twinfer
import sys, time, warnings, numpy as np, torch, torchvision
warnings.simplefilter("ignore")
from twinfer.models import minilm
n = int(sys.argv[1]); rpath = sys.argv[2]
ref = minilm.load_reference(); e = twinfer.load(minilm.export_onnx(ref), device="cpu")
ids = np.random.default_rng(0).integers(1000, 20000, (1, 128)).astype(np.int64)
f = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
r = twinfer.load(rpath, device="cpu"); x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
def med(fn, k):
    for _ in range(3): fn()
    t = []
    for _ in range(k):
        t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
    return sorted(t)[k // 2] * 1e3
print(f"{med(lambda: e.run(f), n):.2f} {med(lambda: r.run({'input': x}), max(5, n // 2)):.2f}")
'''

SETTINGS = [("twinfer default (about 50 µs of spinning)", {}), ("libgomp default (300000)", {"GOMP_SPINCOUNT": "300000"}),
            ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}), ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"})]


def spin():
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--busy", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--spincounts", type=int, nargs="+", help="sweep these GOMP_SPINCOUNT values instead")
    args = ap.parse_args()
    settings = SETTINGS if not args.spincounts else [
        (f"GOMP_SPINCOUNT={n}", {"GOMP_SPINCOUNT": str(n)}) for n in args.spincounts]
    import torch
    import torchvision

    folder = tempfile.mkdtemp()
    rpath = os.path.join(folder, "resnet50.onnx")
    torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(1, 3, 224, 224),), rpath, dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"])
    rows = []
    for load in (0, args.busy):
        procs = [mp.Process(target=spin, daemon=True) for _ in range(load)]
        for p in procs:
            p.start()
        try:
            for name, env in settings:
                full = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
                full.update(env)
                out = subprocess.run([sys.executable, "-c", CHILD, str(args.iterations), rpath], env=full,
                                     capture_output=True, text=True, check=True).stdout.split()
                rows.append((load, name, float(out[-2]), float(out[-1])))
                print(f"busy={load} {name:<32} minilm {rows[-1][2]:8.2f} ms   resnet50 {rows[-1][3]:8.2f} ms", flush=True)
        finally:
            for p in procs:
                p.terminate()
    print("\n| busy processes | setting | MiniLM b1 ms | ResNet-50 b1 ms |\n| --- | --- | --- | --- |")
    for load, name, a, b in rows:
        print(f"| {load} | {name} | {a:.2f} | {b:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
