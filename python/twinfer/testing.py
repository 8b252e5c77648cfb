"""Testing aids: the simulated device and fault injection.

``device="sim"`` is a GPU stand-in that runs on the CPU, for testing code that
uses twinfer's GPU runtime on machines without a GPU (CI, laptops). It models
what makes GPU programs go wrong, not GPU speed:

- "device" memory in its own space: the host touching it directly is an error,
  and memory nobody wrote reads as NaN;
- streams run their work late, in order, but in no fixed order across streams:
  only events and synchronisation order them; every memory access is checked
  against that order, so a missing event wait or a host read before
  synchronising is an error every time, not only when the timing shows it;
- graph capture records a stream's work and replay runs it again, with the
  restrictions CUDA imposes while capturing;
- the device's kernels are twinfer's CPU kernels.

    engine = twinfer.load("model.onnx", device="sim")
    out = engine.run({"x": x})["y"].numpy()       # same answer as device="cpu"

``sim_options`` tunes it (per process), ``inject_faults`` makes the runtime
deliberately skip one of its duties — a test that a fault is caught proves the
simulator would catch that bug.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from . import _core

__all__ = ["sim_options", "inject_faults", "FAULTS"]

#: What ``inject_faults`` can make the runtime skip (only on the simulated device):
FAULTS = {
    "copy": "placement inserts no host<->device copies (a CPU kernel gets device memory)",
    "event_wait": "a run does not wait for the events its inputs are ready at",
    "host_sync": "the host reads results (host kernels' inputs, outputs) without synchronising",
    "graph_input": "a replayed graph does not get the new inputs copied into its buffers",
}


@contextlib.contextmanager
def sim_options(*, max_delay_us: int | None = None, seed: int | None = None, check_order: bool | None = None,
                memory_limit: int | None = None, compute_capability: int | None = None) -> Iterator[dict]:
    """Change the simulated device's settings inside a ``with`` block.

    max_delay_us: each task waits a random 0..max microseconds before it runs (default 50);
    seed: the streams' random delays (0: fresh each time);
    check_order: the race detector (default on);
    memory_limit: device bytes before allocations raise OutOfMemoryError (0: unlimited);
    compute_capability: what the device reports, major*10+minor (default 90, Hopper; 80
    stands for an A100, which has no FP8).
    """
    old = _core.sim_config()
    new = dict(old)
    for key, value in (("max_delay_us", max_delay_us), ("seed", seed), ("check_order", check_order),
                       ("memory_limit", memory_limit), ("compute_capability", compute_capability)):
        if value is not None:
            new[key] = value
    _core.set_sim_config(**new)
    try:
        yield new
    finally:
        _core.set_sim_config(**old)


@contextlib.contextmanager
def inject_faults(*names: str) -> Iterator[None]:
    """Make the runtime skip the named duties (see FAULTS) inside the block, on the
    simulated device only. For tests that prove the simulator catches such bugs."""
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(FAULTS)}")
    old = set(_core.injected_faults())
    _core.set_injected_faults(sorted(old | set(names)))
    try:
        yield
    finally:
        _core.set_injected_faults(sorted(old))
