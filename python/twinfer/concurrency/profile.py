"""What a Parallel or Pipeline did: per-member spans (start/end of each run),
serial vs concurrent time, overlap, latency percentiles, memory per context.

Spans carry their clock: "host" (time.perf_counter around each call: the CPU
backend, host functions) or the device's timing events on each member's
stream ("cuda-event", "sim-event"); on a device the serial and concurrent
times are the extents of those spans. Rendered as a text table
(``print(profile)``), an HTML table in Jupyter, a dict (``to_dict()``, for
JSON) and a Gantt chart (``profile.plot()``).

>>> prof = par.profile({"x": x}, iterations=20)
>>> round(prof.overlap, 2), prof.latency_ms("engine0", "alone", 90)
(1.93, 11.4)
>>> fig = prof.plot()          # matplotlib Figure, one row per member
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from .._timing import percentile_ms
from ..errors import InvalidArgumentError
from ._members import KernelSpan, Member, Span

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class MemberReport:
    """A member as it was when profiled."""

    name: str
    kind: str  # "engine" or "function"
    device: str
    threads: int
    priority: str
    priority_effect: str
    sm_share: float | None
    sm_share_effect: str
    arena_bytes: int | None  # host bytes held by the member's context (None: host function)
    shares_weights_with: tuple[str, ...]
    device_bytes: int | None = None  # device bytes held by its context (None off the GPU)
    sm_count: int | None = None  # SMs of its green context (None: the whole device)


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Profile:
    """Timings of one profiling run; see the module docstring."""

    def __init__(self, kind: str, members: list[Member], spans: list[Span], serial_s: float,
                 concurrent_s: float, count: int, sharing: dict[str, list[str]], clock: str = "host",
                 kernels: list[KernelSpan] | None = None, kernel_clock_error_s: float | None = None):
        self.kind = kind  # "parallel" or "pipeline"
        # Each kernel traced (profile(kernels=True)), None when not asked for.
        self.kernels = kernels
        # How far a kernel's times may be off the runs' timeline (the trace's
        # clock is aligned with the events' when the profile starts).
        self.kernel_clock_error_s = kernel_clock_error_s
        self.clock = clock  # where serial_s and concurrent_s come from
        self.spans = sorted(spans, key=lambda s: (s.phase, s.start))
        # All iterations/items, members one after another (on a device: the
        # runs' own durations added up, without the host's gaps between them).
        self.serial_s = serial_s
        self.concurrent_s = concurrent_s  # the same work, members at once / pipelined
        self.count = count  # iterations (parallel) or items (pipeline)
        self.members = [
            MemberReport(m.name, m.kind, m.device, m.threads, m.priority, m.priority_effect, m.sm_share,
                         m.sm_share_effect, m.arena_bytes, tuple(sharing.get(m.name, ())), m.device_bytes,
                         m.sm_count)
            for m in members
        ]

    # -- numbers -----------------------------------------------------------
    @property
    def overlap(self) -> float:
        """serial / concurrent: 1.0 = no gain, N = N members fully overlapped."""
        return self.serial_s / self.concurrent_s if self.concurrent_s > 0 else float("nan")

    @property
    def memory(self) -> dict[str, int | None]:
        """{member: bytes its context holds} (device and host arenas together)."""
        return {m.name: None if m.arena_bytes is None else m.arena_bytes + (m.device_bytes or 0)
                for m in self.members}

    def latencies(self, member: str, phase: str = "together") -> list[float]:
        """Seconds per run of ``member`` in ``phase`` ("alone" or "together")."""
        if member not in {m.name for m in self.members}:
            raise KeyError(f"no member {member!r}; members: {[m.name for m in self.members]}")
        if phase not in ("alone", "together"):
            raise InvalidArgumentError(f"phase must be 'alone' or 'together', got {phase!r}")
        return [s.duration for s in self.spans if s.member == member and s.phase == phase]

    def latency_ms(self, member: str, phase: str = "together", q: float = 50) -> float:
        """The q-th percentile of ``member``'s run times in ``phase``, in ms (NaN without runs)."""
        times = self.latencies(member, phase)
        return percentile_ms(times, q) if times else float("nan")

    def to_dict(self) -> dict:
        """Everything as plain values (for JSON)."""
        per = {}
        for m in self.members:
            per[m.name] = {
                **{k: getattr(m, k) for k in MemberReport.__dataclass_fields__},
                "shares_weights_with": list(m.shares_weights_with),
                **{f"{ph}_p{q}_ms": self.latency_ms(m.name, ph, q) for ph in ("alone", "together") for q in PERCENTILES},
            }
        return {"kind": self.kind, "count": self.count, "clock": self.clock, "serial_ms": self.serial_s * 1e3,
                "concurrent_ms": self.concurrent_s * 1e3, "overlap": self.overlap, "members": per}

    # -- rendering ---------------------------------------------------------
    def _labels(self) -> tuple[str, str, str]:
        if self.kind == "pipeline":
            return "items", "serial (one item at a time, stage after stage)", "pipelined"
        return "iterations", "serial (members back to back)", "concurrent"

    def _rows(self) -> list[list[str]]:
        def pcts(name, phase):
            return " / ".join(f"{self.latency_ms(name, phase, q):.2f}" for q in PERCENTILES)

        def memory(m):
            if m.device_bytes is None:
                return _bytes(m.arena_bytes)
            return f"{_bytes(m.device_bytes)} device + {_bytes(m.arena_bytes)} host"

        return [[m.name, m.device, str(m.threads) if m.kind == "engine" else "-", m.priority,
                 pcts(m.name, "alone"), pcts(m.name, "together"), memory(m)] for m in self.members]

    _HEADER = ["member", "device", "threads", "priority", "alone ms p50/p90/p99", "together ms p50/p90/p99",
               "context memory"]

    def _notes(self) -> list[str]:
        notes = []
        by_effect: dict[str, list[str]] = {}
        for m in self.members:
            if m.kind == "engine" and m.priority_effect != "stream priority":
                by_effect.setdefault(f"priority {m.priority_effect}", []).append(f"{m.name}={m.priority}")
            if m.sm_share is not None:
                by_effect.setdefault(f"sm_share {m.sm_share_effect}", []).append(f"{m.name}={m.sm_share:g}")
        notes += [f"{what} ({', '.join(who)})" for what, who in by_effect.items()]
        groups = {tuple(sorted((m.name,) + m.shares_weights_with)) for m in self.members if m.shares_weights_with}
        notes += [f"{', '.join(g)}: the same engine (weights shared), one context each" for g in sorted(groups)]
        clocks = sorted({s.clock for s in self.spans})
        notes.append(f"spans timed with the {'/'.join(clocks)} clock")
        if self.clock != "host":
            notes.append(f"serial and {self._labels()[2]} times: first start to last end of the {self.clock} spans")
        if self.kernels is not None:
            own = sum(k.member is not None for k in self.kernels)
            notes.append(f"{len(self.kernels)} kernels traced ({own} on the members' streams)")
        return notes

    def kernel_overlap(self, phase: str = "together") -> float:
        """Seconds during which kernels of two or more members ran at the same
        time in ``phase``, over the seconds any member's kernel ran: 0 = the
        GPU ran them one after another, 1 = always side by side. Needs
        profile(kernels=True)."""
        if self.kernels is None:
            raise ValueError("no kernel spans: profile(..., kernels=True) traces them")
        edges = []
        for k in self.kernels:
            if k.phase == phase and k.member is not None:
                edges += [(k.start, 1, k.member), (k.end, -1, k.member)]
        edges.sort(key=lambda e: (e[0], e[1]))
        running: dict[str, int] = {}
        busy = both = 0.0
        last = None
        for t, step, member in edges:
            if last is not None:
                active = sum(1 for n in running.values() if n > 0)
                busy += (t - last) if active >= 1 else 0.0
                both += (t - last) if active >= 2 else 0.0
            running[member] = running.get(member, 0) + step
            last = t
        return both / busy if busy > 0 else 0.0

    def _summary(self) -> list[tuple[str, str]]:
        unit, serial, together = self._labels()
        per = self.count or 1
        return [(f"{serial}", f"{self.serial_s * 1e3 / per:.2f} ms per {unit[:-1]}"),
                (together, f"{self.concurrent_s * 1e3 / per:.2f} ms per {unit[:-1]}"),
                ("overlap = serial / " + together, f"{self.overlap:.2f}x")]

    def __str__(self) -> str:
        unit = self._labels()[0]
        lines = [f"twinfer {self.kind} profile, {self.count} {unit}"]
        width = max(len(k) for k, _ in self._summary())
        lines += [f"  {k:<{width}}  {v}" for k, v in self._summary()]
        rows = [self._HEADER] + self._rows()
        widths = [max(len(r[c]) for r in rows) for c in range(len(self._HEADER))]
        for k, r in enumerate(rows):
            lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
            if k == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines += [f"  note: {n}" for n in self._notes()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<twinfer.Profile {self.kind}: overlap {self.overlap:.2f}x over {self.count} {self._labels()[0]}>"

    def _repr_html_(self) -> str:
        esc = html.escape
        summary = "".join(f"<tr><th style='text-align:left'>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in self._summary())
        head = "".join(f"<th>{esc(h)}</th>" for h in self._HEADER)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in self._rows())
        notes = "".join(f"<li>{esc(n)}</li>" for n in self._notes())
        unit = self._labels()[0]
        return (f"<div><b>twinfer {esc(self.kind)} profile</b>, {self.count} {unit}"
                f"<table>{summary}</table><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<ul>{notes}</ul></div>")

    def plot(self, phase: str = "together", ax=None, kernels: bool | None = None):
        """A Gantt chart of the members' runs in ``phase`` ("together" or
        "alone"), one row per member, and with kernel spans (the default when
        the profile traced them) each member's kernels as a thin band under
        its runs; returns the matplotlib Figure. Works without a display (no
        pyplot state is touched unless ``ax`` is yours).

        >>> prof.plot().savefig("timeline.png")
        """
        from .plot import gantt

        if kernels and self.kernels is None:
            raise ValueError("no kernel spans: profile(..., kernels=True) traces them")
        return gantt(self, phase, ax, self.kernels is not None if kernels is None else kernels)
