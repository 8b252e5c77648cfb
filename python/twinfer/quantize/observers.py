"""Range observers: how the activation range of one tensor is chosen from
calibration data. One pass over the data; each observer sees every batch.

* ``MinMaxObserver``: the extremes seen.
* ``HistogramObserver``: a histogram of |x| over [0, amax] whose range doubles
  when a batch exceeds it (adjacent bins merge, so no batch is seen twice);
  from it, ``percentile`` (the |x| below which that share of values lies) and
  ``entropy`` (the clipping threshold whose 128-level quantized distribution
  is closest in KL divergence to the observed one, TensorRT's calibrator).
"""

from __future__ import annotations

import numpy as np


class MinMaxObserver:
    def __init__(self):
        self.min = np.inf
        self.max = -np.inf

    def update(self, x: np.ndarray) -> None:
        if x.size:
            self.min = min(self.min, float(np.min(x)))
            self.max = max(self.max, float(np.max(x)))

    @property
    def amax(self) -> float:
        return max(abs(self.min), abs(self.max)) if np.isfinite(self.min) else 0.0


class HistogramObserver(MinMaxObserver):
    def __init__(self, bins: int = 2048):
        super().__init__()
        if bins < 256 or bins % 2:
            raise ValueError("bins must be even and >= 256")
        self.bins = bins
        self.hist = np.zeros(bins, dtype=np.float64)
        self.top = 0.0  # the histogram covers |x| in [0, top]

    def update(self, x: np.ndarray) -> None:
        super().update(x)
        if not x.size:
            return
        a = np.abs(np.asarray(x, dtype=np.float32)).ravel()
        amax = float(a.max())
        if self.top == 0.0:
            self.top = amax if amax > 0 else 1e-12
        while amax > self.top:  # double the range: pairs of bins merge into the lower half
            self.hist = np.concatenate([self.hist.reshape(-1, 2).sum(axis=1), np.zeros(self.bins // 2)])
            self.top *= 2.0
        h, _ = np.histogram(a, bins=self.bins, range=(0.0, self.top))
        self.hist += h

    @property
    def bin_width(self) -> float:
        return self.top / self.bins

    def percentile(self, q: float) -> float:
        """|x| below which q percent of the values lie (the upper edge of that bin)."""
        if not 0 < q <= 100:
            raise ValueError("percentile must be in (0, 100]")
        total = self.hist.sum()
        if total == 0:
            return 0.0
        k = int(np.searchsorted(np.cumsum(self.hist), total * q / 100.0))
        return min(self.amax, (k + 1) * self.bin_width)

    def entropy(self, levels: int = 128) -> float:
        """The threshold minimising KL(P || Q): P the observed |x| distribution
        clipped at the threshold (outliers added to its last bin), Q its
        quantization to `levels` levels spread back over the same bins."""
        hist = self.hist
        used = int(np.nonzero(hist)[0].max()) + 1 if hist.any() else 0
        if used <= levels:
            return self.amax
        best_kl, best_i = np.inf, used
        for i in range(levels, used + 1):
            p = hist[:i].copy()
            p[i - 1] += hist[i:].sum()
            # Q: the first i bins merged into `levels` groups; each group's
            # mass spread evenly over the bins where P is non-zero.
            group = (np.arange(i) * levels) // i
            nonzero = p > 0
            mass = np.bincount(group, weights=hist[:i], minlength=levels)
            count = np.bincount(group, weights=nonzero, minlength=levels)
            q = np.where(nonzero, mass[group] / np.maximum(count[group], 1), 0.0)
            kl = _kl(p, q)
            if kl < best_kl:
                best_kl, best_i = kl, i
        return min(self.amax, (best_i + 0.5) * self.bin_width)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    qs = q.sum()
    if qs == 0:
        return np.inf
    q = q / qs
    mask = p > 0
    if np.any(q[mask] == 0):
        return np.inf
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))
