"""Serving under load: throughput and p50/p99 latency of `twinfer serve` at
several client counts, over HTTP (binary tensors) and gRPC, with and without
dynamic batching, beside the same model called in-process (engine.run from
threads, and twinfer.Batcher). Not a test: no assertion, a table and JSON.

    python benchmarks/serve_load.py                         # 1, 4, 16 clients, 3 s per cell
    python benchmarks/serve_load.py --clients 1 8 32 --seconds 5 --json serve_load.json

The model is an MLP, x [N, 512] -> 3 x (MatMul 1024 + Relu) -> [N, 256],
random weights; every request carries one row (batch 1), the case dynamic
batching is for. The server runs in its own process (`python -m twinfer
serve`, one instance per model); the clients are threads of this process,
one tritonclient each, each sending its next request when the last answered.
Client and server share the machine, so on a small one the clients' own
Python time is part of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

WIDTH_IN, HIDDEN, WIDTH_OUT = 512, 1024, 256


def mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = [WIDTH_IN, HIDDEN, HIDDEN, WIDTH_OUT]
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == len(sizes) - 2 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out if out == "y" else f"m{i}"]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [f"m{i}"], [out]))
        prev = out
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTH_IN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", WIDTH_OUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


CONFIG = """name: "{name}"
max_batch_size: 32
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {w_in} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {w_out} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{batching}"""


def make_repository(root: Path, delay_us: int) -> None:
    data = mlp().SerializeToString()
    for name, batching in (("plain", ""), ("batched", f"dynamic_batching {{ max_queue_delay_microseconds: "
                                                       f"{delay_us} }}\n")):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(data)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, w_in=WIDTH_IN, w_out=WIDTH_OUT,
                                                                batching=batching))


def start_server(root: Path) -> tuple[subprocess.Popen, dict[str, int]]:
    proc = subprocess.Popen([sys.executable, "-m", "twinfer", "serve", "--model-repository", str(root), "--host",
                             "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "-1",
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if "ready;" in line:
            return proc, {k: int(v) for k, v in re.findall(r"(HTTP|gRPC) on 127\.0\.0\.1:(\d+)", line)}
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the server did not start")


def http_caller(port: int, model: str):
    import tritonclient.http as th

    client = th.InferenceServerClient(f"127.0.0.1:{port}")

    def call(x):
        i = th.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        return client.infer(model, [i]).as_numpy("y")

    return call


def grpc_caller(port: int, model: str):
    import tritonclient.grpc as tg

    client = tg.InferenceServerClient(f"127.0.0.1:{port}")

    def call(x):
        i = tg.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        return client.infer(model, [i]).as_numpy("y")

    return call


def load(make_caller, clients: int, seconds: float, max_requests: int, expected) -> dict:
    """``clients`` threads, each calling until ``seconds`` pass (or ``max_requests`` in all)."""
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((64, 1, WIDTH_IN)).astype(np.float32)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start_barrier = threading.Barrier(clients + 1)
    count = [0]
    lock = threading.Lock()
    stop_at = [0.0]

    def run(k):
        # Each thread makes its own client (tritonclient's HTTP client lives on
        # the thread's gevent hub), warms it up and checks one answer.
        call, mine = make_caller(), latencies[k]
        np.testing.assert_allclose(call(xs[k]), expected(xs[k]), rtol=1e-4, atol=1e-4)
        start_barrier.wait()
        i = k
        while time.perf_counter() < stop_at[0]:
            with lock:
                if count[0] >= max_requests:
                    return
                count[0] += 1
            t0 = time.perf_counter()
            call(xs[i % len(xs)])
            mine.append(time.perf_counter() - t0)
            i += clients

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    start_barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    flat = np.sort(np.concatenate([np.asarray(v) for v in latencies])) * 1e3
    return {"requests": int(flat.size), "throughput_rps": flat.size / elapsed,
            "p50_ms": float(np.percentile(flat, 50)), "p99_ms": float(np.percentile(flat, 99))}


def main() -> None:
    import twinfer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="*", default=[1, 4, 16])
    ap.add_argument("--seconds", type=float, default=3.0, help="per cell (default 3)")
    ap.add_argument("--max-requests", type=int, default=200_000, help="per cell, a bound besides time")
    ap.add_argument("--delay-us", type=int, default=2000, help="max_queue_delay_microseconds (default 2000)")
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args()

    engine = twinfer.load(mlp().SerializeToString(), device="cpu")
    expected = lambda x: engine.run({"x": x})["y"].numpy()  # noqa: E731
    rows = []

    def cell(path: str, batching: str, make_caller):
        for n in args.clients:
            r = load(make_caller, n, args.seconds, args.max_requests, expected)
            rows.append({"path": path, "batching": batching, "clients": n, **r})
            print(f"{path:<22} {batching:<8} {n:>7} {r['throughput_rps']:>10.0f} {r['p50_ms']:>8.2f} "
                  f"{r['p99_ms']:>8.2f}", flush=True)

    print(f"{'path':<22} {'batching':<8} {'clients':>7} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    cell("in-process engine.run", "off", lambda: (lambda x: engine.run({"x": x})["y"].numpy()))
    batcher = twinfer.Batcher(engine, max_batch_size=32, max_queue_delay=args.delay_us / 1e6)
    cell("in-process Batcher", "on", lambda: (lambda x: batcher.run({"x": x})["y"]))
    batcher.close()
    with tempfile.TemporaryDirectory() as tmp:
        make_repository(Path(tmp), args.delay_us)
        proc, ports = start_server(Path(tmp))
        try:
            for protocol, factory in (("HTTP", http_caller), ("gRPC", grpc_caller)):
                for model, batching in (("plain", "off"), ("batched", "on")):
                    cell(f"twinfer serve {protocol}", batching, lambda: factory(ports[protocol], model))
        finally:
            proc.send_signal(2)
            proc.wait(60)
    info = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
            "twinfer": twinfer.__version__, "seconds_per_cell": args.seconds, "max_queue_delay_us": args.delay_us,
            "model": f"MLP {WIDTH_IN}-{HIDDEN}-{HIDDEN}-{WIDTH_OUT}, batch 1 per request", "rows": rows}
    print(json.dumps({k: v for k, v in info.items() if k != "rows"}))
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
