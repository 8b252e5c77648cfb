"""Two models on one GPU, the measurements of ``benchmarks/dual_model.py
--device cuda`` (issue 13): pairs at batch 1, each run

  * serially (each member alone, back to back),
  * together with twinfer.Parallel / Pipeline (each on its own stream),
  * as one CUDA graph (Parallel.graphed() / Pipeline.graphed()), and for a
    Pipeline also graphed().map(items) (stage A of item k + 1 beside stage B
    of item k inside each launch),
  * with PyTorch on two CUDA streams, eager and torch.compile,

overlap = (t_a + t_b) / t_together; and a high-priority model's p99 latency
while a low-priority one saturates the GPU (twinfer priorities, SM shares,
PyTorch stream priorities). Random weights, fp32 without TF32 on both sides
unless --precision says otherwise; inputs and outputs stay on the device.

Times: twinfer's serial and together come from its profile (timing events on
each member's stream); the graph and PyTorch rows are wall time over
--iterations calls with one synchronisation at the end, per iteration;
latencies are events around each call, synchronised.
"""

from __future__ import annotations

import gc
import json
import statistics
import threading
import time
from pathlib import Path

import numpy as np

import twinfer
from twinfer._timing import percentile_ms

SEQ = 128


# -- models: a torch module and its ONNX export --------------------------------------
def torch_module(name: str):
    """(module, example inputs at batch 1 on the CPU, input names)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "minilm":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
        bert = BertModel(cfg, add_pooling_layer=False).eval()

        class Encoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]

        ids = torch.randint(0, cfg.vocab_size, (1, SEQ))
        return Encoder(bert).eval(), (ids, torch.ones(1, SEQ, dtype=torch.int64)), ["input_ids", "attention_mask"]
    if name in ("detector", "classifier"):
        r = torchvision.models.resnet18()
        if name == "detector":  # the trunk up to stride 16: a [1, 256, 14, 14] feature map
            m = torch.nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3)
            return m.eval(), (torch.randn(1, 3, 224, 224),), ["image"]
        m = torch.nn.Sequential(r.layer4, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), r.fc)
        return m.eval(), (torch.randn(1, 256, 14, 14),), ["features"]
    return getattr(torchvision.models, name)().eval(), (torch.randn(1, 3, 224, 224),), ["input"]


def export(folder: Path, name: str) -> Path:
    import torch

    path = folder / f"{name}.onnx"
    if not path.exists():
        module, example, names = torch_module(name)
        out = "features" if name == "detector" else "output"
        torch.onnx.export(module, example, str(path), dynamo=False, opset_version=17, input_names=names,
                          output_names=[out], dynamic_axes={n: {0: "batch"} for n in names})
    return path


def cuda_inputs(name: str, batch: int = 1):
    import torch

    if name == "minilm":
        ids = torch.randint(1000, 30000, (batch, SEQ), device="cuda")
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "classifier":
        return {"features": torch.randn(batch, 256, 14, 14, device="cuda")}
    key = "image" if name == "detector" else "input"
    return {key: torch.randn(batch, 3, 224, 224, device="cuda")}


# -- PyTorch on two streams -------------------------------------------------------------
def torch_pair_ms(fa, fb, iterations: int, pipeline: bool = False) -> dict:
    """Alone (events, median) and together on two streams (wall per iteration)."""
    import torch

    def alone(f):
        for _ in range(5):
            f()
        times = []
        for _ in range(iterations):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    handoff = []

    def together():
        with torch.cuda.stream(sa):
            y = fa()
            ev = torch.cuda.Event()
            ev.record(sa)
        with torch.cuda.stream(sb):
            if pipeline:  # the second stage reads the first's output
                sb.wait_event(ev)
                handoff.append(y)
                fb(y)
            else:
                fb()

    t_a = alone(fa)
    t_b = alone((lambda: fb(fa())) if pipeline else fb) - (t_a if pipeline else 0.0)
    for _ in range(5):
        together()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iterations):
        together()
        if len(handoff) > 8:
            handoff.clear()
    torch.cuda.synchronize()
    t = (time.perf_counter() - t0) * 1e3 / iterations
    return {"a_ms": t_a, "b_ms": t_b, "together_ms": t, "overlap": (t_a + t_b) / t}


def torch_functions(names, compiled: bool):
    import torch

    mods = []
    for n in names:
        m, _, _ = torch_module(n)
        m = m.cuda()
        mods.append(torch.compile(m) if compiled else m)
    return mods


# -- twinfer ------------------------------------------------------------------------------
def graphed_ms(g, feeds, iterations: int) -> float:
    """Wall time per g.run(feeds) (device inputs: nothing waits until the end)."""
    for _ in range(5):
        g.run(feeds)
    twinfer._core.device_synchronize("cuda")
    t0 = time.perf_counter()
    for _ in range(iterations):
        g.run(feeds)
    twinfer._core.device_synchronize("cuda")
    return (time.perf_counter() - t0) * 1e3 / iterations


def graphed_map_ms(g, items, repeats: int = 3) -> float:
    """Wall time per item of g.map(items) (a Pipeline's stages overlapped
    inside each launch), the fastest of `repeats` passes after a warm one."""
    list(g.map(items))
    best = float("inf")
    for _ in range(repeats):
        twinfer._core.device_synchronize("cuda")
        t0 = time.perf_counter()
        for _ in g.map(items):
            pass
        twinfer._core.device_synchronize("cuda")
        best = min(best, (time.perf_counter() - t0) * 1e3 / len(items))
    return best


def pair_rows(name: str, kind: str, models: list[str], folder: Path, args) -> dict:
    import torch

    engines = [twinfer.load(export(folder, m), device="cuda", precision=args.precision) for m in models]
    if kind == "parallel":
        group = twinfer.Parallel(engines)
        feeds = [cuda_inputs(m) for m in models]
        prof = group.profile(feeds, iterations=args.iterations, warmup=5)
        count = args.iterations
    else:
        group = twinfer.Pipeline(engines, links={"features": "features"})
        items = [cuda_inputs(models[0]) for _ in range(args.iterations)]
        feeds = items[0]
        prof = group.profile(items, warmup=5)
        count = len(items)
    torch.cuda.synchronize()
    row = {"scenario": name, "kind": kind,
           "twinfer serial ms": prof.serial_s * 1e3 / count,
           "twinfer together ms": prof.concurrent_s * 1e3 / count,
           "twinfer overlap": prof.overlap,
           "twinfer p50 ms": {m.name: prof.latency_ms(m.name, "together", 50) for m in prof.members},
           "twinfer p99 ms": {m.name: prof.latency_ms(m.name, "together", 99) for m in prof.members},
           "memory": prof.memory, "clock": prof.clock}
    try:
        g = group.graphed()
        row["twinfer graph ms"] = graphed_ms(g, feeds, args.iterations)
        row["twinfer graph overlap"] = row["twinfer serial ms"] / row["twinfer graph ms"]
        row["graph nodes"] = g.stats()["nodes"]
        if kind == "pipeline":  # the stages of consecutive items overlapped inside each launch
            row["twinfer graph map ms"] = graphed_map_ms(g, items)
            row["twinfer graph map overlap"] = row["twinfer serial ms"] / row["twinfer graph map ms"]
    except twinfer.Error as e:
        row["twinfer graph"] = f"not captured: {e}"
    if args.plot and name == args.plot_scenario:
        # The drawn profile also traces kernels (CUPTI), apart from the timed
        # one: tracing adds a little time per kernel.
        try:
            kprof = (group.profile(feeds, iterations=min(args.iterations, 10), warmup=2, kernels=True)
                     if kind == "parallel" else group.profile(items[:10], warmup=2, kernels=True))
            kprof.plot().savefig(args.plot, dpi=120)
            row["kernel overlap"] = kprof.kernel_overlap()
            row["kernels traced"] = len(kprof.kernels)
        except twinfer.DeviceError as e:  # no CUPTI: the runs alone
            row["kernels traced"] = f"no: {e}"
            prof.plot().savefig(args.plot, dpi=120)
        row["plot"] = args.plot
    group.close()

    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    with torch.inference_mode():
        for label, compiled in (("torch eager", False), ("torch.compile", True)):
            if compiled and not args.compile:
                continue
            ma, mb = torch_functions(models, compiled)
            xa = tuple(cuda_inputs(models[0]).values())
            if kind == "parallel":
                xb = tuple(cuda_inputs(models[1]).values())
                r = torch_pair_ms(lambda: ma(*xa), lambda: mb(*xb), args.iterations)
            else:
                r = torch_pair_ms(lambda: ma(*xa), lambda y=None: mb(y), args.iterations, pipeline=True)
            row[f"{label} serial ms"] = r["a_ms"] + r["b_ms"]
            row[f"{label} two streams ms"] = r["together_ms"]
            row[f"{label} overlap"] = r["overlap"]
    return row


# -- priorities under load ------------------------------------------------------------------
class Load:
    """A low-priority model run back to back on its own stream, two calls in flight."""

    def __init__(self, run, sync):
        self.run, self.sync = run, sync
        self.stop = threading.Event()
        self.calls = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        try:
            while not self.stop.is_set():
                self.run()
                self.run()
                self.sync()
                self.calls += 2
        except BaseException as e:  # noqa: BLE001 - raised in __exit__: "loaded" must not mean "idle"
            self.error = e

    def __enter__(self):
        self.thread.start()
        time.sleep(0.2)  # the GPU is busy before measuring
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise RuntimeError(f"the low-priority load failed, so the loaded figures would be idle ones: "
                               f"{type(self.error).__name__}: {self.error}") from self.error


def event_latencies_ms(run, stream_record, n: int) -> list[float]:
    """Per call: timing events on the caller's stream around run(), waited for."""
    lat = []
    for _ in range(n):
        start, end = twinfer._core.create_event("cuda", True), twinfer._core.create_event("cuda", True)
        stream_record(start)
        run()
        stream_record(end)
        end.synchronize()
        lat.append(twinfer._core.elapsed_ms("cuda", start, end) / 1e3)
    return lat


