"""A Parallel or a Pipeline captured as one CUDA graph.

Each member's run is enqueued on its own stream inside one capture that
forks from the group's stream and joins back into it; a Pipeline's
hand-overs become the graph's edges. A call then copies the inputs into the
graph's input buffers, launches once, and copies the outputs out: one launch
for all members instead of one per kernel per member. The graph keeps each
member's stream priority only as far as CUDA keeps captured priorities.

A graph is captured per set of input shapes (up to 8 kept): the first call
at a shape runs the members eagerly, returns that result, and captures;
later calls at that shape replay. Members must be engines on one GPU (or
the simulated device) whose plans run entirely there: a host step, a shape
that depends on values or a function stage cannot be captured, and says so.

A Pipeline's ``graphed().map(items)`` goes further: each launch runs stage s
on item j - s, so the stages of consecutive items overlap inside one graph
(their hand-overs wait between launches in buffers of the graph's own).

>>> g = twinfer.Parallel([a, b]).graphed()
>>> out_a, out_b = g.run([{"x": xa}, {"x": xb}])
>>> g.stats()
{'captures': 1, 'replays': 0, 'graphs': 1, 'nodes': 0}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .. import _core
from .._convert import as_tensor, is_device_array, is_foreign_device_array
from .._streams import stream_handle
from ..errors import InvalidArgumentError
from ._links import ITEM, static_sources


def _check_members(members) -> None:
    for m in members:
        if m.engine is None:
            raise InvalidArgumentError(f"stage '{m.name}' is a host function, which a CUDA graph cannot hold; "
                                       "graphed() takes engine stages only")
    devices = {m.device for m in members}
    if len(devices) != 1 or "cpu" in devices:
        raise InvalidArgumentError(f"graphed() captures one GPU's work; the members run on {sorted(devices)}")


def _host(values) -> bool:
    return not any(is_device_array(v) for v in values)


class _Graphed:
    def __init__(self, members):
        _check_members(members)
        self._members = members
        self._graphs: dict = {}

    def _release(self) -> None:
        """Its group was closed: the graphs (which hold the members' contexts,
        their buffers and SM shares) go now, not when this object does."""
        self._graphs.clear()

    def _group(self, key, sources, num_inputs):
        for m in self._members:  # a closed group's graphed runs are refused, as its eager ones are
            m.check_open()
        g = self._graphs.get(key)
        if g is None:
            spec = [(m.engine._core, m.context, src) for m, src in zip(self._members, sources)]
            g = self._graphs[key] = _core.GroupGraph(spec, num_inputs)
        return g

    def stats(self) -> dict:
        """Captures, replays, graphs held and the nodes of the graph used last."""
        total = {"captures": 0, "replays": 0, "graphs": 0, "nodes": 0}
        for g in self._graphs.values():
            s = g.stats()
            for k in ("captures", "replays", "graphs"):
                total[k] += s[k]
            total["nodes"] = max(total["nodes"], s["nodes"])
        return total

    @staticmethod
    def _tensor(group, x, dtype, what: str):
        """An input for `group`: a framework's device array is exported for the
        group's stream (DLPack orders it after the producer's writes) and
        marked ready there, for the members' streams when they run eagerly."""
        if x is None:
            raise InvalidArgumentError(f"missing input {what}")
        if not is_foreign_device_array(x):  # host arrays; twinfer tensors carry their ready event
            return as_tensor(x, dtype)
        t = as_tensor(x, dtype, stream_handle(group.stream))
        t._mark_ready_on(group.stream)
        return t


class GraphedParallel(_Graphed):
    """``Parallel.graphed()``: every member in one graph launch.

    ``run(feeds)`` takes what ``Parallel.run`` takes (one dict per member, or
    one dict for all, which the graph then reads once) and returns one
    {output name: Tensor} per member: host tensors for host inputs, device
    tensors (with their ready event) otherwise."""

    def __init__(self, parallel):
        super().__init__(parallel.members)

    def run(self, feeds) -> list[dict]:
        ms = self._members
        shared = isinstance(feeds, Mapping)
        per = [feeds] * len(ms) if shared else list(feeds)
        if len(per) != len(ms):
            raise InvalidArgumentError(f"{len(per)} feed dicts for {len(ms)} members")
        keys: list = []  # the group's inputs: an input name (shared) or (member, name)
        owner: dict = {}  # key -> (member index, input spec) that reads it first
        sources = []
        for j, m in enumerate(ms):
            if not isinstance(per[j], Mapping):
                raise InvalidArgumentError(f"member '{m.name}': feeds must be a dict, got {type(per[j]).__name__}")
            names = [s.name for s in m.engine.inputs]
            unknown = [k for k in per[j] if k not in names]
            if unknown:  # as the eager run refuses them
                raise InvalidArgumentError(f"member '{m.name}': unknown input name(s) {unknown}; its inputs are "
                                           f"{names}")
            src = []
            for s in m.engine.inputs:
                key = s.name if shared else (j, s.name)
                if key not in owner:
                    owner[key] = (j, s)
                    keys.append(key)
                src.append((-1, keys.index(key)))
            sources.append(src)
        values = [per[j].get(s.name, ms[j].engine._defaults.get(s.name)) for j, s in owner.values()]
        group = self._group(("shared" if shared else "each", tuple(keys)), sources, len(keys))
        tensors = [self._tensor(group, v, s.dtype, f"{s.name!r} of member '{ms[j].name}'")
                   for v, (j, s) in zip(values, owner.values())]
        outs = group.run(tensors, _host(values))
        return [dict(zip((s.name for s in m.engine.outputs), o)) for m, o in zip(ms, outs)]


