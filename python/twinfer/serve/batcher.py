"""twinfer.Batcher: in-process dynamic batching in front of an engine.

Callers on any thread (or asyncio task) submit one request each; worker
threads, one per model instance and each with its own execution context (on
a GPU its own stream), merge queued requests along the first dim into one
batch, run it, and hand every caller back its own slice of the outputs.

Scheduling follows Triton's dynamic batcher: a batch is sent as soon as it is
full (max_batch_size, or the largest preferred size), or once the oldest
request has waited max_queue_delay; when it is sent for the delay, the longest
run of requests that adds up to a preferred size goes first. Only requests
whose inputs agree in every dim but the first are merged (the rest wait for a
batch of their own shape), and a request that waits longer than its timeout
fails with TimeoutError without running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from .._convert import numpy_dtype
from .._engine import Engine
from ..errors import DTypeError, InvalidArgumentError, ShapeError

log = logging.getLogger("twinfer.serve")


class BatcherClosed(RuntimeError):
    """The batcher was closed: it takes no new requests."""


class QueueFull(RuntimeError):
    """The batcher's queue holds max_queue_size requests already."""


@dataclass(frozen=True)
class BatchRecord:
    """One executed batch, as listeners (statistics, metrics) see it. Times in
    nanoseconds: ``queue_ns`` per request (submit to the batch's start),
    ``input_ns`` merging the inputs, ``infer_ns`` the engine run, ``output_ns``
    slicing the outputs and handing them back."""

    instance: int
    batch_size: int
    request_sizes: tuple[int, ...]
    queue_ns: tuple[int, ...]
    input_ns: int
    infer_ns: int
    output_ns: int
    error: BaseException | None = None


@dataclass(eq=False)
class _Request:
    feeds: dict
    size: int
    signature: tuple
    future: Future
    enqueued_ns: int
    deadline: float | None  # time.monotonic() after which it may not start


class _NotBatched(ShapeError):
    """An output without the batch as its first dim: retrying alone would hide it."""