def priority_rows(folder: Path, args) -> list[dict]:
    import torch

    hi_name, lo_name, lo_batch = "resnet50", "resnet50", args.load_batch
    hi = twinfer.load(export(folder, hi_name), device="cuda", precision=args.precision)
    lo = hi if lo_name == hi_name else twinfer.load(export(folder, lo_name), device="cuda", precision=args.precision)
    x_hi, x_lo = cuda_inputs(hi_name), cuda_inputs(lo_name, lo_batch)
    least, greatest = twinfer.stream_priority_range("cuda")
    torch.cuda.synchronize()
    rows = []

    def measure(label, hi_ctx, lo_ctx):
        try:
            measure_one(label, hi_ctx, lo_ctx)
        except Exception as e:  # noqa: BLE001 - the other settings are still measured
            rows.append({"scenario": f"priority: {label}", "skipped": f"{type(e).__name__}: {e}"})
            print(json.dumps(rows[-1]), flush=True)

    def measure_one(label, hi_ctx, lo_ctx):
        run_hi = lambda: hi.run(x_hi, context=hi_ctx, stream=hi_ctx.stream, outputs="device")  # noqa: E731
        rec = hi_ctx.stream.record
        for _ in range(10):
            run_hi()
        hi_ctx.synchronize()
        solo = event_latencies_ms(run_hi, rec, args.latency_runs)
        with Load(lambda: lo.run(x_lo, context=lo_ctx, stream=lo_ctx.stream, outputs="device"),
                  lo_ctx.synchronize) as load:
            loaded = event_latencies_ms(run_hi, rec, args.latency_runs)
        rows.append({"scenario": f"priority: {label}", "solo p50 ms": percentile_ms(solo, 50),
                     "solo p99 ms": percentile_ms(solo, 99), "loaded p50 ms": percentile_ms(loaded, 50),
                     "loaded p99 ms": percentile_ms(loaded, 99),
                     "p99 ratio": percentile_ms(loaded, 99) / percentile_ms(solo, 99), "load calls": load.calls})
        print(json.dumps(rows[-1]), flush=True)

    measure("both normal", hi.create_context(), lo.create_context())
    measure("high vs low", hi.create_context(priority=greatest), lo.create_context(priority=least))
    # SM shares: the high-priority member's kernels never wait for the load's
    # blocks to leave an SM. A batch-1 model needs few SMs, so the smaller share
    # for it is measured too. (Contexts are made one pair at a time: partitions
    # hold their SMs while they live.)
    for hi_share, lo_share in ((0.5, 0.5), (0.25, 0.75)):
        gc.collect()  # the previous pair's contexts (and their SMs) go first
        label = f"high vs low, sm_share {hi_share} / {lo_share}"
        try:
            measure(label, hi.create_context(priority=greatest, sm_share=hi_share),
                    lo.create_context(priority=least, sm_share=lo_share))
        except twinfer.Error as e:
            rows.append({"scenario": f"priority: {label}", "skipped": str(e)})

    # PyTorch: the same model on prioritised streams.
    with torch.inference_mode():
        m_hi, = torch_functions([hi_name], False)
        (xh,), (xl,) = tuple(x_hi.values()), tuple(x_lo.values())
        s_hi, s_lo = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)

        def run_hi():
            with torch.cuda.stream(s_hi):
                m_hi(xh)

        def run_lo():
            # inference_mode is per thread: the load thread sets its own.
            with torch.inference_mode(), torch.cuda.stream(s_lo):
                m_hi(xl)

        def torch_lat(n):
            out = []
            for _ in range(n):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(s_hi)
                run_hi()
                e.record(s_hi)
                e.synchronize()
                out.append(s.elapsed_time(e) / 1e3)
            return out

        for _ in range(10):
            run_hi()
        torch.cuda.synchronize()
        solo = torch_lat(args.latency_runs)
        with Load(run_lo, s_lo.synchronize) as load:
            loaded = torch_lat(args.latency_runs)
        rows.append({"scenario": "priority: torch eager, high vs low streams", "solo p50 ms": percentile_ms(solo, 50),
                     "solo p99 ms": percentile_ms(solo, 99), "loaded p50 ms": percentile_ms(loaded, 50),
                     "loaded p99 ms": percentile_ms(loaded, 99),
                     "p99 ratio": percentile_ms(loaded, 99) / percentile_ms(solo, 99), "load calls": load.calls})
        print(json.dumps(rows[-1]), flush=True)
    return rows