class GraphedPipeline(_Graphed):
    """``Pipeline.graphed()``: one item through every stage in one graph launch.

    ``run(item)`` takes what ``Pipeline.run`` takes and returns the last
    stage's {output name: Tensor} (host tensors for an item of host arrays).
    ``map(items)`` overlaps the stages of consecutive items inside each
    launch (runtime/pipelined_graph.h)."""

    def __init__(self, pipeline):
        super().__init__(pipeline.members)
        self._pipes: list = []  # map()'s pipelined graphs: one per map under way at once
        self._free: list = []
        per_stage, self._item_names = static_sources(pipeline.members, pipeline._links)
        index = {n: k for k, n in enumerate(self._item_names)}
        self._sources = [[(-1, index[name]) if src == ITEM else (src, [o.name for o in pipeline.members[src]
                                                                        .engine.outputs].index(name))
                          for src, name in stage] for stage in per_stage]

    def _release(self) -> None:
        super()._release()
        self._pipes = []
        self._free = []

    def _item_inputs(self, group, item):
        """The group's inputs for `item` (its names in the graph's order) and
        whether its results go to the host."""
        if not isinstance(item, Mapping):
            raise InvalidArgumentError("an item must be a dict of inputs")
        dtypes = {s.name: s.dtype for m in self._members for s in m.engine.inputs}
        defaults = {}
        for m in self._members:  # inputs with a default that the item leaves out
            for n, t in m.engine._defaults.items():
                if n in self._item_names and n not in item and n in defaults and not np.array_equal(
                        defaults[n].numpy(), t.numpy()):
                    # One item slot per name: two stages' own defaults cannot both fill it.
                    raise InvalidArgumentError(f"stages have different defaults for input {n!r}: give it in the "
                                               "item, or run the pipeline without graphed()")
                defaults.setdefault(n, t)
        values = [item[n] if n in item else defaults.get(n) for n in self._item_names]
        tensors = [self._tensor(group, v, dtypes[n], repr(n)) for n, v in zip(self._item_names, values)]
        return tensors, _host(values)

    def _result(self, outs) -> dict:
        return dict(zip((s.name for s in self._members[-1].engine.outputs), outs))

    def run(self, item) -> dict:
        group = self._group("item", self._sources, len(self._item_names))
        tensors, host = self._item_inputs(group, item)
        return self._result(group.run(tensors, host)[-1])

    def map(self, items: Iterable):
        """Results for ``items``, in their order, with the stages overlapped
        inside each launch: launch j runs stage s on item j - s, every stage
        on its own stream (``run`` per item runs them one after another).
        The first item at a new set of shapes runs eagerly; the rest at those
        shapes go through the graphs, one launch each, plus one per stage
        after the last to drain. A generator: items are read as results are.
        An item that fails raises at its turn, after the results of the items
        before it.

        >>> results = list(pipe.graphed().map(items))
        """
        for m in self._members:
            m.check_open()
        try:
            pipe = self._free.pop()
        except IndexError:  # none free (or another thread took the last one)
            spec = [(m.engine._core, m.context, src) for m, src in zip(self._members, self._sources)]
            pipe = _core.PipelinedGraph(spec, len(self._item_names))
            self._pipes.append(pipe)
        done = False
        try:
            for item in items:
                for m in self._members:  # a map suspended across close() stops here
                    m.check_open()
                try:
                    tensors, host = self._item_inputs(pipe, item)
                except BaseException:  # the items before it are good: their results first
                    yield from self._finished(pipe, pipe.drain)
                    raise
                yield from self._finished(pipe, lambda: pipe.push(tensors, host))
            yield from self._finished(pipe, pipe.drain)
            done = True
        finally:
            if not done:  # the caller stopped reading, or an item failed: nothing stays in flight
                pipe.reset()
            if pipe in self._pipes:  # (not after the group's close())
                self._free.append(pipe)

    def _finished(self, pipe, step):
        """The results `step` (a push or the drain) finished; where it raises,
        those finished before the error first, then the error."""
        try:
            done = step()
        except BaseException:
            for outs in pipe.take_finished():
                yield self._result(outs)
            raise
        for outs in done:
            yield self._result(outs)

    def stats(self) -> dict:
        """``run``'s graphs as ``_Graphed.stats``, and ``map``'s: launches, the
        items run eagerly (the first at each set of shapes) and graphs per
        range of stages."""
        total = super().stats()
        m = {"captures": 0, "launches": 0, "eager": 0, "graphs": 0}
        for p in self._pipes:
            s = p.stats()
            for k in m:
                m[k] += s[k]
        total["map"] = m
        return total
