"""Several engines side by side: each member runs in its own execution
context on its own worker thread, all at once.

On the CPU every member's context gets its own share of the cores (by
default the cores split evenly: 2 cores / 2 engines = 1 thread each); the
engines' kernels run with the GIL released, so the members really overlap.
On a GPU each member's context owns a stream (with its priority, on its
sm_share of the SMs when given): the members' work is ordered by events
only, never by a device-wide synchronisation, and ``graphed()`` captures
all of them as one CUDA graph.

>>> par = twinfer.Parallel([detector, classifier])             # 1 thread each on 2 cores
>>> det_out, cls_out = par.run([{"image": img}, {"x": x}])      # in member order
>>> futures = par.submit([{"image": img}, {"x": x}])            # concurrent.futures.Future
>>> det_out, cls_out = await par.run_async([{"image": img}, {"x": x}])   # from asyncio
>>> both = par.run({"x": x})          # one dict: the same feeds (no copy) to every member
>>> print(par.profile({"x": x}, iterations=20))                 # overlap, latencies, memory
>>> g = par.graphed(); outs = g.run([{"image": img}, {"x": x}])   # one graph launch for all members
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

from .._convert import as_tensor, is_foreign_device_array
from .._streams import stream_handle
from ..errors import InvalidArgumentError
from ._members import Member, Span, parse_members, weight_sharing


class Parallel:
    """Run several engines concurrently, each in its own execution context.

    members: engines, or ``(engine, {"name", "threads", "priority", "sm_share"})``.
    The same Engine may appear twice: the members share its weights (one
    object) and each gets its own context.
    names, threads, priorities, sm_shares: per-member lists (threads may be
    one int for all) — an alternative to the per-member dicts.
    cores: CPU cores to split between members without an explicit ``threads``
    (default: the cores this process may use); a member never gets more
    threads than its engine was loaded with.
    priority: "high" | "normal" | "low" — a CUDA stream priority (also for the
    member's graphs and library calls, which run on its stream); on the CPU it
    is recorded and reported, with no effect (CPU threads cannot be ranked
    portably). sm_share: the fraction of the GPU's SMs the member's kernels may
    use — a CUDA green context, whole groups of SMs (8 on an H100) disjoint
    from the other members'; refused (InvalidArgumentError) on the CPU, and
    DeviceError where the driver cannot partition or the shares of the
    contexts alive exceed the GPU.

    >>> par = twinfer.Parallel([(resnet, {"priority": "high"}), (bert, {"threads": 1})])
    >>> par.members[0].threads, par.members[0].priority, par.members[1].context.arena_bytes
    (1, 'high', 0)
    """

    def __init__(self, members: Sequence, *, names=None, threads=None, priorities=None,
                 sm_shares=None, cores: int | None = None):
        self.members: list[Member] = parse_members(members, names=names, threads=threads, priorities=priorities,
                                                   sm_shares=sm_shares, cores=cores, default_name="engine")
        self._graphed = weakref.WeakSet()  # its graphed() forms, released by close()

    # -- inputs ------------------------------------------------------------
    def prepare(self, feeds) -> list[dict]:
        """The feeds each member will read, as twinfer Tensors.

        ``feeds`` is a list with one dict per member, or one dict for all.
        Each distinct array is converted once and without a copy, so an array
        given to several members is read in place by all of them:

        >>> t = par.prepare({"x": x})
        >>> t[0]["x"] is t[1]["x"], t[0]["x"].data_ptr == x.ctypes.data
        (True, True)
        """
        if isinstance(feeds, Mapping):
            feeds = [feeds] * len(self.members)
        elif not isinstance(feeds, (list, tuple)):
            raise InvalidArgumentError(f"feeds must be a dict (for every member) or a list of one dict per member, "
                                       f"got {type(feeds).__name__}")
        feeds = list(feeds)
        if len(feeds) != len(self.members):
            raise InvalidArgumentError(f"{len(feeds)} feed dicts for {len(self.members)} members")
        # (id(array), stream) -> (array, tensor): the array is held, so ids stay unique
        converted: dict[tuple, tuple] = {}

        def tensor(x, dtype, stream):
            # A framework's device array is exported for the stream that will
            # read it (DLPack: its producer makes that stream wait for its
            # pending writes), so once per member stream; host arrays once.
            # Per dtype too: a Python list given to members taking different
            # types becomes one tensor per type (the first member's was sent to all).
            key = (id(x), stream if stream is not None and is_foreign_device_array(x) else None,
                   dtype if isinstance(x, (list, tuple, int, float, bool)) else None)
            hit = converted.get(key)
            if hit is None:
                hit = converted[key] = (x, as_tensor(x, dtype, key[1]))
            return hit[1]

        out = []
        for m, f in zip(self.members, feeds):
            if not isinstance(f, Mapping):
                raise InvalidArgumentError(f"member '{m.name}': feeds must be a dict, got {type(f).__name__}")
            dtypes = {s.name: s.dtype for s in m.engine.inputs}
            stream = stream_handle(m.stream)
            out.append({k: tensor(v, dtypes.get(k), stream) for k, v in f.items()})
        return out

    # -- running -----------------------------------------------------------
    def _submit(self, feeds, clock=None, item: int = 0, phase: str = "together") -> list[Future]:
        prepared = self.prepare(feeds)
        if clock is None:
            return [m.submit(m.run_engine, f) for m, f in zip(self.members, prepared)]
        return [m.submit(clock.time, m, item, phase, lambda m=m, f=f: m.run_engine(f))
                for m, f in zip(self.members, prepared)]

    def submit(self, feeds) -> list[Future]:
        """Start every member on its feeds; one concurrent.futures.Future per
        member, whose result is that member's {output name: Tensor}.

        Futures work with asyncio: ``await asyncio.wrap_future(f)``."""
        return self._submit(feeds)

    def run(self, feeds) -> list[dict]:
        """Run every member concurrently and return their outputs in member order.
        The first member error is raised after all members have finished."""
        futures = self.submit(feeds)
        for f in futures:  # wait for all, so no member is still running when we raise
            f.exception()
        return [f.result() for f in futures]

    async def run_async(self, feeds) -> list[dict]:
        """``run`` for asyncio: the event loop keeps going while the members run.

        >>> outs = await par.run_async([{"x": a}, {"x": b}])
        """
        futures = [asyncio.wrap_future(f) for f in self.submit(feeds)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return list(results)

    # -- seeing it ---------------------------------------------------------
    def profile(self, feeds, iterations: int = 20, warmup: int = 2, kernels: bool = False):
        """Measure the members alone (back to back, each in its own context with
        the same threads) and together; returns a twinfer Profile with serial
        and concurrent time, overlap = serial / concurrent, per-member latency
        percentiles alone and together, memory per context and the spans
        (``profile.plot()`` draws them). On a GPU the times come from timing
        events on each member's stream, not from the host clock; with
        ``kernels=True`` every kernel is traced too (CUPTI on CUDA; the
        simulated device's kernel tasks), ``prof.kernels`` and
        ``prof.plot(kernels=True)`` (DeviceError where the device cannot).

        >>> prof = par.profile({"x": x}, iterations=20)
        >>> prof.overlap, prof.latency_ms("engine0", "together", 50)
        """
        from ._clock import busy, extent, make_clock
        from .profile import Profile

        if iterations < 1:
            raise InvalidArgumentError("iterations must be >= 1")
        prepared = self.prepare(feeds)
        for _ in range(warmup):
            self.run(prepared)
        clock = make_clock(self.members, kernels)
        try:
            t0 = time.perf_counter()
            for it in range(iterations):  # alone: one member at a time, on its own worker, finished before the next
                for m, f in zip(self.members, prepared):
                    m.submit(clock.time, m, it, "alone", lambda m=m, f=f: m.run_engine(f)).result()
                    m.synchronize()
            serial = time.perf_counter() - t0
            t0 = time.perf_counter()
            for it in range(iterations):
                for fut in self._submit(prepared, clock, it):
                    fut.result()
            for m in self.members:
                m.synchronize()
            concurrent = time.perf_counter() - t0
            spans = clock.spans()
            kernel_spans = clock.kernel_spans(spans)
        except BaseException:
            clock.abort()
            raise
        if clock.kind != "host":  # the device's own clock, not the host's around the enqueues
            serial, concurrent = busy(spans, "alone"), extent(spans, "together")
        return Profile(kind="parallel", members=self.members, spans=spans, serial_s=serial,
                       concurrent_s=concurrent, count=iterations, sharing=weight_sharing(self.members),
                       clock=clock.kind, kernels=kernel_spans if kernels else None,
                       kernel_clock_error_s=clock.kernel_clock_error_s if kernels else None)

    def graphed(self):
        """The members captured as one CUDA graph (a GraphedParallel): each
        member's run on its own stream inside one capture, forked from and
        joined back into one stream, replayed with a single launch per call.
        Captured per input shape (the first call at a shape runs eagerly).

        >>> g = par.graphed()
        >>> out_a, out_b = g.run([{"x": a}, {"x": b}])
        """
        from .graphed import GraphedParallel

        g = GraphedParallel(self)
        self._graphed.add(g)
        return g

    # -- lifetime ----------------------------------------------------------
    def close(self) -> None:
        """Stop the members' worker threads (after what is queued has run) and
        drop the graphs of its graphed() forms."""
        for g in list(self._graphed):
            g._release()
        for m in self.members:
            m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        ms = ", ".join(f"{m.name}(threads={m.threads}, priority={m.priority})" for m in self.members)
        return f"twinfer.Parallel([{ms}])"