SCENARIOS = [
    ("resnet50 + minilm", "parallel", ["resnet50", "minilm"]),
    ("mobilenet_v2 + efficientnet_b0", "parallel", ["mobilenet_v2", "efficientnet_b0"]),
    ("detector -> classifier", "pipeline", ["detector", "classifier"]),
]


def run(args, folder: Path) -> dict:
    import torch

    if not twinfer.cuda_available() or not torch.cuda.is_available():
        raise SystemExit("dual_model --device cuda needs a CUDA GPU visible to twinfer and torch")
    rows = []
    for name, kind, models in SCENARIOS:
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        try:
            rows.append(pair_rows(name, kind, models, folder, args))
        except Exception as e:  # noqa: BLE001 - one scenario's failure must not cost the others' figures
            rows.append({"scenario": name, "skipped": f"{type(e).__name__}: {e}"})
        print(json.dumps(rows[-1], default=str), flush=True)
    if not args.only or "priority" in args.only:
        try:
            rows += priority_rows(folder, args)
        except Exception as e:  # noqa: BLE001
            rows.append({"scenario": "priority", "skipped": f"{type(e).__name__}: {e}"})
            print(json.dumps(rows[-1], default=str), flush=True)

    cols = ["twinfer serial ms", "twinfer together ms", "twinfer overlap", "twinfer graph ms", "twinfer graph overlap",
            "twinfer graph map ms", "twinfer graph map overlap",
            "torch eager two streams ms", "torch eager overlap", "torch.compile two streams ms", "torch.compile overlap"]
    print("\n| scenario | " + " | ".join(cols) + " |")
    print("|" + " --- |" * (len(cols) + 1))
    for r in rows:
        if "twinfer overlap" in r:
            cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else "-" for c in cols]
            print(f"| {r['scenario']} | " + " | ".join(cells) + " |")
    print("\n| priority scenario | solo p50 | solo p99 | loaded p50 | loaded p99 | p99 ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "p99 ratio" in r:
            print(f"| {r['scenario']} | {r['solo p50 ms']:.3f} | {r['solo p99 ms']:.3f} | {r['loaded p50 ms']:.3f} | "
                  f"{r['loaded p99 ms']:.3f} | {r['p99 ratio']:.2f}x |")
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "twinfer": twinfer.__version__,
            "precision": args.precision, "iterations": args.iterations, "time": time.strftime("%Y-%m-%d %H:%M"),
            "numpy": np.__version__}
    return {"meta": meta, "rows": rows}
