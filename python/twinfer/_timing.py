"""Wall-clock timing helpers shared by the demo, the CLI and the benchmarks."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def measure(fn: Callable[[], object], iterations: int = 30, warmup: int = 3) -> list[float]:
    """Seconds per call for `iterations` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def percentile_ms(times: list[float], q: float) -> float:
    s = sorted(times)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k] * 1e3
