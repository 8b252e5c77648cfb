"""Per-call overhead: what one run of a one-node model costs from Python, where
the model itself is nearly free (an Add of two [1, 8] float32 arrays), next to
onnxruntime's InferenceSession.run on the same model. At batch 1 on a GPU a
whole replayed model takes a fraction of a millisecond, so this is the floor
of every small run. Not a test: no assertion, a table and a JSON line.

    python benchmarks/overhead.py                    # cpu (+ sim, + cuda when present)
    python benchmarks/overhead.py --devices cpu --calls 20000

Each runtime is timed alone (no other session alive), median of --rounds
rounds of --calls calls each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from onnx import TensorProto, helper


def one_node_model(shape=(1, 8)):
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "one_node",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(shape)),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def time_calls(fn, calls: int, rounds: int) -> float:
    """Median over rounds of the mean time per call, in microseconds."""
    for _ in range(min(calls, 1000)):  # warm-up: plans, graphs, caches
        fn()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call)


def main() -> None:
    import twinfer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="*", default=None, help="twinfer devices (default: cpu, sim, cuda if present)")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    devices = args.devices or (["cpu", "sim"] + (["cuda"] if twinfer.cuda_available() else []))

    m = one_node_model()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 8)).astype(np.float32)
    b = rng.standard_normal((1, 8)).astype(np.float32)
    rows = []

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"a": a, "b": b}
    ort_us = time_calls(lambda: sess.run(None, feeds), args.calls, args.rounds)
    rows.append(("onnxruntime", "cpu", "numpy -> numpy", ort_us))
    del sess

    for dev in devices:
        e = twinfer.load(m, device=dev, num_threads=1)
        rows.append(("twinfer", dev, "numpy -> numpy", time_calls(lambda: e.run({"a": a, "b": b}), args.calls,
                                                                 args.rounds)))
        ctx = e.create_context()
        rows.append(("twinfer", dev, "numpy -> numpy, own context",
                     time_calls(lambda: e.run({"a": a, "b": b}, context=ctx), args.calls, args.rounds)))
        if dev != "cpu":
            ta, tb = (e.run({"a": a, "b": b}, outputs="device")["y"] for _ in range(2))
            rows.append(("twinfer", dev, "device -> device (async)",
                         time_calls(lambda: e.run({"a": ta, "b": tb}, context=ctx, outputs="device"), args.calls,
                                    args.rounds)))
            ctx.synchronize()
        del e

    print(f"{'runtime':<12} {'device':<7} {'path':<30} {'us/call':>8} {'vs ort':>7}")
    for name, dev, path, us in rows:
        print(f"{name:<12} {dev:<7} {path:<30} {us:8.2f} {us / ort_us:6.2f}x")
    print(json.dumps({"benchmark": "overhead", "rows": [dict(runtime=r[0], device=r[1], path=r[2], us=round(r[3], 3))
                                                         for r in rows]}))


if __name__ == "__main__":
    main()