class Batcher:
    """Merge concurrent requests to ``engine`` into batches.

    engine: a twinfer.Engine, or a list of engines (e.g. one on the GPU and one
        on the CPU); each gets ``instances`` workers with a context of its own.
    max_batch_size: the most samples (first-dim rows) in one batch; requests
        carry a batch dim of 1..max_batch_size. 0: inputs have no batch dim and
        every request runs alone (instances still run concurrently).
    max_queue_delay: seconds a request may wait for others to join its batch
        (Triton's max_queue_delay_microseconds; 0: take what is queued).
    preferred_batch_sizes: batch sizes to form when possible.
    dynamic_batching: False runs each request on its own (Triton's default
        scheduler) while still checking the batch dim.
    timeout: default seconds a request may wait in the queue (None: no limit);
        ``submit(..., timeout=)`` overrides it per request.
    max_queue_size: requests queued at most (0: unbounded); beyond it,
        ``submit`` raises QueueFull.
    num_threads: CPU threads per instance (0: the engine's setting).
    listener: called with a BatchRecord after every batch (from a worker thread).

    >>> with twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=0.002) as batcher:
    ...     out = batcher.run({"input": x})            # from many threads at once
    ...     out = await batcher.run_async({"input": x}) # or asyncio tasks
    """

    def __init__(self, engine: Engine | Sequence[Engine], *, max_batch_size: int = 8, max_queue_delay: float = 0.0,
                 preferred_batch_sizes: Sequence[int] = (), dynamic_batching: bool = True, instances: int = 1,
                 timeout: float | None = None, max_queue_size: int = 0, num_threads: int = 0,
                 listener: Callable[[BatchRecord], None] | None = None, name: str = "model"):
        engines = [engine] if isinstance(engine, Engine) else list(engine)
        if not engines or not all(isinstance(e, Engine) for e in engines):
            raise InvalidArgumentError("Batcher takes a twinfer.Engine or a non-empty list of them")
        if int(instances) < 1:
            raise InvalidArgumentError(f"instances must be at least 1, got {instances}")
        self.max_batch_size = int(max_batch_size)
        if self.max_batch_size < 0:
            raise InvalidArgumentError(f"max_batch_size must be >= 0, got {max_batch_size}")
        self.preferred_batch_sizes = tuple(sorted({int(s) for s in preferred_batch_sizes}))
        bad = [s for s in self.preferred_batch_sizes if not 1 <= s <= self.max_batch_size]
        if bad:
            raise InvalidArgumentError(f"preferred_batch_sizes {bad} are outside 1..max_batch_size "
                                       f"({self.max_batch_size})")
        if max_queue_delay < 0:
            raise InvalidArgumentError(f"max_queue_delay must be >= 0 seconds, got {max_queue_delay}")
        self.max_queue_delay = float(max_queue_delay)
        self.dynamic_batching = bool(dynamic_batching) and self.max_batch_size > 0
        self.timeout = timeout
        self.max_queue_size = int(max_queue_size)
        self.name = name
        self._listener = listener
        # What requests carry: inputs with a default (override_initializers=)
        # keep it, as a weight cannot be merged across requests.
        self._inputs = [s for s in engines[0].inputs if s.name not in engines[0]._defaults]
        self._rank_unknown = engines[0]._rank_unknown
        self._check_engines(engines)
        self._dtypes = {s.name: np.dtype(numpy_dtype(s.dtype)) for s in self._inputs}

        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._closing = False
        self._counts = Counter()
        self._batch_sizes: Counter = Counter()
        # One context per instance: its own arena and thread budget, and on a
        # GPU its own stream, so instances run concurrently without sharing.
        self._instances = [(e, e.create_context(num_threads)) for e in engines for _ in range(int(instances))]
        # The workers hold the Batcher weakly and let go of it while idle
        # (they wait on _wake, which holds no Batcher), so one dropped
        # without close() is collected, and its finalizer sends them away.
        self._wake = _Wake()
        weakref.finalize(self, self._wake.close, self._cond)
        ref = weakref.ref(self)
        self._workers = [threading.Thread(target=_work, args=(ref, self._cond, self._wake, i),
                                          name=f"twinfer-batcher-{name}-{i}", daemon=True)
                         for i in range(len(self._instances))]
        for w in self._workers:
            w.start()

    def _check_engines(self, engines: list[Engine]) -> None:
        first = [(s.name, s.dtype) for s in self._inputs]
        for e in engines[1:]:
            if [(s.name, s.dtype) for s in e.inputs] != first:
                raise InvalidArgumentError("the engines of one Batcher must have the same inputs")
        if self.max_batch_size == 0:
            return
        for s in self._inputs:
            if not s.shape or isinstance(s.shape[0], int):
                shape = "no declared shape" if s.name in self._rank_unknown else f"shape {list(s.shape)}"
                raise InvalidArgumentError(
                    f"max_batch_size {self.max_batch_size} needs a batch dim first in every input, but input "
                    f"{s.name!r} has {shape}; use max_batch_size=0 for a model without one")
        for s in engines[0].outputs:
            if s.shape and isinstance(s.shape[0], int):
                raise InvalidArgumentError(
                    f"max_batch_size {self.max_batch_size} needs a batch dim first in every output, but output "
                    f"{s.name!r} has shape {list(s.shape)}; use max_batch_size=0 for a model without one")

    # -- submitting ----------------------------------------------------------
    def submit(self, feeds: Mapping[str, np.ndarray], timeout: float | None = None) -> Future:
        """Queue one request; a Future of {output name: NumPy array}. Raises at
        once for a wrong name, dtype or shape (twinfer.InvalidArgumentError,
        DTypeError, ShapeError), when closed (BatcherClosed) or full (QueueFull).
        The arrays are read when the batch runs: do not change them before."""
        arrays, size, signature = self._prepare(feeds)
        timeout = self.timeout if timeout is None else timeout
        now_ns = time.monotonic_ns()
        deadline = now_ns / 1e9 + timeout if timeout is not None else None
        request = _Request(arrays, size, signature, Future(), now_ns, deadline)
        with self._cond:
            if self._closing:
                raise BatcherClosed(f"the batcher of {self.name!r} is closed")
            if self.max_queue_size and len(self._queue) >= self.max_queue_size:
                raise QueueFull(f"the queue of {self.name!r} holds {len(self._queue)} requests, its limit")
            self._queue.append(request)
            self._counts["requests"] += 1
            self._wake.submitted += 1
            self._cond.notify()
        return request.future

    def run(self, feeds: Mapping[str, np.ndarray], timeout: float | None = None) -> dict[str, np.ndarray]:
        """submit() and wait: this request's outputs."""
        return self.submit(feeds, timeout).result()

    async def run_async(self, feeds: Mapping[str, np.ndarray], timeout: float | None = None) -> dict[str, np.ndarray]:
        """submit() and await. Cancelling the awaiting task drops the request
        if it has not started."""
        return await asyncio.wrap_future(self.submit(feeds, timeout))

    def _prepare(self, feeds) -> tuple[dict, int, tuple]:
        if not isinstance(feeds, Mapping):
            raise InvalidArgumentError(f"feeds must be a dict of input name -> array, not {type(feeds).__name__}")
        names = [s.name for s in self._inputs]
        unknown = [k for k in feeds if k not in names]
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            raise InvalidArgumentError(f"{self.name}: unknown input(s) {unknown}, missing input(s) {missing}; "
                                       f"the model's inputs are {names}")
        arrays = {}
        for spec in self._inputs:
            a = np.asarray(feeds[spec.name])
            if a.dtype != self._dtypes[spec.name]:
                raise DTypeError(f"{self.name}: input {spec.name!r} is {a.dtype}, the model takes {spec.dtype}")
            if spec.name in self._rank_unknown:
                pass  # declared without a shape: any rank
            elif a.ndim != len(spec.shape) or any(isinstance(want, int) and want >= 0 and got != want
                                                  for got, want in zip(a.shape, spec.shape)):
                raise ShapeError(f"{self.name}: input {spec.name!r} has shape {list(a.shape)}, the model takes "
                                 f"{list(spec.shape)}")
            arrays[spec.name] = a
        if self.max_batch_size == 0:
            return arrays, 1, tuple((n, a.shape) for n, a in arrays.items())
        sizes = {a.shape[0] for a in arrays.values()}
        if len(sizes) != 1:
            raise ShapeError(f"{self.name}: the inputs disagree on the batch dim (first dim): "
                             f"{ {n: a.shape[0] for n, a in arrays.items()} }")
        size = sizes.pop()
        if not 1 <= size <= self.max_batch_size:
            raise ShapeError(f"{self.name}: batch dim {size} is outside 1..max_batch_size ({self.max_batch_size})")
        return arrays, size, tuple((n, a.shape[1:]) for n, a in arrays.items())

    # -- scheduling (workers) --------------------------------------------------
    def _run_batch(self, index: int, batch: list[_Request]) -> None:
        engine, context = self._instances[index]
        try:
            self._execute(index, engine, context, batch)
        except BaseException as e:  # noqa: BLE001 - a worker must outlive any one batch
            log.exception("%s: batch failed unexpectedly", self.name)
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(e)

    def _next_batch(self) -> list[_Request] | None | tuple:
        """The next batch; None once closed and drained; (_IDLE, requests
        submitted so far) when the queue is empty, for the worker to wait
        without holding the Batcher."""
        with self._cond:
            while True:
                now = time.monotonic()
                self._drop_expired(now)
                wake_at = None
                if self._queue:
                    batch, wake_at = self._pick(now)
                    if batch is not None:
                        taken = {id(r) for r in batch}
                        self._queue = [r for r in self._queue if id(r) not in taken]
                        # A caller who cancelled (asyncio task gone) is skipped here.
                        batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
                        if self._queue:
                            self._cond.notify()  # another idle worker can form the next batch
                        if batch:
                            return batch
                        continue
                elif self._closing:
                    return None
                else:
                    return _IDLE, self._wake.submitted
                deadlines = [r.deadline for r in self._queue if r.deadline is not None]
                if wake_at is not None:
                    deadlines.append(wake_at)
                # Capped: a delay of years (Triton's max_queue_delay_microseconds
                # is a uint64) would overflow the platform's wait.
                self._cond.wait(min(max(0.0, min(deadlines) - now), threading.TIMEOUT_MAX) if deadlines else None)

    def _pick(self, now: float) -> tuple[list[_Request] | None, float | None]:
        """The batch to run now, or (None, when to look again)."""
        head = self._queue[0]
        if not self.dynamic_batching:
            return [head], None
        chosen, total, full = [], 0, False
        for r in self._queue:
            if r.signature != head.signature:
                continue
            if total + r.size > self.max_batch_size:
                full = True
                break
            chosen.append(r)
            total += r.size
        full = full or total == self.max_batch_size
        due = head.enqueued_ns / 1e9 + self.max_queue_delay
        waited = now >= due
        largest_preferred = self.preferred_batch_sizes[-1] if self.preferred_batch_sizes else None
        send = full or waited or self._closing or (largest_preferred is not None and total >= largest_preferred)
        if not send:
            return None, due
        if self.preferred_batch_sizes:
            running, best = 0, 0
            for i, r in enumerate(chosen):
                running += r.size
                if running in self.preferred_batch_sizes:
                    best = i + 1
            if best:
                return chosen[:best], None
        return chosen, None

    def _fail_queued(self, error: BaseException) -> None:
        """Answers every queued request with ``error`` (scheduling failed: no
        caller is left waiting on a worker that cannot form a batch)."""
        log.exception("%s: scheduling failed; failing the queued requests", self.name)
        with self._cond:
            queued, self._queue = self._queue, []
            self._counts["failures"] += len(queued)
        for r in queued:
            if r.future.set_running_or_notify_cancel():
                r.future.set_exception(error)

    def _drop_expired(self, now: float) -> None:
        keep = []
        for r in self._queue:
            if r.future.cancelled():
                continue
            if r.deadline is not None and now >= r.deadline:
                # Marked running first: a cancel() from another thread (an
                # asyncio caller gone) between a check and set_exception would
                # make set_exception raise and end this worker.
                if not r.future.set_running_or_notify_cancel():
                    continue
                waited_ms = (time.monotonic_ns() - r.enqueued_ns) / 1e6
                r.future.set_exception(TimeoutError(
                    f"{self.name}: the request waited {waited_ms:.1f} ms in the queue, longer than its timeout"))
                self._counts["timeouts"] += 1
                continue
            keep.append(r)
        self._queue = keep

    def _execute(self, index: int, engine: Engine, context, batch: list[_Request]) -> None:
        start = time.monotonic_ns()
        queue_ns = tuple(start - r.enqueued_ns for r in batch)
        sizes = tuple(r.size for r in batch)
        total = sum(sizes)
        error = None
        t_in = t_run = start
        try:
            if len(batch) == 1:
                feeds = batch[0].feeds
            else:
                feeds = {name: np.concatenate([r.feeds[name] for r in batch]) for name in batch[0].feeds}
            t_in = time.monotonic_ns()
            outputs = {name: t.numpy() for name, t in engine.run(feeds, context=context).items()}
            t_run = time.monotonic_ns()
            results = self._split(outputs, batch, total)
        except Exception as e:  # noqa: BLE001 - handed to the callers
            if len(batch) > 1 and not isinstance(e, _NotBatched):
                # One request's data can fail a merged run (an index out of
                # range...): run each alone so only that caller sees the error.
                for r in batch:
                    self._execute(index, engine, context, [r])
                return
            error = e
        end = time.monotonic_ns()
        # Counted before the callers get their answers: a caller that has its
        # answer and asks for statistics always finds its batch in them.
        with self._cond:
            self._counts["batches"] += 1
            self._counts["inferences"] += total
            self._counts["failures" if error else "successes"] += len(batch)
            self._batch_sizes[total] += 1
        if self._listener is not None:
            record = BatchRecord(index, total, sizes, queue_ns, t_in - start, max(0, t_run - t_in),
                                 max(0, end - t_run), error)
            try:
                self._listener(record)
            except Exception:  # noqa: BLE001 - statistics must not fail requests
                log.exception("%s: batch listener failed", self.name)
        if error is not None:
            for r in batch:
                r.future.set_exception(error)
        else:
            for r, result in zip(batch, results):
                r.future.set_result(result)

    def _split(self, outputs: dict, batch: list[_Request], total: int) -> list[dict]:
        if len(batch) == 1:
            return [outputs]
        for name, a in outputs.items():
            if a.ndim == 0 or a.shape[0] != total:
                raise _NotBatched(f"{self.name}: output {name!r} has shape {list(a.shape)} for a batch of {total}: "
                                  "its first dim is not the batch, so the batch cannot be split (max_batch_size=0 "
                                  "serves such a model)")
        results, offset = [], 0
        for r in batch:
            results.append({name: a[offset:offset + r.size] for name, a in outputs.items()})
            offset += r.size
        return results

    # -- state -------------------------------------------------------------------
    @property
    def instances(self) -> int:
        return len(self._instances)

    @property
    def instance_engines(self) -> list[Engine]:
        """The engine each instance runs (one entry per worker)."""
        return [e for e, _ in self._instances]

    def stats(self) -> dict:
        """Counts so far: requests, batches, inferences (samples), successes,
        failures, timeouts, batch_sizes ({size: batches}), queued (now)."""
        with self._cond:
            out = {k: self._counts[k] for k in ("requests", "batches", "inferences", "successes", "failures",
                                                "timeouts")}
            out["batch_sizes"] = dict(sorted(self._batch_sizes.items()))
            out["queued"] = len(self._queue)
        return out

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Take no new requests; with ``drain``, run those queued first (else
        they fail with BatcherClosed); then stop the workers and, once they
        have stopped, release the engines and contexts."""
        with self._cond:
            self._closing = True
            self._wake.closing = True
            if not drain:
                for r in self._queue:
                    if r.future.set_running_or_notify_cancel():
                        r.future.set_exception(BatcherClosed(f"the batcher of {self.name!r} was closed"))
                self._queue = []
            self._cond.notify_all()
        # From a worker itself (a listener that closes after a failed batch)
        # nothing is joined: two workers closing at once each waited for the
        # other, and neither batch was answered. The workers leave by themselves.
        if any(w is threading.current_thread() for w in self._workers):
            return
        for w in self._workers:
            w.join(timeout)
        if not any(w.is_alive() for w in self._workers):
            # Drained and stopped: let the engines and contexts go now (on a
            # GPU their device memory), not when the last holder of a closed
            # Batcher (a served version, a request that met the close) drops it.
            self._instances = []
            self._listener = None

    def __enter__(self) -> "Batcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"twinfer.Batcher({self.name!r}, instances={self.instances}, max_batch_size={self.max_batch_size}, "
                f"max_queue_delay={self.max_queue_delay}, preferred_batch_sizes={list(self.preferred_batch_sizes)})")


_IDLE = object()  # _next_batch: the queue is empty


class _Wake:
    """What an idle worker waits for, under the Batcher's condition: a new
    request (the count moved) or the end (closed, or the Batcher collected)."""

    def __init__(self):
        self.submitted = 0
        self.closing = False

    def close(self, cond: threading.Condition) -> None:
        with cond:
            self.closing = True
            cond.notify_all()


def _work(ref: "weakref.ref[Batcher]", cond: threading.Condition, wake: _Wake, index: int) -> None:
    """A worker: batches of its Batcher, until that is closed or collected."""
    while True:
        batcher = ref()
        if batcher is None:
            return
        try:
            batch = batcher._next_batch()
        except Exception as e:  # noqa: BLE001 - a bug in scheduling must not strand the queue
            batcher._fail_queued(e)
            del batcher
            continue
        if batch is None:
            return
        if isinstance(batch, tuple):  # idle: wait holding no Batcher, so it can be collected
            del batcher
            with cond:
                cond.wait_for(lambda: wake.closing or wake.submitted != batch[1])
            if wake.closing and ref() is None:
                return
            continue
        batcher._run_batch(index, batch)
        del batcher, batch


def default_cpu_threads(cpu_instances: int) -> int:
    """Threads per CPU instance so that instances together use the cores once
    (several instances each taking every core would only fight over them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, cpu_instances))
