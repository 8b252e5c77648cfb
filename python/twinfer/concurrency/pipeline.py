"""Engines in a chain: the outputs of one stage feed the next, and several
items are in flight at once, so stage A of item k+1 runs while stage B works
on item k.

Stages are engines or plain Python functions (pre/post-processing between
engines, e.g. cropping detections). Each stage has its own worker thread, and
each engine stage its own execution context (on the CPU: its own share of the
cores); a function stage runs on its own host thread and holds up no engine
while it works. Outputs are handed to the next stage as the twinfer Tensors
the engine returned — no copy. On a GPU each engine stage runs on its own
stream; a stage followed by an engine on the same device hands over device
tensors, which the next stage's stream waits for by their event: no copy,
no host wait, so stage A enqueues item k+1 while B still works on item k.
The last stage returns host tensors for an item of host arrays, device
tensors for an item on the device; a function stage after an engine gets
that engine's outputs as host tensors (twinfer.Tensor, not NumPy arrays:
``t.numpy()`` is a view of one, no copy).

>>> pipe = twinfer.Pipeline([detector, crop, classifier], links={"pixels": "crops"})
>>> for out in pipe.map({"image": im} for im in images):   # input order kept
...     print(out["logits"].numpy().argmax())

**Function stages** are called ``fn(previous)`` with the previous stage's
outputs (a dict of Tensors, or whatever the previous function returned; the
item itself for a first stage), or ``fn(previous, item)`` when their second
parameter has no default or is named ``item``, ``item`` being what was
submitted (``fn(x, scale=2)`` keeps its default). They return a dict of arrays
or Tensors named for the next engine's inputs (any other value counts as one
output named "output").

**Links** say where an engine stage's inputs come from; by default an input
takes the previous stage's output of the same name, else the previous
stage's only output when one input is left, else the item's own entry of that
name. Explicit links, one of three forms:

* ``links={"b_input": "a_output"}`` — a flat map, for any stage after the
  first that has an input of that name; a plain string names an output of the
  *previous* stage;
* ``links={"classifier": {"pixels": "crops"}}`` — per stage, by stage name
  (or index);
* ``links=[None, {...}, {...}]`` — per stage, one entry per stage.

A source may also be ``(stage, output)``: an output of any earlier stage (by
name or index), or ``("input", name)``: an entry of the submitted item.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, wait

from .._convert import Tensor, as_tensor, is_device_array, is_foreign_device_array
from .._streams import stream_handle
from ..errors import InvalidArgumentError
from ._links import feeds_for, parse_links
from ._members import Member, parse_members, weight_sharing

def _takes_item(fn) -> bool:
    """True when fn's second positional parameter is the item: one without a
    default, or one named ``item``. ``fn(x, scale=2)`` keeps its default."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and (positional[1].default is inspect.Parameter.empty or positional[1].name == "item")


class _Item:
    """One item on its way through the stages: each stage's future, when done,
    sends it to the next. An object rather than two closures calling each
    other: those were a reference cycle that kept every finished item's
    inputs and stage outputs until the cycle collector ran (GBs for large
    items)."""

    __slots__ = ("pipe", "item", "clock", "index", "final", "results")

    def __init__(self, pipe: "Pipeline", item, clock, index: int, final: Future):
        self.pipe, self.item, self.clock, self.index, self.final = pipe, item, clock, index, final
        self.results: list | None = []

    def advance(self, i: int) -> None:
        # The stage reads the item through self, not as arguments of its work
        # item, which its worker thread holds a moment after the result is set.
        fut = self.pipe.members[i].submit(self.run_stage, i)
        fut.add_done_callback(functools.partial(self.done, i))

    def run_stage(self, i: int):
        return self.pipe._run_stage(i, self.results, self.item, self.clock, self.index, "together")

    def done(self, i: int, f: Future) -> None:
        exc = f.exception()
        if exc is None and i + 1 < len(self.pipe.members):
            self.results.append(f.result())
            try:
                self.advance(i + 1)  # queued behind earlier items: each stage's worker is FIFO
                return
            except BaseException as e:  # e.g. the pipeline was closed meanwhile
                exc = e
        # Finished: the item and the stages' outputs are let go before the
        # caller hears, so dropping its result frees them; and the final
        # future too (an error's traceback holds run_stage's frame, which
        # holds this object: a cycle through the future's exception).
        final, self.final = self.final, None
        self.item = self.results = None
        if exc is not None:
            final.set_exception(exc)
        else:
            final.set_result(f.result())


