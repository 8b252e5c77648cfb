"""Per-model-version inference statistics in the shape of the KServe
statistics extension (Triton's ModelStatistics), so tritonclient's
get_inference_statistics reads them over HTTP and gRPC alike.

As in Triton: the request-level durations (success, fail, queue and the
three compute phases) count each request once, a request in a merged batch
taking the batch's compute times; batch_stats count executions per batch size.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from .batcher import BatchRecord

_REQUEST_KEYS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
                 "cache_hit", "cache_miss")
_PHASES = ("compute_input", "compute_infer", "compute_output")


class _Duration:
    __slots__ = ("count", "ns")

    def __init__(self):
        self.count = 0
        self.ns = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += int(ns)

    def to_dict(self) -> dict:
        return {"count": self.count, "ns": self.ns}


class ModelStatistics:
    """Thread-safe counters of one model version."""

    def __init__(self, name: str, version: str):
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._requests = {key: _Duration() for key in _REQUEST_KEYS}
        self._batches: dict[int, dict[str, _Duration]] = defaultdict(lambda: {p: _Duration() for p in _PHASES})
        self._inference_count = 0
        self._execution_count = 0
        self._last_inference_ms = 0

    def record_request(self, ok: bool, duration_ns: int) -> None:
        """One request answered (``ok``) or failed, ``duration_ns`` from its arrival."""
        with self._lock:
            self._requests["success" if ok else "fail"].add(duration_ns)
            self._last_inference_ms = int(time.time() * 1000)

    def record_batch(self, record: BatchRecord) -> None:
        """One batch the model's batcher ran (BatchRecord from twinfer.Batcher)."""
        phases = dict(zip(_PHASES, (record.input_ns, record.infer_ns, record.output_ns)))
        with self._lock:
            if record.error is None:
                self._execution_count += 1
                self._inference_count += record.batch_size
                for q in record.queue_ns:
                    self._requests["queue"].add(q)
                for phase, ns in phases.items():
                    self._requests[phase].add(ns * len(record.request_sizes), len(record.request_sizes))
                    self._batches[record.batch_size][phase].add(ns)

    def to_dict(self) -> dict:
        """One entry of the extension's "model_stats" list."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self._last_inference_ms,
                "inference_count": self._inference_count,
                "execution_count": self._execution_count,
                "inference_stats": {key: d.to_dict() for key, d in self._requests.items()},
                "batch_stats": [{"batch_size": size, **{p: d.to_dict() for p, d in phases.items()}}
                                for size, phases in sorted(self._batches.items())],
            }
