"""`twinfer bench MODEL`: latency percentiles and throughput, peers side by side."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ._models import MODEL_HELP, check_precision, resolve

PEERS = ("onnxruntime", "torch")

DESCRIPTION = """\
Time MODEL like trtexec does: the first run apart (it plans memory and picks
kernels for the shapes), then --warmup untimed runs, then --iterations timed
runs of the whole call (inputs in, outputs out). Prints p50/p90/p99/mean/min
latency and throughput (batch / mean latency). Inputs are random: floats from
a standard normal, integers 0 or 1.

--compare runs peers on the same workload in the same process, one after the
other: onnxruntime on the same ONNX file with as many intra-op threads as
twinfer uses; torch (eager, inference_mode) only for torchvision:NAME models.
The largest difference between twinfer's outputs and each peer's is shown.

examples:
  twinfer bench model.onnx --shapes input:8x3x224x224 --compare onnxruntime
  twinfer bench torchvision:resnet18 --batch 4 --compare onnxruntime,torch --json out.json
"""


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="latency percentiles and throughput, peers side by side",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, sim (the simulated GPU)")
    p.add_argument("--precision", default=None,
                   help="fp32 (default for a model), tf32, fp16, bf16 (GPU); a saved engine keeps its own "
                        "(int8 and fp8 engines need calibration data: save one from Python and bench the file)")
    p.add_argument("--batch", type=int, default=1, help="size of symbolic batch dims (default 1)")
    p.add_argument("--shapes", default=None, metavar="NAME:DIMS,...",
                   help="input shapes, e.g. input:1x3x224x224,mask:1x128 (overrides --batch for those inputs)")
    p.add_argument("--iterations", type=int, default=100, help="timed runs per runtime (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs before timing (default 10)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default 0: all cores)")
    p.add_argument("--compare", default="", metavar="PEERS", help="comma-separated peers: onnxruntime,torch")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON")
    p.add_argument("--seed", type=int, default=None, help="seed of the random inputs")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=run)


def _host_outputs(engine, feeds) -> list[np.ndarray] | None:
    """twinfer's outputs as NumPy arrays (device outputs are copied to the host)."""
    return [np.array(t.numpy()) for t in engine.run(feeds).values()]


def _max_diff(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """The largest |difference| over all outputs; NaN where both are NaN
    counts as agreement, and NaN on one side only as infinitely far (a NaN
    difference in any but the first output was dropped by max())."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        if not a.size:
            continue
        a, b = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        d = np.abs(np.where(both_nan, 0.0, a - b))
        worst = max(worst, float(np.where(np.isnan(d), np.inf, d).max()))
    return worst


def run(args) -> int:
    import twinfer
    from twinfer._progress import Steps
    from twinfer.benchmark import BenchReport, parse_shapes, random_feeds, time_engine, time_onnxruntime, time_torch

    peers = [p.strip() for p in args.compare.split(",") if p.strip()]
    bad = [p for p in peers if p not in PEERS]
    if bad:
        print(f"twinfer bench: unknown peer(s) {bad}; choose from {', '.join(PEERS)}", file=sys.stderr)
        return 2
    if args.threads < 0:  # twinfer.load refuses it too, but by its own name, num_threads
        raise twinfer.InvalidArgumentError(f"--threads must be >= 0 (0: all cores), got {args.threads}")
    shapes = parse_shapes(args.shapes)
    model = resolve(args.model, shapes, args.batch, args.progress)
    check_precision(args.precision, model.path, "bench")
    with Steps(1, "twinfer bench", enabled=args.progress) as s:
        s.step("building the engine")
        engine = twinfer.load(model.path, device=args.device, precision=args.precision, num_threads=args.threads)
    rng = np.random.default_rng(args.seed)
    feeds = random_feeds(engine.inputs, shapes, args.batch, rng)
    threads = engine.num_threads

    results = [time_engine(engine, feeds, args.iterations, args.warmup)]
    results[0].note = f"{threads} threads, {engine.device}, {engine.precision}"
    ours = _host_outputs(engine, feeds)
    notes, agreement = [], {}
    if ours is None and peers:
        notes.append("agreement with peers: not computed (copying device outputs to the host needs torch)")
    for peer in peers:
        if peer == "onnxruntime":
            if str(model.path).endswith(".twinfer"):
                notes.append("onnxruntime: skipped (a saved twinfer engine is not an ONNX file; bench the ONNX model "
                             "to compare)")
                continue
            t, theirs = time_onnxruntime(model.path, feeds, threads, args.iterations, args.warmup, engine.device)
            results.append(t)
            if ours is not None:
                agreement["onnxruntime"] = _max_diff(ours, theirs)
        elif peer == "torch":
            if model.module is None:
                notes.append("torch: skipped (only torchvision:NAME models have a torch module to compare)")
                continue
            t, theirs = time_torch(model.module, feeds, threads, args.iterations, args.warmup, engine.device)
            results.append(t)
            if ours is not None:
                agreement["torch"] = _max_diff(ours, theirs)
    config = {
        "device": engine.device, "precision": engine.precision, "threads": threads,
        "inputs": ", ".join(f"{k}={'x'.join(map(str, v.shape)) or 'scalar'}:{v.dtype}" for k, v in feeds.items()),
        "iterations": args.iterations, "warmup": args.warmup, "twinfer": twinfer.__version__,
    }
    report = BenchReport(model.label, results, config, notes, agreement)
    print(report)
    if args.json:
        report.save_json(args.json)
        print(f"wrote {args.json}")
    return 0
