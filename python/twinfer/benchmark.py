"""Latency and throughput of an engine, and of its peers on the same model.

``twinfer bench`` is built on this; in Python (or Jupyter, where reports render
as tables):

    from twinfer.benchmark import random_feeds, time_engine, BenchReport
    engine = twinfer.load("model.onnx", device="cpu")
    feeds = random_feeds(engine.inputs, batch=8)
    report = BenchReport("model.onnx", [time_engine(engine, feeds, iterations=50)])
    print(report)

Figures are wall-clock times of whole ``run`` calls (inputs in, outputs out),
measured after untimed warm-up runs; the first run (which also plans memory
and picks kernels for the shapes) is reported apart.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ._convert import numpy_dtype
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .engine import Engine


@dataclass
class Timing:
    """Per-run wall-clock times (seconds) of one runtime on one workload."""

    runtime: str
    times: list[float]
    batch: int = 1
    first_run_s: float | None = None
    note: str = ""

    def percentile_ms(self, q: float) -> float:
        s = sorted(self.times)
        # Nearest-rank on the sorted sample, like trtexec's percentiles.
        k = min(len(s) - 1, max(0, int(np.ceil(q / 100 * len(s))) - 1))
        return s[k] * 1e3

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.times) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.times) * 1e3

    @property
    def throughput(self) -> float:
        """Inferences (samples) per second at the mean latency."""
        return self.batch / (statistics.fmean(self.times))

    def summary(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "iterations": len(self.times),
            "batch": self.batch,
            "p50_ms": self.percentile_ms(50),
            "p90_ms": self.percentile_ms(90),
            "p99_ms": self.percentile_ms(99),
            "mean_ms": self.mean_ms,
            "min_ms": self.min_ms,
            "throughput_per_s": self.throughput,
            "first_run_ms": None if self.first_run_s is None else self.first_run_s * 1e3,
            "note": self.note,
        }


def time_calls(runtime: str, fn: Callable[[], object], iterations: int, warmup: int, batch: int = 1) -> Timing:
    """Time ``fn``: the first call alone, then ``warmup`` untimed calls, then ``iterations`` timed ones."""
    if iterations < 1:
        raise InvalidArgumentError("iterations must be >= 1")
    if warmup < 0:
        raise InvalidArgumentError("warmup must be >= 0")
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    for _ in range(max(0, warmup)):
        fn()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Timing(runtime, times, batch, first)


def time_engine(engine: "Engine", feeds: dict, iterations: int = 50, warmup: int = 5,
                batch: int | None = None) -> Timing:
    """Time ``engine.run(feeds)`` (see ``time_calls``); ``batch`` defaults to dim 0 of the first input."""
    return time_calls("twinfer", lambda: engine.run(feeds), iterations, warmup, batch or batch_of(feeds))


def batch_of(feeds: dict) -> int:
    for v in feeds.values():
        shape = getattr(v, "shape", ())
        if len(shape):
            return int(shape[0])
    return 1


# -- inputs ----------------------------------------------------------------
def parse_shapes(text: str | None) -> dict[str, list[int]]:
    """``"input:1x3x224x224,mask:1x128"`` -> {"input": [1, 3, 224, 224], "mask": [1, 128]}."""
    shapes: dict[str, list[int]] = {}
    if not text:
        return shapes
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise InvalidArgumentError(f"bad --shapes item '{item}': expected name:1x3x224x224")
        try:
            shapes[name] = [int(d) for d in dims.lower().split("x")] if dims else []
        except ValueError:
            raise InvalidArgumentError(f"bad --shapes item '{item}': dims must be integers joined by 'x'") from None
    return shapes


def concrete_shapes(specs: Sequence, shapes: dict[str, list[int]] | None = None, batch: int = 1) -> dict[str, list[int]]:
    """A concrete shape per input: given ones as they are; otherwise the declared
    shape with the first symbolic/unknown dim set to ``batch`` and any later
    symbolic dim set to 1 (pass those in ``shapes``)."""
    shapes = dict(shapes or {})
    unknown = [n for n in shapes if n not in {s.name for s in specs}]
    if unknown:
        raise InvalidArgumentError(f"--shapes names {unknown} are not inputs; inputs: {[s.name for s in specs]}")
    out = {}
    for s in specs:
        if s.name in shapes:
            out[s.name] = list(shapes[s.name])
            continue
        dims = []
        for i, d in enumerate(s.shape):
            if isinstance(d, int) and d >= 0:
                dims.append(d)
            else:
                dims.append(batch if i == 0 else 1)
        out[s.name] = dims
    return out


def random_feeds(specs: Sequence, shapes: dict[str, list[int]] | None = None, batch: int = 1,
                 rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Random inputs for the given input specs. Floats: standard normal.
    Integers: 0 or 1 (valid token ids, masks and indices for any model).
    Booleans: True."""
    rng = rng or np.random.default_rng()
    feeds = {}
    for name, shape in concrete_shapes(specs, shapes, batch).items():
        dtype = np.dtype(numpy_dtype(next(s.dtype for s in specs if s.name == name)))
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = np.ones(shape, dtype=dtype)
        else:
            raise InvalidArgumentError(f"cannot make random data of dtype {dtype} for input '{name}'")
    return feeds


