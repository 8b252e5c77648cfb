"""Where a run's time goes: per-op-type and per-node kernel times.

>>> prof = engine.profile_ops({"input": x}, iterations=10)
>>> print(prof)                 # op types by total time, then the slowest nodes
>>> prof.by_op_type()           # {"Conv": (ms per run, nodes), ...}
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class StepTime:
    node: str
    op: str
    kernel: str
    ms_per_run: float


class OpProfile:
    """Kernel times of one input shape, averaged over the profiled runs.
    ``wall_ms`` is the whole run's median for comparison (the steps' sum is
    lower: outputs allocation, argument setup and the Python call are not in
    any step)."""

    def __init__(self, steps: list[StepTime], runs: int, wall_ms: float, eager: bool):
        self.steps = steps
        self.runs = runs
        self.wall_ms = wall_ms
        self.eager = eager

    @property
    def steps_ms(self) -> float:
        return sum(s.ms_per_run for s in self.steps)

    def by_op_type(self) -> dict[str, tuple[float, int]]:
        """{op type: (ms per run, number of nodes)}, slowest first."""
        acc: dict[str, list] = defaultdict(lambda: [0.0, 0])
        for s in self.steps:
            acc[s.op][0] += s.ms_per_run
            acc[s.op][1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(acc.items(), key=lambda kv: -kv[1][0])}

    def slowest(self, n: int = 10) -> list[StepTime]:
        return sorted(self.steps, key=lambda s: -s.ms_per_run)[:n]

    def to_dict(self) -> dict:
        return {"runs": self.runs, "wall_ms": self.wall_ms, "steps_ms": self.steps_ms, "eager": self.eager,
                "steps": [s.__dict__ for s in self.steps]}

    def _rows_by_op(self):
        total = self.steps_ms or 1.0
        return [(op, n, f"{ms:.3f}", f"{100 * ms / total:.1f}%") for op, (ms, n) in self.by_op_type().items()]

    def __str__(self) -> str:
        if self.eager:
            return ("twinfer op profile: this input shape runs eagerly (its shapes depend on input values), "
                    f"so there are no per-step times; whole run {self.wall_ms:.3f} ms")
        lines = [f"twinfer op profile: {len(self.steps)} steps, {self.runs} runs, "
                 f"steps {self.steps_ms:.3f} ms of {self.wall_ms:.3f} ms per run"]
        lines.append(f"  {'op':<28} {'nodes':>5} {'ms/run':>9} {'share':>7}")
        for op, n, ms, share in self._rows_by_op():
            lines.append(f"  {op:<28} {n:>5} {ms:>9} {share:>7}")
        lines.append("  slowest nodes:")
        for s in self.slowest(8):
            lines.append(f"    {s.ms_per_run:8.3f} ms  {s.op:<22} {s.kernel:<18} {s.node}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<twinfer.OpProfile {len(self.steps)} steps, {self.steps_ms:.3f} ms of {self.wall_ms:.3f} ms per run>"

    def _repr_html_(self) -> str:
        from .display import key_values, table

        head = key_values([("runs", self.runs), ("wall ms per run (median)", f"{self.wall_ms:.3f}"),
                           ("kernel ms per run", f"{self.steps_ms:.3f}")], "twinfer op profile")
        if self.eager:
            return head + "<div>evaluated eagerly (value-dependent shapes): no per-step times</div>"
        return (head + table(["op", "nodes", "ms/run", "share"], self._rows_by_op())
                + table(["ms/run", "op", "kernel", "node"],
                        [(f"{s.ms_per_run:.3f}", s.op, s.kernel, s.node) for s in self.slowest(10)], "slowest nodes"))


def profile_ops(engine, feeds: dict, iterations: int = 10, warmup: int = 2) -> OpProfile:
    import time

    from .errors import InvalidArgumentError

    if iterations < 1:
        raise InvalidArgumentError("iterations must be >= 1")
    ctx = engine.create_context()
    for _ in range(warmup):
        engine.run(feeds, context=ctx)
    # Profiling runs each step on its own, without the CUDA graph the warm-up
    # runs replayed, and the first such run carries one-time costs: on an
    # H200 the first step of an int8 ResNet-50 averaged 16 ms over five runs
    # (its sum of steps 98 ms against a median run of 83 ms). One run with
    # profiling on, then the times reset, and only the runs after it count.
    ctx.profiling = True
    engine.run(feeds, context=ctx)
    ctx.profiling = True  # resets the times
    walls = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        engine.run(feeds, context=ctx)
        walls.append((time.perf_counter() - t0) * 1e3)
    rows = ctx.step_times()
    runs = max((r[4] for r in rows), default=0)
    steps = [StepTime(node or "<unnamed>", op, kernel, total / max(1, n)) for node, op, kernel, total, n in rows]
    walls.sort()
    return OpProfile(steps, iterations, walls[len(walls) // 2], eager=runs == 0)
