"""Timing a Parallel's or Pipeline's runs for its profile.

On the CPU a run is timed by the host clock around the call. On a GPU the
host clock would time the enqueue, not the work: each run is bracketed by
timing events recorded on the member's own stream, so a span is when that
stream's work started and ended on the device ("cuda-event", or
"sim-event" on the simulated device). Host functions between device stages
keep the host clock, aligned with the device's at the start.

>>> clock = make_clock(members)
>>> out = clock.time(member, item=0, phase="together", run=lambda: ...)
>>> spans = clock.spans()     # waits for the events

With kernels=True the device also traces every kernel (CUPTI on CUDA) from
the clock's creation to kernel_spans().
"""

from __future__ import annotations

import time
from typing import Callable

from .. import _core
from ..errors import InvalidArgumentError
from ._members import KernelSpan, Member, Span


class HostClock:
    """perf_counter around each call."""

    def __init__(self):
        self.kind = "host"
        self._origin = time.perf_counter()
        self._spans: list[Span] = []

    def time(self, member: Member, item: int, phase: str, run: Callable, inputs=()):
        t0 = time.perf_counter()
        out = run()
        self._spans.append(Span(member.name, item, t0 - self._origin, time.perf_counter() - self._origin, phase))
        return out

    def spans(self) -> list[Span]:
        return list(self._spans)

    def kernel_spans(self, spans: list[Span]) -> list[KernelSpan]:
        return []

    kernel_clock_error_s = None

    def abort(self) -> None:
        """A profile failed: stop any trace, keep nothing."""


class DeviceClock(HostClock):
    """Timing events on each device member's stream (see the module docstring)."""

    def __init__(self, device: str, members: list[Member], kernels: bool = False):
        super().__init__()
        self.device = device
        self.kind = "sim-event" if device.startswith("sim") else "cuda-event"
        device_members = [m for m in members if m.on_device]
        # The streams idle (earlier work, a warm-up, over before a trace
        # starts, so none of its kernels is traced), an event recorded now is
        # reached now: the origin of both clocks and of the kernel trace's.
        for m in device_members:
            m.synchronize()
        self._tracing = kernels
        if kernels:  # DeviceError naming why where the device cannot (no CUPTI)
            _core.start_kernel_trace(device)
            self._stream_member = {m.stream.trace_key: m.name for m in device_members}
        # {member: (its origin event, seconds from the first origin)}. Members
        # on SM shares live in green contexts of their own, and elapsed times
        # are asked only between events of one context: each such member gets
        # its own origin, placed on the common timeline by the host's clock
        # (recorded on an idle stream and waited for at once: microseconds).
        self._origins = {}
        first = _core.create_event(device, True)
        # The trace's clock is read around the first origin: it was reached
        # somewhere between the two readings. Their midpoint is the trace's
        # origin, and half their distance is how far a kernel's time may be
        # off the events' timeline (under load, more than a kernel lasts).
        before = _core.kernel_trace_clock_ns(device) if kernels else 0
        device_members[0].stream.record(first)
        first.synchronize()
        after = _core.kernel_trace_clock_ns(device) if kernels else 0
        self._trace_origin_ns = (before + after) // 2
        self._trace_slack = 1e-4 + (after - before) / 2e9
        self.kernel_clock_error_s = self._trace_slack
        self._origin = time.perf_counter()
        for m in device_members:
            if m is device_members[0] or not m.sm_share:
                self._origins[m.name] = (first, 0.0)
                continue
            ev = _core.create_event(device, True)
            m.stream.record(ev)
            ev.synchronize()
            self._origins[m.name] = (ev, time.perf_counter() - self._origin)
        self._pending: list[tuple] = []

    def time(self, member: Member, item: int, phase: str, run: Callable, inputs=()):
        if not member.on_device:
            return super().time(member, item, phase, run)
        start, end = _core.create_event(self.device, True), _core.create_event(self.device, True)
        # A stage's span starts when its inputs are there, not while it waits
        # for the previous stage.
        for t in inputs:
            if isinstance(t, _core.Tensor) and t.device != "cpu":
                member.stream.wait_for(t)
        member.stream.record(start)
        out = run()
        member.stream.record(end)
        self._pending.append((member.name, item, phase, start, end))  # list.append: atomic across workers
        return out

    def spans(self) -> list[Span]:
        out = super().spans()
        for name, item, phase, start, end in self._pending:
            end.synchronize()
            origin, offset = self._origins[name]
            t0 = offset + _core.elapsed_ms(self.device, origin, start) / 1e3
            t1 = offset + _core.elapsed_ms(self.device, origin, end) / 1e3
            out.append(Span(name, item, t0, t1, phase, self.kind))
        return out

    def abort(self) -> None:
        if self._tracing:
            self._tracing = False
            _core.stop_kernel_trace(self.device)

    def kernel_spans(self, spans: list[Span]) -> list[KernelSpan]:
        """Stops the trace (the members have synchronised): each kernel with
        its member and the phase whose runs it falls in."""
        if not self._tracing:
            return []
        self._tracing = False
        raw = _core.stop_kernel_trace(self.device)
        extents = {}
        for phase in ("alone", "together"):
            sel = [s for s in spans if s.phase == phase]
            if sel:
                extents[phase] = (min(s.start for s in sel), max(s.end for s in sel))
        runs: dict[str, list[Span]] = {}
        for s in spans:
            runs.setdefault(s.member, []).append(s)
        out = []
        for name, key, start_ns, end_ns in raw:
            t0 = (start_ns - self._trace_origin_ns) / 1e9
            t1 = (end_ns - self._trace_origin_ns) / 1e9
            member = self._stream_member.get(key)
            if member is not None:
                # A member's kernel belongs to the run of that member it falls
                # in; one in none of them (a warm-up's last kernel ending as
                # the trace began) is no part of the profile.
                # The nearest of them (inside: distance 0), within the clocks' error.
                near = min(runs.get(member, []), key=lambda r: max(r.start - t0, t0 - r.end, 0.0), default=None)
                phase = near.phase if near and max(near.start - t0, t0 - near.end) <= self._trace_slack else None
            else:  # a stream no member owns (a library's): the phase whose extent it falls in
                phase = next((p for p, (a, b) in extents.items()
                              if a - self._trace_slack <= t0 <= b + self._trace_slack), None)
            if phase is None:
                continue
            out.append(KernelSpan(member, name, t0, t1, phase))
        return sorted(out, key=lambda k: k.start)


def make_clock(members: list[Member], kernels: bool = False) -> HostClock:
    """A device clock when engine members run on one device, else the host
    clock; kernels=True also traces the device's kernels."""
    devices = {m.device for m in members if m.on_device}
    if len(devices) == 1:
        return DeviceClock(devices.pop(), members, kernels)
    if kernels:
        raise InvalidArgumentError("kernels=True traces a GPU's kernels: it needs engine members on one device "
                                   f"(these run on {sorted({m.device for m in members})})")
    return HostClock()


def extent(spans: list[Span], phase: str) -> float:
    """Seconds from the phase's first start to its last end."""
    sel = [s for s in spans if s.phase == phase]
    return max(s.end for s in sel) - min(s.start for s in sel) if sel else 0.0


def busy(spans: list[Span], phase: str) -> float:
    """Seconds the phase's spans last, added up: the serial time of runs made
    one after another, without the host's gaps between them (its waits and
    hand-overs, which the concurrent phase does not have)."""
    return sum(s.end - s.start for s in spans if s.phase == phase)