class Pipeline:
    """Stages run one after another per item, overlapping across items.

    stages: engines, functions, or ``(stage, {"name", "threads", "priority",
    "sm_share"})`` (see twinfer.Parallel for the options).
    links: where engine inputs come from (see the module's docstring).
    depth: items in flight in ``map`` (default: twice the number of stages).
    names, threads, priorities, sm_shares, cores: as for twinfer.Parallel.

    >>> pipe = twinfer.Pipeline([a, b], links={"b_input": "a_output"})
    >>> pipe.run({"a_input": x})["b_output"]
    >>> results = list(pipe.map(items))             # same order as items
    >>> fut = pipe.submit(item)                     # concurrent.futures.Future
    >>> out = await pipe.run_async(item)            # asyncio
    """

    def __init__(self, stages: Sequence, links=None, *, depth: int | None = None, names=None, threads=None,
                 priorities=None, sm_shares=None, cores: int | None = None):
        self.members: list[Member] = parse_members(stages, names=names, threads=threads, priorities=priorities,
                                                   sm_shares=sm_shares, cores=cores, allow_functions=True,
                                                   default_name="stage")
        self.depth = int(depth) if depth is not None else 2 * len(self.members)
        if self.depth < 1:
            raise InvalidArgumentError("depth must be >= 1")
        self._takes_item = [m.fn is not None and _takes_item(m.fn) for m in self.members]
        self._links = parse_links(self.members, links)
        self._graphed = weakref.WeakSet()  # its graphed() forms, released by close()

    # -- running -----------------------------------------------------------
    def _outputs_for(self, i: int, item) -> str:
        """Where engine stage i's outputs go: on the device when the next stage
        is an engine on the same device; to the host for a function or another
        device; for the last stage, where the item came from."""
        m = self.members[i]
        if i + 1 < len(self.members):
            nxt = self.members[i + 1]
            return "device" if nxt.on_device and nxt.device == m.device else "host"
        on_device = isinstance(item, Mapping) and any(is_device_array(v) for v in item.values())
        return "device" if on_device else "host"

    def _run_stage(self, i: int, results: list, item, clock, index: int, phase: str):
        m = self.members[i]
        if m.engine is None:
            arg = item if i == 0 else results[i - 1]
            call = (lambda: m.fn(arg, item)) if self._takes_item[i] else (lambda: m.fn(arg))
            return call() if clock is None else clock.time(m, index, phase, call)
        feeds = feeds_for(self.members, self._links, i, results, item)
        if not m.on_device:
            # A link from an earlier stage than the previous one may hand a CPU
            # stage a device output (kept on the device for the stage between).
            feeds = {k: v.numpy() if isinstance(v, Tensor) and v.device != "cpu" else v for k, v in feeds.items()}
        outputs = self._outputs_for(i, item)
        if clock is None:
            return m.run_engine(feeds, outputs)
        return clock.time(m, index, phase, lambda: m.run_engine(feeds, outputs), feeds.values())

    def _submit(self, item, clock=None, index: int = 0) -> Future:
        item = self._export_device_arrays(item)
        final: Future = Future()
        final.set_running_or_notify_cancel()
        _Item(self, item, clock, index, final).advance(0)
        return final

    def _export_device_arrays(self, item):
        """A framework's device arrays in the item, taken here, on the caller's
        thread, for the first stage's stream: DLPack orders that stream after
        the producer's pending writes on *this* thread's current stream (a
        stage's worker thread has another), and every later stage is ordered
        after the first one."""
        first = self.members[0]
        if not isinstance(item, Mapping) or first.engine is None or first.stream is None:
            return item
        stream = stream_handle(first.stream)
        out = {}
        for k, v in item.items():
            if is_foreign_device_array(v):  # (a twinfer tensor carries its own ready event)
                v = as_tensor(v, None, stream)
                v._mark_ready_on(first.stream)  # a later stage reading it waits for that point too
            out[k] = v
        return out

    def submit(self, item) -> Future:
        """Send one item through all stages; a Future of the last stage's result."""
        return self._submit(item)

    def run(self, item):
        """One item through all stages; the last stage's result."""
        return self._submit(item).result()

    async def run_async(self, item):
        """``run`` for asyncio."""
        return await asyncio.wrap_future(self._submit(item))

    def map(self, items: Iterable, depth: int | None = None):
        """Results for ``items``, in their order, with up to ``depth`` items in
        flight (default ``self.depth``). Items are read lazily from the iterable.
        If a stage fails, its error is raised at that item's turn."""
        return self._map(items, depth)

    def _map(self, items, depth=None, clock=None):
        depth = self.depth if depth is None else int(depth)
        if depth < 1:
            raise InvalidArgumentError("depth must be >= 1")
        pending: deque[Future] = deque()
        try:
            for k, item in enumerate(items):
                pending.append(self._submit(item, clock, k))
                if len(pending) >= depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            wait(pending)  # nothing keeps running after the caller stops reading

    # -- seeing it ---------------------------------------------------------
    def profile(self, items: Iterable, warmup: int = 1, depth: int | None = None, kernels: bool = False):
        """Measure the items alone (each through all stages, stage after stage,
        nothing overlapping) and pipelined (``map``); returns a twinfer Profile
        (serial vs pipelined time, overlap, per-stage latency percentiles alone
        and together, memory per context, spans for ``plot()``). On a GPU the
        engine stages are timed by events on their streams; ``kernels=True``
        traces every kernel too, as Parallel.profile does.

        >>> prof = pipe.profile([{"image": im} for im in images[:16]])
        """
        from ._clock import busy, extent, make_clock
        from .profile import Profile

        items = list(items)
        if not items:
            raise InvalidArgumentError("profile needs at least one item")
        for item in items[:warmup]:
            self.run(item)
        clock = make_clock(self.members, kernels)
        try:
            t0 = time.perf_counter()
            for k, item in enumerate(items):
                results: list = []
                for i, m in enumerate(self.members):
                    results.append(m.submit(self._run_stage, i, results, item, clock, k, "alone").result())
                    m.synchronize()
            serial = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in self._map(items, depth, clock):
                pass
            for m in self.members:
                m.synchronize()
            together = time.perf_counter() - t0
            spans = clock.spans()
            kernel_spans = clock.kernel_spans(spans)
        except BaseException:
            clock.abort()
            raise
        # The totals from the device's events when every stage is timed by
        # them; with a host stage (a function, a CPU engine), host clock times.
        totals_clock = clock.kind if clock.kind != "host" and all(m.on_device for m in self.members) else "host"
        if totals_clock != "host":
            serial, together = busy(spans, "alone"), extent(spans, "together")
        return Profile(kind="pipeline", members=self.members, spans=spans, serial_s=serial,
                       concurrent_s=together, count=len(items), sharing=weight_sharing(self.members),
                       clock=totals_clock, kernels=kernel_spans if kernels else None,
                       kernel_clock_error_s=clock.kernel_clock_error_s if kernels else None)

    def graphed(self):
        """The stages captured as one CUDA graph (a GraphedPipeline): each
        stage on its own stream inside one capture, the hand-overs as graph
        edges, one launch per item. Engine stages on one GPU only.

        >>> g = pipe.graphed()
        >>> out = g.run({"image": im})
        """
        from .graphed import GraphedPipeline

        g = GraphedPipeline(self)
        self._graphed.add(g)
        return g

    # -- lifetime ----------------------------------------------------------
    def close(self) -> None:
        """Stop the stages' worker threads (after what is queued has run) and
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
        ms = " -> ".join(f"{m.name}" + (f"(threads={m.threads}, priority={m.priority})" if m.engine is not None else "()")
                         for m in self.members)
        return f"twinfer.Pipeline({ms})"
