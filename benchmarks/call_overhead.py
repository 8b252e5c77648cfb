"""Per-call overhead: what one run of a tiny model costs from Python, where the
kernels themselves are nearly free, next to onnxruntime's
InferenceSession.run (CPU EP) on the same ONNX bytes. At batch 1 on a GPU a
whole replayed model takes a few microseconds, so this is the floor of every
small run. Not a test: no assertion, a table and a JSON line.

    python benchmarks/call_overhead.py                       # cpu, sim (+ cuda when present)
    python benchmarks/call_overhead.py --devices cpu --calls 50000

Models: "add" (one Add of two [1, 4] float32 arrays), "chain3" (Add -> Mul ->
Relu), "io8" (8 inputs, 8 outputs, a Neg each). Paths, per device:

    run(numpy)       Engine.run({name: ndarray}): NumPy in, twinfer.Tensor out (the user's call)
    run(Tensor)      Engine.run with twinfer.Tensor inputs (no conversion to make)
    run(torch cpu)   Engine.run with CPU torch tensors (when torch is installed)
    core.run         Engine._core.run on ready tensors: the C++ run and the binding, no Python front
    convert inputs   twinfer._convert.as_tensor on each input: the conversion run(numpy) pays
    device->device   (sim, cuda) device tensors in, device tensors out, not waited for

The simulated device runs with max_delay_us=0 (no random delays), so its
figures are twinfer's host work plus handing each run to the stream's worker
thread and back; they say nothing of a GPU's own latencies.

Times: per-call means over batches of --batch calls, median and 90th
percentile over --calls calls, after warm-up. Each runtime is timed alone:
onnxruntime first, its session deleted before twinfer runs (an idle
onnxruntime session's threads can spin on a core).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

SHAPE = [1, 4]


def _model(nodes, inputs, outputs, name):
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, f, SHAPE) for n in inputs],
                          [helper.make_tensor_value_info(n, f, SHAPE) for n in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def models() -> dict:
    mk = helper.make_node
    io8_in = [f"x{i}" for i in range(8)]
    return {
        "add": _model([mk("Add", ["a", "b"], ["y"])], ["a", "b"], ["y"], "add"),
        "chain3": _model([mk("Add", ["a", "b"], ["s"]), mk("Mul", ["s", "a"], ["p"]), mk("Relu", ["p"], ["y"])],
                         ["a", "b"], ["y"], "chain3"),
        "io8": _model([mk("Neg", [x], [f"y{i}"]) for i, x in enumerate(io8_in)], io8_in,
                      [f"y{i}" for i in range(8)], "io8"),
    }


def time_calls(fn, calls: int, batch: int) -> tuple[float, float]:
    """(median, p90) of the per-call time in microseconds, over calls // batch
    batches of ``batch`` calls each (one call is too short to time alone)."""
    for _ in range(min(calls, 2000)):  # warm-up: plans, graphs, caches
        fn()
    per_call = []
    for _ in range(max(1, calls // batch)):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        per_call.append((time.perf_counter_ns() - t0) / batch / 1e3)
    q = statistics.quantiles(per_call, n=10) if len(per_call) > 1 else per_call * 9
    return statistics.median(per_call), q[8]


def time_onnxruntime(m, feeds: dict, args) -> tuple[float, float]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    r = time_calls(lambda: sess.run(None, feeds), args.calls, args.batch)
    del sess
    return r


def time_twinfer(m, feeds: dict, dev: str, args) -> list[tuple[str, float, float]]:
    import twinfer
    from twinfer._convert import as_tensor

    e = twinfer.load(m, device=dev, num_threads=1)
    host = [as_tensor(x) for x in feeds.values()]
    tfeeds = dict(zip(feeds, host))
    calls, batch = args.calls, args.batch
    rows = [("run(numpy)", *time_calls(lambda: e.run(feeds), calls, batch)),
            ("run(Tensor)", *time_calls(lambda: e.run(tfeeds), calls, batch))]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
        rows.append(("run(torch cpu)", *time_calls(lambda: e.run(torch_feeds), calls, batch)))
    if dev == "cpu":
        rows.append(("core.run", *time_calls(lambda: e._core.run(host), calls, batch)))
    else:
        rows.append(("core.run", *time_calls(lambda: e._core.run(host, None, True), calls, batch)))
    values = list(feeds.values())
    rows.append(("convert inputs", *time_calls(lambda: [as_tensor(x) for x in values], calls, batch)))
    if dev != "cpu":
        dfeeds = {k: v for k, v in zip(feeds, e._core.run(host, None, False)[:1] * len(feeds))}
        ctx = e.create_context()
        rows.append(("device->device", *time_calls(lambda: e.run(dfeeds, context=ctx, outputs="device"), calls,
                                                   batch)))
        ctx.synchronize()
    return rows


def main() -> None:
    import twinfer
    from twinfer.testing import sim_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="*", default=None, help="twinfer devices (default: cpu, sim, cuda if present)")
    ap.add_argument("--models", nargs="*", default=None, help="of: add chain3 io8 (default: all)")
    ap.add_argument("--calls", type=int, default=20000, help="timed calls per row (cpu; sim takes a tenth)")
    ap.add_argument("--batch", type=int, default=100, help="calls per timed batch")
    args = ap.parse_args()
    devices = args.devices or (["cpu", "sim"] + (["cuda"] if twinfer.cuda_available() else []))
    rng = np.random.default_rng(0)
    rows = []
    for name, m in models().items():
        if args.models and name not in args.models:
            continue
        feeds = {i.name: rng.standard_normal(SHAPE).astype(np.float32) for i in m.graph.input}
        ort_us = time_onnxruntime(m, feeds, args)
        rows.append((name, "onnxruntime", "cpu", "sess.run(numpy)", *ort_us, ort_us[0]))
        for dev in devices:
            if dev == "sim":
                with sim_options(max_delay_us=0):
                    sim_args = argparse.Namespace(calls=max(args.batch, args.calls // 10), batch=args.batch)
                    got = time_twinfer(m, feeds, dev, sim_args)
            else:
                got = time_twinfer(m, feeds, dev, args)
            rows += [(name, "twinfer", dev, path, med, p90, ort_us[0]) for path, med, p90 in got]

    print(f"{'model':<7} {'runtime':<12} {'device':<7} {'path':<16} {'median us':>9} {'p90 us':>8} {'vs ort':>7}")
    for name, rt, dev, path, med, p90, ort in rows:
        print(f"{name:<7} {rt:<12} {dev:<7} {path:<16} {med:9.2f} {p90:8.2f} {med / ort:6.2f}x")
    print(json.dumps({"benchmark": "call_overhead", "rows": [
        dict(model=r[0], runtime=r[1], device=r[2], path=r[3], median_us=round(r[4], 3), p90_us=round(r[5], 3))
        for r in rows]}))


if __name__ == "__main__":
    main()
