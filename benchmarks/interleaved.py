"""Two (or more) runtimes timed in one process, in interleaved blocks: each
block runs one callable for a fixed time; blocks alternate ABBA so that a
drift of the machine (another VM's load, the clock) falls on both sides.
Shared by op_cliffs.py, tree_ensembles.py and detectors.py."""

from __future__ import annotations

import statistics
import time


def block(run, seconds: float) -> float:
    """Median ms of `run` called for `seconds` (at least 3 calls)."""
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def abba_medians(runs: dict, blocks: int, seconds: float) -> dict:
    """{name: median ms over `blocks` blocks}, each callable in `runs` warmed
    up once, the blocks in ABBA order (for two runtimes)."""
    for r in runs.values():
        r()
    names = list(runs)
    got = {k: [] for k in names}
    for b in range(blocks):
        for k in (names if b % 2 == 0 else names[::-1]):
            got[k].append(block(runs[k], seconds))
    return {k: statistics.median(v) for k, v in got.items()}
