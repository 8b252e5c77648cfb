"""One served version of a model: its engines (one per device its instances
run on), the Batcher in front of them, its statistics, and the checks every
request passes before it is queued."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from pathlib import Path

import numpy as np

from .. import _core
from .._engine import Engine
from ..engine import load
from ..errors import DTypeError, Error, InvalidArgumentError, ShapeError
from .batcher import Batcher, BatcherClosed, BatchRecord, QueueFull, default_cpu_threads
from .config import (ENGINE_PLATFORM, ONNX_PLATFORM, ModelConfig, ModelSettings, complete_io, fill_defaults,
                     model_file)
from .errors import InvalidRequest, ModelLoadError, RequestTimedOut, ServeError, Unavailable, VersionClosed
from .metrics import ServerMetrics
from .statistics import ModelStatistics
from .tensors import datatype_of

log = logging.getLogger("twinfer.serve")


def _instance_devices(settings: ModelSettings, gpu_device: str) -> list[tuple[str, int, list[int]]]:
    """(kind, count, gpus) per instance group, KIND_AUTO resolved: the GPU
    when one is usable, else the CPU. ``gpu_device`` is "cuda", or "sim" to
    run KIND_GPU instances on the simulated GPU (tests, machines without one)."""
    gpu_usable = gpu_device == "sim" or _core.cuda_available()
    out = []
    for i, g in enumerate(settings.instance_groups):
        kind = g.kind
        if kind == "auto":
            kind = "gpu" if gpu_device == "cuda" and _core.cuda_available() else "cpu"
        if kind == "gpu" and not gpu_usable:
            raise ModelLoadError(f"model {settings.name!r}: instance_group[{i}].kind: KIND_GPU, but no CUDA GPU "
                                 "is usable here; use KIND_CPU or KIND_AUTO")
        out.append((kind, g.count, list(g.gpus)))
    return out


def _device_names(kind: str, gpus: list[int], gpu_device: str) -> list[str]:
    if kind == "cpu":
        return ["cpu"]
    return [f"{gpu_device}:{g}" for g in gpus] or [f"{gpu_device}:0"]


class ServedVersion:
    """A loaded model version, ready for requests."""

    def __init__(self, model_dir: Path, version: int, config: ModelConfig, settings: ModelSettings,
                 gpu_device: str = "cuda", metrics: ServerMetrics | None = None):
        self.name = settings.name
        self.version = str(version)
        self.settings = settings
        self.config = config
        self.stats = ModelStatistics(self.name, self.version)
        self._metrics = metrics
        self._largest_batch = 0
        self._shapes: dict[str, tuple] = {}
        path = model_file(settings, model_dir / self.version)
        self.platform = settings.platform or (ENGINE_PLATFORM if path.suffix == ".twinfer" else ONNX_PLATFORM)
        groups = _instance_devices(settings, gpu_device)
        cpu_instances = sum(count for kind, count, _ in groups if kind == "cpu")
        num_threads = settings.num_threads or default_cpu_threads(cpu_instances)
        engines: dict[str, Engine] = {}
        instances: list[Engine] = []
        for kind, count, gpus in groups:
            for device in _device_names(kind, gpus, gpu_device):
                if device not in engines:
                    engines[device] = self._load_engine(path, device, num_threads)
                instances += [engines[device]] * count
        self.engines = engines
        first = next(iter(engines.values()))
        complete_io(settings, config, first)
        fill_defaults(config, settings, groups, self.platform)
        self.inputs = {t.name: t for t in settings.inputs}
        self.outputs = {t.name: t for t in settings.outputs}
        try:
            self.batcher = Batcher(
                instances, instances=1, max_batch_size=settings.max_batch_size,
                max_queue_delay=settings.max_queue_delay_us / 1e6,
                preferred_batch_sizes=settings.preferred_batch_sizes, dynamic_batching=settings.dynamic_batching,
                max_queue_size=settings.max_queue_size, num_threads=num_threads, listener=_weakly(self._on_batch),
                name=f"{self.name}:{self.version}")
        except InvalidArgumentError as e:
            raise ModelLoadError(f"model {self.name!r}: {e}") from None
        for name in settings.not_applied:
            log.info("model %r: %s is a Triton setting twinfer does not apply", self.name, name)
        log.info("model %r version %s: %s on %s, %d instance(s), max_batch_size %d%s", self.name, self.version,
                 path.name, ", ".join(engines), len(instances), settings.max_batch_size,
                 ", dynamic batching" if settings.dynamic_batching else "")

    def _load_engine(self, path: Path, device: str, num_threads: int) -> Engine:
        s = self.settings
        options = {"num_threads": num_threads}
        if path.suffix != ".twinfer" and s.precision == "int8":
            options["calibration"] = s.calibration
        # A saved engine keeps its own precision unless the config asks for
        # another (the config's fp32 is its default, not a request).
        precision = None if path.suffix == ".twinfer" and s.precision == "fp32" else s.precision
        try:
            return load(str(path), device=device, precision=precision, **options)
        except InvalidArgumentError as e:
            if "precision" in str(e):
                raise ModelLoadError(f"model {self.name!r}: parameters.precision: {e}") from None
            raise ModelLoadError(f"model {self.name!r} version {self.version}: {path.name}: {e}") from None
        except (Error, OSError, ValueError) as e:
            raise ModelLoadError(f"model {self.name!r} version {self.version}: {path.name} on {device}: "
                                 f"{type(e).__name__}: {e}") from None

    # -- requests ------------------------------------------------------------------
    def check_inputs(self, tensors: dict[str, tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """{name: (datatype, array)} from the wire, checked against the
        configuration: names, datatypes, ranks, fixed dims and the batch dim."""
        unknown = [n for n in tensors if n not in self.inputs]
        if unknown:
            raise InvalidRequest(f"model {self.name!r}: unknown input(s) {unknown}; its inputs are "
                                 f"{list(self.inputs)}")
        missing = [n for n in self.inputs if n not in tensors]
        if missing:
            raise InvalidRequest(f"model {self.name!r}: missing input(s) {missing}")
        mbs = self.settings.max_batch_size
        feeds = {}
        for name, (datatype, array) in tensors.items():
            t = self.inputs[name]
            want = datatype_of(t.dtype)
            if datatype != want:
                raise InvalidRequest(f"model {self.name!r}: input {name!r} has datatype {datatype}, the model "
                                     f"takes {want}")
            shape = array.shape
            expected = ([-1] if mbs else []) + list(t.dims)
            if len(shape) != len(expected) or any(e != -1 and d != e for d, e in zip(shape, expected)):
                raise InvalidRequest(f"model {self.name!r}: input {name!r} has shape {list(shape)}, the model "
                                     f"takes {expected}")
            if mbs and not 1 <= shape[0] <= mbs:
                raise InvalidRequest(f"model {self.name!r}: input {name!r} has batch size {shape[0]}, outside "
                                     f"1..max_batch_size ({mbs})")
            feeds[name] = array
        return feeds

    def check_outputs(self, names: list[str] | None) -> list[str]:
        if not names:
            return list(self.outputs)
        unknown = [n for n in names if n not in self.outputs]
        if unknown:
            raise InvalidRequest(f"model {self.name!r}: unknown output(s) {unknown}; its outputs are "
                                 f"{list(self.outputs)}")
        return list(names)

    def timeout_for(self, requested_us: int | None) -> float | None:
        """The queue timeout of a request in seconds: its own "timeout"
        parameter where the configuration lets requests choose, else the
        configured default (None: no limit)."""
        s = self.settings
        if requested_us and s.allow_timeout_override:
            return requested_us / 1e6
        return s.default_timeout_us / 1e6 if s.default_timeout_us else None

    async def infer(self, feeds: dict[str, np.ndarray], outputs: list[str], timeout: float | None,
                    received_ns: int) -> dict[str, np.ndarray]:
        """Run one checked request through the batcher; the requested outputs."""
        ok = False
        counted = True
        try:
            try:
                future = self.batcher.submit(feeds, timeout)
            except BatcherClosed as e:
                counted = False  # never reached this version: the retry on the new one counts it
                raise VersionClosed(f"model {self.name!r}: {e}") from None
            except QueueFull as e:
                raise Unavailable(f"model {self.name!r}: {e}") from None
            except (ShapeError, DTypeError, InvalidArgumentError) as e:
                # The batcher's own checks (inputs disagreeing on the batch
                # dim, a shape the config allows but the model does not).
                raise InvalidRequest(f"model {self.name!r}: {e}") from None
            self._note_shapes(feeds)
            try:
                result = await asyncio.wrap_future(future)
            except TimeoutError as e:
                raise RequestTimedOut(str(e)) from None
            except BatcherClosed as e:
                raise Unavailable(str(e)) from None
            except (ShapeError, DTypeError, InvalidArgumentError) as e:
                raise InvalidRequest(f"model {self.name!r}: {e}") from None
            except Error as e:
                raise ServeError(f"model {self.name!r}: {type(e).__name__}: {e}") from None
            ok = True
            return {name: result[name] for name in outputs}
        finally:
            if counted:
                self.record_request(ok, received_ns)

    def record_request(self, ok: bool, received_ns: int) -> None:
        """A request answered or refused: statistics and metrics."""
        elapsed = time.monotonic_ns() - received_ns
        self.stats.record_request(ok, elapsed)
        if self._metrics is not None:
            self._metrics.observe_request(self.name, self.version, ok, elapsed / 1e9)

    def _on_batch(self, record: BatchRecord) -> None:
        self._largest_batch = max(self._largest_batch, record.batch_size)
        self.stats.record_batch(record)
        if self._metrics is not None:
            self._metrics.observe_batch(self.name, self.version, record)

    def _note_shapes(self, feeds: dict[str, np.ndarray]) -> None:
        if not self._shapes:
            self._shapes = {name: a.shape for name, a in feeds.items()}

    # -- description -----------------------------------------------------------------
    def tensor_metadata(self) -> tuple[list[dict], list[dict]]:
        batch = [-1] if self.settings.max_batch_size else []
        describe = [
            [{"name": t.name, "datatype": datatype_of(t.dtype), "shape": batch + list(t.dims)} for t in ts.values()]
            for ts in (self.inputs, self.outputs)]
        return describe[0], describe[1]

    def memory_rows(self):
        """(model, version, device, kind, bytes): weights per engine, arenas
        times the instances of that engine, at the largest batch run so far."""
        if not self._shapes:
            return
        batch = max(1, self._largest_batch)
        mbs = self.settings.max_batch_size
        shapes = {n: ((batch,) + tuple(s[1:])) if mbs else tuple(s) for n, s in self._shapes.items()}
        per_engine: dict[int, tuple[Engine, int]] = {}
        for e in self.batcher.instance_engines:
            per_engine[id(e)] = (e, per_engine.get(id(e), (e, 0))[1] + 1)
        totals: dict[tuple[str, str], int] = {}
        for e, count in per_engine.values():
            report = e.memory_report(shapes)
            rows = [("cpu", "weights", report["constant_bytes"]), ("cpu", "arena", report["arena_bytes"] * count)]
            if e.device != "cpu":
                rows += [(e.device, "weights", report["device_constant_bytes"]),
                         (e.device, "arena", report["device_arena_bytes"] * count)]
            for device, kind, nbytes in rows:
                totals[(device, kind)] = totals.get((device, kind), 0) + int(nbytes)
        for (device, kind), nbytes in sorted(totals.items()):
            yield self.name, self.version, device, kind, nbytes

    def close(self, drain: bool = True) -> None:
        """Refuse new requests, answer the queued ones (``drain``), then let the
        engines go: an unloaded or replaced version gives its memory back when
        unload/load returns, even while a late request still holds the version."""
        self.batcher.close(drain=drain)
        self.engines = {}


def _weakly(method):
    """``method`` for the batcher to call without keeping its object alive:
    a bound method would make the cycle version -> batcher -> method ->
    version, and a dropped version (its engines: weights, arenas, device
    memory) would wait for the cycle collector instead of going at once."""
    ref = weakref.WeakMethod(method)

    def call(*args):
        m = ref()
        if m is not None:
            m(*args)

    return call
