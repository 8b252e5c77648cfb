"""Members of a Parallel or a Pipeline: the engine (or host function), its
options (threads, priority, sm_share, name), its own execution context and
the one worker thread that drives that context.

Options for member i can be given two ways, and not both for one member:
per member, as ``(engine, {"priority": "high", "threads": 1})``, or per
group, as list keywords ``priorities=[...]``, ``threads=[...]`` (or one int
for all), ``names=[...]``, ``sm_shares=[...]``.

>>> ms = parse_members([(eng, {"priority": "high"}), eng], cores=2)
>>> [m.priority for m in ms], [m.threads for m in ms], ms[0].engine is ms[1].engine
(['high', 'normal'], [1, 1], True)
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import Error, InvalidArgumentError

PRIORITIES = ("high", "normal", "low")
OPTION_NAMES = ("name", "threads", "priority", "sm_share")


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Span:
    """One run of one member: start/end in seconds from the profile's origin.

    ``clock`` says where the times come from: "host" (time.perf_counter around
    the call: the CPU backend, host functions) or a device's timing events on
    the member's stream: "cuda-event", "sim-event" (the simulated device)."""

    member: str
    item: int
    start: float
    end: float
    phase: str = "together"  # "alone" (members back to back) or "together"
    clock: str = "host"

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class KernelSpan:
    """One kernel on a member's stream (``profile(kernels=True)``): start/end
    in seconds from the profile's origin, on the device's clock (CUPTI's
    timestamps on CUDA, aligned with the event clock when the profile
    starts; the simulated device's kernel tasks). ``member`` is None for a
    kernel on a stream no member owns (a library's own stream)."""

    member: str | None
    kernel: str
    start: float
    end: float
    phase: str  # "alone" or "together": the phase whose runs it falls in

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Member:
    """One engine (or host function) with its own context and worker thread."""

    name: str
    engine: Any = None  # a twinfer.Engine, or None for a host function
    fn: Callable | None = None
    threads: int = 0  # CPU threads of its context (0 for a host function)
    priority: str = "normal"
    sm_share: float | None = None
    context: Any = None  # the member's own ExecutionContext
    role: str = "member"  # "Parallel member" or "Pipeline stage": what its errors say it is
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "engine" if self.engine is not None else "function"

    @property
    def device(self) -> str:
        return self.engine.device if self.engine is not None else "host"

    @property
    def on_device(self) -> bool:
        """An engine on a GPU (or the simulated device): it has its own stream."""
        return self.engine is not None and self.engine.device != "cpu"

    @property
    def stream(self):
        """The member's own stream (None on the CPU and for functions)."""
        return self.context.stream if self.on_device and self.context is not None else None

    @property
    def arena_bytes(self) -> int | None:
        """Host bytes the member's context holds for intermediates (None: a host function)."""
        return self.context.arena_bytes if self.context is not None else None

    @property
    def device_bytes(self) -> int | None:
        """Device bytes its context holds for intermediates (None off the GPU)."""
        return self.context.device_arena_bytes if self.on_device and self.context is not None else None

    @property
    def sm_count(self) -> int | None:
        """SMs its stream may use (its green context's), None for the whole device or off the GPU."""
        if not self.on_device or self.context is None:
            return None
        return self.context.sm_count or None

    @property
    def priority_effect(self) -> str:
        """What the priority does on this member's device, in words."""
        if self.kind == "function":
            return "host thread (Python)"
        if self.device == "cpu":
            return "recorded; no effect on the CPU backend"
        if self.device.startswith("sim"):
            return "stream priority (the simulated device does not schedule by it)"
        return "stream priority"

    @property
    def sm_share_effect(self) -> str:
        if self.sm_share is None:
            return ""
        from .. import _core

        total = _core.device_sm_count(self.device)
        where = " (simulated)" if self.device.startswith("sim") else ""
        return f"green context: {self.sm_count} of {total} SMs{where}"

    def submit(self, fn: Callable, *args) -> Future:
        """Run fn(*args) on this member's own worker thread (FIFO, one at a time,
        so its context is never used by two runs at once). An exception it
        raises carries a note naming this member."""
        self.check_open()
        try:
            return self._pool.submit(self._named, fn, *args)
        except RuntimeError as e:  # "cannot schedule new futures after shutdown"
            raise self._closed_error() from e

    def _named(self, fn: Callable, *args):
        try:
            return fn(*args)
        except BaseException as e:
            note = f"raised in {self.role} '{self.name}'"
            notes = getattr(e, "__notes__", None)
            if notes is None:  # add_note is Python 3.11's; __notes__ is what it fills (3.10 too)
                try:
                    e.__notes__ = notes = []
                except (AttributeError, TypeError):  # an exception type that takes no attributes
                    notes = None
            if notes is not None and note not in notes:
                notes.append(note)
            raise

    def _closed_error(self) -> InvalidArgumentError:
        return InvalidArgumentError(f"member {self.name!r} is closed (its group was closed); make a new "
                                    "Parallel or Pipeline")

    def check_open(self) -> None:
        if self._pool is not None and self.context is None and self.engine is not None:
            raise self._closed_error()

    def run_engine(self, feeds: dict, outputs: str = "auto") -> dict:
        """engine.run in this member's context, on its own stream."""
        if self.on_device:
            return self.engine.run(feeds, context=self.context, stream=self.context.stream, outputs=outputs)
        return self.engine.run(feeds, context=self.context)

    def synchronize(self) -> None:
        """Wait until everything enqueued on the member's stream is done (its
        runs and the events timing them; nothing to do on the CPU)."""
        if self.on_device and self.context is not None:
            self.context.stream.synchronize()

    def close(self) -> None:
        """Stop the worker (after what is queued) and let the context go: on a
        GPU its stream, buffers and SM partition are given back."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.context = None


def _is_engine(x) -> bool:
    return hasattr(x, "create_context") and hasattr(x, "run") and hasattr(x, "inputs")


def _listed(value, n: int, what: str) -> list:
    if value is None:
        return [None] * n
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise InvalidArgumentError(f"{what}: {len(value)} values for {n} members")
        return list(value)
    return [value] * n


def _stream_priority(engine, priority: str) -> int | None:
    """A member's priority as its context's stream priority (None on the CPU):
    high the most urgent of the device's range, low the least, normal the
    middle, so the three differ (CUDA's default priority is the least urgent:
    "normal" at the default would be "low")."""
    if engine.device == "cpu":
        return None
    from .. import _core

    least, greatest = _core.stream_priority_range(engine.device)
    return {"high": greatest, "normal": least - (least - greatest) // 2, "low": least}[priority]


def _check_priority(p, name: str) -> str:
    p = "normal" if p is None else p
    if p not in PRIORITIES:
        raise InvalidArgumentError(f"member '{name}': priority {p!r} is not one of {PRIORITIES}")
    return p


def _check_share(s, name: str) -> float | None:
    if s is None:
        return None
    try:
        s = float(s)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"member '{name}': sm_share must be a number in (0, 1], got {s!r}") from None
    if not 0.0 < s <= 1.0:
        raise InvalidArgumentError(f"member '{name}': sm_share must be in (0, 1], got {s}")
    return s


def split_cores(wanted: list[int | None], caps: list[int], cores: int) -> list[int]:
    """Threads per engine: explicit values kept; the rest share what is left of
    ``cores`` evenly (remainder to the first ones), at least 1 each, at most
    the engine's own thread setting (``caps``).

    >>> split_cores([None, None], [8, 8], 2)
    [1, 1]
    >>> split_cores([None, None, 1], [8, 8, 8], 4)
    [2, 1, 1]
    """
    for i, w in enumerate(wanted):
        if w is not None and (isinstance(w, bool) or not isinstance(w, int)):
            raise InvalidArgumentError(f"member {i}: threads must be a whole number, got {w!r}")
    if cores < 1:
        raise InvalidArgumentError(f"cores must be at least 1, got {cores}")
    auto = [i for i, w in enumerate(wanted) if w is None]
    left = max(0, cores - sum(w for w in wanted if w is not None))
    out = [0 if w is None else int(w) for w in wanted]
    for k, i in enumerate(auto):
        share = left // len(auto) + (1 if k < left % len(auto) else 0)
        out[i] = max(1, min(share, caps[i]))
    for i, t in enumerate(out):
        if t < 1:
            raise InvalidArgumentError(f"member {i}: threads must be >= 1, got {t}")
    return out


def parse_members(members, *, names=None, threads=None, priorities=None, sm_shares=None,
                  cores: int | None = None, allow_functions: bool = False,
                  default_name: str = "engine") -> list[Member]:
    """Members from ``[engine | fn | (engine_or_fn, {options})]`` plus the list
    keywords; creates each engine member's context and worker thread."""
    members = list(members)
    if not members:
        raise InvalidArgumentError("at least one member is needed")
    n = len(members)
    group = {"name": _listed(names, n, "names"), "threads": _listed(threads, n, "threads"),
             "priority": _listed(priorities, n, "priorities"), "sm_share": _listed(sm_shares, n, "sm_shares")}
    specs = []
    for i, m in enumerate(members):
        opts: dict = {}
        if isinstance(m, tuple):
            if len(m) != 2 or not isinstance(m[1], dict):
                raise InvalidArgumentError(f"member {i}: expected (engine, {{options}}), got a tuple of {len(m)}")
            m, opts = m
            bad = sorted(set(opts) - set(OPTION_NAMES))
            if bad:
                raise InvalidArgumentError(f"member {i}: unknown option(s) {bad}; known: {list(OPTION_NAMES)}")
        merged = {}
        for key in OPTION_NAMES:
            if key in opts and group[key][i] is not None:
                raise InvalidArgumentError(f"member {i}: '{key}' given both in its options and as a list keyword")
            merged[key] = opts.get(key, group[key][i])
        # Checked before any member's context exists: a bad option of a later
        # member left an earlier one's context (and SM share) held.
        _check_priority(merged["priority"], str(merged["name"] or f"{default_name}{i}"))
        _check_share(merged["sm_share"], str(merged["name"] or f"{default_name}{i}"))
        if _is_engine(m):
            specs.append((m, None, merged))
        elif callable(m) and allow_functions:
            for key in ("threads", "sm_share"):
                if merged[key] is not None:
                    raise InvalidArgumentError(f"member {i}: a host function takes no '{key}'")
            specs.append((None, m, merged))
        else:
            what = "an Engine or a function" if allow_functions else "an Engine"
            raise InvalidArgumentError(f"member {i}: expected {what}, got {type(m).__name__}")

    engine_ids = [i for i, (e, _, _) in enumerate(specs) if e is not None]
    cores = available_cores() if cores is None else int(cores)
    budget = split_cores([specs[i][2]["threads"] for i in engine_ids],
                         [max(1, specs[i][0].num_threads) for i in engine_ids], cores)
    thread_of = dict(zip(engine_ids, budget))

    out, seen = [], set()
    for i, (engine, fn, o) in enumerate(specs):
        name = o["name"]
        if name is None and fn is not None:
            name = getattr(fn, "__name__", "<lambda>")
            if name == "<lambda>" or name in seen or not name.isidentifier():
                name = f"fn{i}"
        elif name is None:
            name = f"{default_name}{i}"
        name = str(name)
        if name in seen:
            raise InvalidArgumentError(f"member name '{name}' used twice")
        seen.add(name)
        member = Member(name=name, engine=engine, fn=fn, threads=thread_of.get(i, 0),
                        priority=_check_priority(o["priority"], name), sm_share=_check_share(o["sm_share"], name),
                        role="Pipeline stage" if allow_functions else "Parallel member")
        if engine is not None:
            # The one place a member's device state is made: on a GPU the context
            # owns a stream with the member's priority, on a green context of
            # its sm_share of the SMs.
            if member.sm_share is not None and engine.device == "cpu":
                raise InvalidArgumentError(f"member '{name}': sm_share partitions a GPU's SMs (green contexts); "
                                           "this engine runs on the CPU, which has none")
            try:
                member.context = engine.create_context(member.threads, _stream_priority(engine, member.priority),
                                                       sm_share=member.sm_share)
            except Error as e:  # e.g. the SMs are all taken: name the member
                for done in out:
                    done.close()
                raise type(e)(f"member '{name}': {e}") from e
        member._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"twinfer-{name}")
        out.append(member)
    return out


def weight_sharing(members: list[Member]) -> dict[str, list[str]]:
    """{member: other members running the very same Engine object (same weights)}."""
    return {m.name: [o.name for o in members if o is not m and o.engine is not None and o.engine is m.engine]
            for m in members}
