"""A step progress bar for long one-shot work (exporting, building engines).

The work happens inside single blocking calls (``torch.onnx.export``, the C++
engine build), so a plain ``tqdm`` would only move when a step ends. ``Steps``
keeps the bar quiet for quick work: it appears only once ``delay`` seconds have
passed, and a daemon thread then redraws it so the elapsed time keeps moving.
``tqdm.auto`` gives a widget in Jupyter and text on a terminal (stderr)."""

from __future__ import annotations

import sys
import threading
import time


class Steps:
    """``with Steps(2, "twinfer.torch.compile") as s: s.step("exporting"); ...``"""

    def __init__(self, total: int, desc: str, enabled: bool = True, delay: float = 1.0):
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.delay = delay
        self._done = 0
        self._label = ""
        self._bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = time.monotonic()

    # -- the bar, created lazily once the work has taken `delay` seconds --
    def _show(self) -> None:
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit="step", file=sys.stderr, leave=False)
            self._bar.update(self._done)
        if self._label:
            self._bar.set_postfix_str(self._label, refresh=False)
        self._bar.refresh()

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            if time.monotonic() - self._start >= self.delay:
                with self._lock:
                    self._show()

    def __enter__(self) -> "Steps":
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="twinfer-progress", daemon=True)
            self._thread.start()
        return self

    def step(self, label: str) -> None:
        """Mark the previous step done and name the one starting now."""
        with self._lock:
            if self._label:
                self._done += 1
            self._label = label
            if self._bar is not None:
                self._bar.n = self._done
                self._show()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._bar is not None:
                self._bar.n = self.total
                self._bar.close()
