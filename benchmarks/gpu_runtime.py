"""The GPU runtime's own costs, next to PyTorch eager on the same work: a
chain of elementwise ops (the kernels twinfer has on CUDA so far), small
(launch-bound: what CUDA graphs are for) and large (memory-bound), with
twinfer's graphs on and off. Not a test: no assertion, a table and a JSON
line. Needs a GPU (and torch for the peer).

    python benchmarks/gpu_runtime.py
    python benchmarks/gpu_runtime.py --ops 64 --iterations 500

Times are medians of per-run wall times with the device synchronised after
each run (outputs kept on the device), after warm-up runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

OPS = ("Sin", "Cos", "Tanh", "Sigmoid", "Relu", "Exp", "Neg", "Abs")


def chain(n_ops: int, shape):
    nodes, prev = [], "x"
    for i in range(n_ops):
        nodes.append(helper.make_node(OPS[i % len(OPS)], [prev], [f"t{i}"]))
        prev = f"t{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def median_ms(fn, sync, iterations: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    import torch

    import twinfer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    if not twinfer.cuda_available():
        raise SystemExit("no CUDA GPU: this benchmark measures the CUDA runtime")

    torch_ops = {"Sin": torch.sin, "Cos": torch.cos, "Tanh": torch.tanh, "Sigmoid": torch.sigmoid,
                 "Relu": torch.relu, "Exp": torch.exp, "Neg": torch.neg, "Abs": torch.abs}
    rows = []
    for label, shape in (("small [1, 1024]", (1, 1024)), ("large [64, 1M]", (64, 1 << 20))):
        m = chain(args.ops, shape)
        x = torch.randn(*shape, device="cuda")
        sync = torch.cuda.synchronize

        def eager(x=x):
            y = x
            for i in range(args.ops):
                y = torch_ops[OPS[i % len(OPS)]](y)
            return y

        t_torch = median_ms(eager, sync, args.iterations, args.warmup)
        rows.append((label, "torch eager", t_torch))
        for graphs in (True, False):
            e = twinfer.load(m, device="cuda", cuda_graphs=graphs)
            ctx = e.create_context()
            xt = twinfer.from_dlpack(x)
            t = median_ms(lambda: e.run({"x": xt}, context=ctx, outputs="device"), ctx.synchronize,
                          args.iterations, args.warmup)
            rows.append((label, f"twinfer graphs={'on' if graphs else 'off'}", t))
            out = e.run({"x": xt}, context=ctx)
            got = np.asarray(next(iter(out.values())).numpy())
            want = eager().cpu().numpy()
            err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
            rows[-1] = rows[-1] + (err,)
    print(f"{'case':<18} {'runtime':<22} {'ms/run':>9} {'vs torch':>9} {'rel err vs torch':>17}")
    base = {}
    for row in rows:
        label, name, t = row[:3]
        if name == "torch eager":
            base[label] = t
        err = f"{row[3]:.1e}" if len(row) > 3 else ""
        print(f"{label:<18} {name:<22} {t:9.3f} {t / base[label]:8.2f}x {err:>17}")
    print(json.dumps({"benchmark": "gpu_runtime", "ops": args.ops,
                      "rows": [dict(case=r[0], runtime=r[1], ms=round(r[2], 4)) for r in rows]}))


if __name__ == "__main__":
    main()
