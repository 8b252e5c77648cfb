"""Prometheus metrics of the server (prometheus_client), served on their own port.

Each server has its own registry, so several servers in one process (tests)
do not share counters. Memory is collected when Prometheus scrapes: every
loaded model version reports the bytes its engine's memory plan holds
(weights once per engine, one arena per instance) per device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from .batcher import BatchRecord

log = logging.getLogger("twinfer.serve")

_LABELS = ("model", "version")
# Latencies from 100 us to ~30 s; batch sizes as powers of two.
_SECONDS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

# (model, version, device, kind, bytes) rows
MemoryRows = Iterable[tuple[str, str, str, str, int]]
# (model, version, requests waiting) rows
QueueRows = Iterable[tuple[str, str, int]]


class ServerMetrics:
    """The server's counters and histograms, and the registry they live in."""

    def __init__(self, memory_source: Callable[[], MemoryRows] | None = None,
                 queue_source: Callable[[], QueueRows] | None = None):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("twinfer_inference_requests", "Inference requests answered, by outcome",
                                _LABELS + ("outcome",), registry=r)
        self.inferences = Counter("twinfer_inference_count", "Samples inferred (batch rows), counted when run",
                                  _LABELS, registry=r)
        self.executions = Counter("twinfer_inference_exec_count", "Batches executed", _LABELS, registry=r)
        self.request_seconds = Histogram("twinfer_request_duration_seconds",
                                         "Request latency in the server, arrival to answer", _LABELS,
                                         buckets=_SECONDS, registry=r)
        self.queue_seconds = Histogram("twinfer_queue_duration_seconds", "Time a request waited for its batch",
                                       _LABELS, buckets=_SECONDS, registry=r)
        self.compute_seconds = Histogram("twinfer_compute_duration_seconds",
                                         "Time to run one batch (merge inputs, engine run, split outputs)", _LABELS,
                                         buckets=_SECONDS, registry=r)
        self.batch_size = Histogram("twinfer_batch_size", "Samples per executed batch", _LABELS, buckets=_BATCH,
                                    registry=r)
        if memory_source is not None or queue_source is not None:
            r.register(_LoadedModelsCollector(memory_source, queue_source))

    def observe_request(self, model: str, version: str, ok: bool, seconds: float) -> None:
        self.requests.labels(model, version, "success" if ok else "failure").inc()
        if ok:
            self.request_seconds.labels(model, version).observe(seconds)

    def observe_batch(self, model: str, version: str, record: BatchRecord) -> None:
        if record.error is not None:
            return
        self.inferences.labels(model, version).inc(record.batch_size)
        self.executions.labels(model, version).inc()
        self.batch_size.labels(model, version).observe(record.batch_size)
        self.compute_seconds.labels(model, version).observe((record.input_ns + record.infer_ns + record.output_ns) / 1e9)
        queue = self.queue_seconds.labels(model, version)
        for ns in record.queue_ns:
            queue.observe(ns / 1e9)


class _LoadedModelsCollector:
    """Gauges read from the loaded models when Prometheus scrapes:
    twinfer_model_memory_bytes and twinfer_pending_requests."""

    def __init__(self, memory: Callable[[], MemoryRows] | None, queue: Callable[[], QueueRows] | None):
        self._memory = memory
        self._queue = queue

    def describe(self):
        return []  # collected lazily: nothing to check when registering

    def collect(self):
        if self._memory is not None:
            family = GaugeMetricFamily("twinfer_model_memory_bytes",
                                       "Bytes a loaded model holds by its memory plan (weights per engine, arenas "
                                       "per instance at the largest batch run so far)",
                                       labels=["model", "version", "device", "kind"])
            try:
                for model, version, device, kind, nbytes in self._memory():
                    family.add_metric([model, version, device, kind], float(nbytes))
            except Exception:  # noqa: BLE001 - a scrape must not fail because one engine could not report
                log.exception("memory metrics could not be read")
            yield family
        if self._queue is not None:
            family = GaugeMetricFamily("twinfer_pending_requests", "Requests waiting in a model's queue",
                                       labels=["model", "version"])
            for model, version, queued in self._queue():
                family.add_metric([model, version], float(queued))
            yield family
