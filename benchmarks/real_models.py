"""twinfer against onnxruntime on the CPU, on the real ONNX files of the test
suite's sweep (tests/test_real_models.py): the files people download inside
PyPI wheels, with the inputs their packages feed them (tests/real_inputs.py;
the openwakeword embedding model gets random windows of its input's shape).

    PYTHONPATH=build/dev-main/pkg python benchmarks/real_models.py [--threads 1] [--only ppocr]

One runtime alive at a time (an onnxruntime session's pool spins on a core
while it exists), the same thread count for both, median ms of timed runs
after warm-up; ratio = twinfer / onnxruntime (below 1: twinfer faster).
Models whose package is not installed are left out and named."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import twinfer  # noqa: E402
from real_inputs import sweep_cases  # noqa: E402
from twinfer._timing import measure, median_ms  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated substrings of model names to run")
    ap.add_argument("--json", default="", help="also write the rows here")
    args = ap.parse_args()
    import importlib.util

    import onnxruntime as ort

    rng = np.random.default_rng(0)
    rows, missing = [], []
    print(f"{'model':40s} {'twinfer ms':>11s} {'ort ms':>9s} {'ratio':>6s}   ({args.threads} thread(s))", flush=True)
    for name, package, relative, make_feeds in sweep_cases(rng):
        if args.only and not any(s.lower() in name.lower() for s in args.only.split(",")):
            continue
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            missing.append(package)
            continue
        path = Path(list(spec.submodule_search_locations)[0]) / relative
        feeds = make_feeds()
        engine = twinfer.load(path, device="cpu", num_threads=args.threads)
        feeds = {k: v for k, v in feeds.items() if k in {s.name for s in engine.inputs}}
        t_tw = median_ms(measure(lambda: engine.run(feeds), args.iterations, warmup=3))
        del engine
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        t_ort = median_ms(measure(lambda: sess.run(None, feeds), args.iterations, warmup=3))
        del sess
        rows.append({"model": name, "twinfer_ms": t_tw, "onnxruntime_ms": t_ort, "ratio": t_tw / t_ort})
        print(f"{name:40s} {t_tw:11.3f} {t_ort:9.3f} {t_tw / t_ort:6.2f}", flush=True)
    if missing:
        print(f"left out (not installed): {', '.join(sorted(set(missing)))}")
    meta = {"threads": args.threads, "iterations": args.iterations, "onnxruntime": ort.__version__,
            "cpu_blas": twinfer.build_info()["cpu_blas"], "time": time.strftime("%Y-%m-%d %H:%M")}
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