# -- peers -----------------------------------------------------------------
def onnxruntime_session(path: str | os.PathLike, threads: int, device: str = "cpu") -> Any:
    """An onnxruntime InferenceSession on ``path`` with ``threads`` intra-op threads (one inter-op),
    on CUDA when ``device`` is a GPU and onnxruntime has the CUDA provider."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device.startswith("cuda") else ["CPUExecutionProvider"]
    providers = [p for p in wanted if p in ort.get_available_providers()]
    return ort.InferenceSession(os.fspath(path), so, providers=providers)


def time_onnxruntime(path: str | os.PathLike, feeds: dict, threads: int, iterations: int, warmup: int,
                     device: str = "cpu") -> tuple[Timing, list]:
    """Time onnxruntime on the same file and feeds; returns the timing and its outputs."""
    sess = onnxruntime_session(path, threads, device)
    t = time_calls("onnxruntime", lambda: sess.run(None, feeds), iterations, warmup, batch_of(feeds))
    t.note = f"{threads} intra-op threads, {sess.get_providers()[0]}"
    return t, sess.run(None, feeds)


def time_torch(module: Any, feeds: dict, threads: int, iterations: int, warmup: int,
               device: str = "cpu") -> tuple[Timing, list]:
    """Time an eager torch.nn.Module (``inference_mode``, ``threads`` intra-op threads) on the feeds
    in order; returns the timing and its outputs as NumPy arrays."""
    import torch

    torch.set_num_threads(threads)
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    module = module.to(dev).eval()
    args = [torch.from_numpy(np.ascontiguousarray(v)).to(dev) for v in feeds.values()]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def call():
        with torch.inference_mode():
            out = module(*args)
        sync()
        return out

    t = time_calls("torch (eager)", call, iterations, warmup, batch_of(feeds))
    t.note = f"{threads} threads, torch {torch.__version__}"
    out = call()
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return t, [o.detach().cpu().numpy() for o in outs]


# -- the report ------------------------------------------------------------
@dataclass
class BenchReport:
    """Timings of one workload on one or more runtimes, twinfer first."""

    model: str
    results: list[Timing]
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    agreement: dict[str, float] = field(default_factory=dict)  # peer -> max |twinfer - peer| over the outputs

    _COLUMNS = ["runtime", "p50 ms", "p90 ms", "p99 ms", "mean ms", "min ms", "throughput/s", "first run ms", "vs twinfer"]

    def rows(self) -> list[list[str]]:
        base = self.results[0].percentile_ms(50) if self.results else None
        rows = []
        for t in self.results:
            first = "" if t.first_run_s is None else f"{t.first_run_s * 1e3:.2f}"
            ratio = f"{t.percentile_ms(50) / base:.2f}x" if base else ""
            rows.append([
                t.runtime, f"{t.percentile_ms(50):.3f}", f"{t.percentile_ms(90):.3f}", f"{t.percentile_ms(99):.3f}",
                f"{t.mean_ms:.3f}", f"{t.min_ms:.3f}", f"{t.throughput:.1f}", first, ratio,
            ])
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "config": self.config, "results": [t.summary() for t in self.results],
                "agreement": self.agreement, "notes": self.notes}

    def save_json(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)

    def __str__(self) -> str:
        rows = [self._COLUMNS] + self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._COLUMNS))]
        lines = [f"model: {self.model}"]
        if self.config:
            lines.append("  " + ", ".join(f"{k}={v}" for k, v in self.config.items()))
        for j, r in enumerate(rows):
            lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
            if j == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines.append("  (latency of whole run calls; 'vs twinfer' = p50 / twinfer's p50, above 1.00x means slower than twinfer)")
        lines.extend(f"  max |twinfer - {peer}| over the outputs: {d:.3g}" for peer, d in self.agreement.items())
        lines.extend(f"  {n}" for n in self.notes)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from .display import key_values, table

        parts = [key_values([("model", self.model)] + list(self.config.items()), "twinfer benchmark")]
        parts.append(table(self._COLUMNS, self.rows()))
        lines = [f"max |twinfer - {p}| over the outputs: {d:.3g}" for p, d in self.agreement.items()] + self.notes
        if lines:
            import html

            parts.append("".join(f"<div>{html.escape(str(n))}</div>" for n in lines))
        return "<div>" + "".join(parts) + "</div>"
