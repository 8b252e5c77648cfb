"""Models with If nodes, as exporters write them: Silero VAD's variants
(`If(sr == 16000)` picking the 16 kHz or 8 kHz network, or Ifs on a shape)
from the silero-vad wheel. twinfer with If inlining (graph/passes/inline_if.cc:
a condition that folds with the plan's shapes or a steering input's value
makes the If its branch) and without it (TWINFER_INLINE_IF=0: the If kernel
evaluates its branch every run), beside onnxruntime (CPU EP) on the same
files. Not a test: no assertion, a table and a JSON line.

    python benchmarks/control_flow.py                  # one thread each, 16 kHz chunks
    python benchmarks/control_flow.py --threads 2 --calls 2000

Each runtime is timed alone (an idle onnxruntime session's threads can spin
on a core); per-call median and 90th percentile over --calls calls after
warm-up, the state fed back as a stream would.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

VARIANTS = {
    "silero v5 (spox, If on sr)": "data/silero_vad.onnx",
    "silero v5 (torch 2.3, Ifs on shapes)": "data/silero_vad_16k_op15.onnx",
    "silero v5 (torch 2.9, If on sr)": "data/silero_vad_op18_ifless.onnx",
    "silero v5 half (Ifs on shapes)": "data/silero_vad_half.onnx",
}


def _path(rel: str) -> Path:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None:
        raise SystemExit("pip install silero-vad==6.2.3 (it ships the ONNX files)")
    return Path(list(spec.submodule_search_locations)[0]) / rel


def _feeds(names, rng):
    f = {"input": (rng.random((1, 576), dtype=np.float32) - 0.5), "state": np.zeros((2, 1, 128), np.float32),
         "sr": np.array(16000, np.int64)}
    return {k: v for k, v in f.items() if k in names}


def _time(call, feeds, calls: int) -> tuple[float, float]:
    for _ in range(50):
        call(feeds)
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        state = call(feeds)
        ts.append(time.perf_counter() - t)
        feeds["state"] = state
    ts.sort()
    return statistics.median(ts) * 1e6, ts[int(0.9 * len(ts))] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort

    import twinfer

    rng = np.random.default_rng(0)
    rows = []
    for label, rel in VARIANTS.items():
        path = str(_path(rel))
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        ort_med, ort_p90 = _time(lambda f: sess.run(["stateN"], f)[0], _feeds(names, rng), args.calls)
        del sess
        row = {"model": label, "onnxruntime_us": ort_med, "onnxruntime_p90_us": ort_p90}
        for mode, env in (("inlined", "1"), ("if_kernel", "0")):
            os.environ["TWINFER_INLINE_IF"] = env  # read when each plan is built
            e = twinfer.load(path, device=args.device, num_threads=args.threads)
            med, p90 = _time(lambda f: e.run(f)["stateN"].numpy(), _feeds(names, rng), args.calls)
            ifs = sum(r.op == "If" for r in e.kernel_report(_feeds(names, rng)))
            row.update({f"twinfer_{mode}_us": med, f"twinfer_{mode}_p90_us": p90, f"ifs_left_{mode}": ifs})
            del e
        os.environ.pop("TWINFER_INLINE_IF", None)
        rows.append(row)

    print(f"device {args.device}, {args.threads} thread(s), {args.calls} calls, µs per call (median / p90)")
    print(f"{'model':40s} {'twinfer inlined':>18s} {'twinfer If kernel':>18s} {'onnxruntime':>14s} "
          f"{'ort / inlined':>14s} {'Ifs left':>9s}")
    for r in rows:
        print(f"{r['model']:40s} {r['twinfer_inlined_us']:8.0f} / {r['twinfer_inlined_p90_us']:<7.0f} "
              f"{r['twinfer_if_kernel_us']:8.0f} / {r['twinfer_if_kernel_p90_us']:<7.0f} "
              f"{r['onnxruntime_us']:6.0f} / {r['onnxruntime_p90_us']:<5.0f} "
              f"{r['onnxruntime_us'] / r['twinfer_inlined_us']:13.2f}x {r['ifs_left_inlined']:>4d} / {r['ifs_left_if_kernel']}")
    out = {"threads": args.threads, "calls": args.calls, "device": args.device, "rows": rows}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
