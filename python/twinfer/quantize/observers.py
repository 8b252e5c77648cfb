"""Range observers: how the activation range of one tensor is chosen from
calibration data. One pass over the data; each observer sees every batch.

* ``MinMaxObserver``: the extremes seen.
* ``ChannelMeanObserver``: the mean of each channel along one axis (what
  bias correction needs).
* ``ChannelAmaxObserver``: the largest |x| of each channel along the last
  axis (what activation smoothing needs), and the largest rank seen.
* ``HistogramObserver``: a histogram of |x| over [0, amax] whose range doubles
  when a batch exceeds it (adjacent bins merge, so no batch is seen twice);
  from it, ``percentile`` (the |x| below which that share of values lies) and
  ``entropy`` (the clipping threshold whose 128-level quantized distribution
  is closest in KL divergence to the observed one, TensorRT's calibrator).
"""

from __future__ import annotations

import numpy as np


def _finite(x: np.ndarray) -> np.ndarray:
    """``x`` without NaN and infinities (one NaN in the data made a channel
    mean NaN, which bias correction folded into every output: all zeros; an
    infinity broke the histogram), flattened where any were dropped."""
    finite = np.isfinite(x)
    return x if finite.all() else x[finite]


# Share of non-zero values exactly at the largest |x| from which a tensor
# counts as clipped by its producer (a smooth distribution has ~1 such value,
# so at least 2 are needed too: small tensors keep their entropy threshold).
SATURATED = 1e-3


class MinMaxObserver:
    def __init__(self):
        self.min = np.inf
        self.max = -np.inf

    def update(self, x: np.ndarray) -> None:
        x = _finite(x)
        if x.size:
            self.min = min(self.min, float(np.min(x)))
            self.max = max(self.max, float(np.max(x)))

    @property
    def amax(self) -> float:
        return max(abs(self.min), abs(self.max)) if np.isfinite(self.min) else 0.0


class ChannelMeanObserver:
    def __init__(self, axis: int):
        self.axis = axis
        self.sums = None
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        if x.ndim == 0 or not x.size:
            return
        axis = self.axis % x.ndim
        others = tuple(d for d in range(x.ndim) if d != axis)
        finite = np.isfinite(x)  # non-finite values left out of their channel's mean
        sums = np.sum(np.where(finite, x, 0), axis=others, dtype=np.float64)
        counts = np.sum(finite, axis=others, dtype=np.int64)
        if self.sums is not None and sums.shape != self.sums.shape:
            self.sums = None  # the channel count changed between batches: no mean
            self.count = -1
        if isinstance(self.count, int) and self.count < 0:
            return
        self.sums = sums if self.sums is None else self.sums + sums
        self.count = counts if isinstance(self.count, int) else self.count + counts

    @property
    def mean(self) -> list[float] | None:
        if self.sums is None or isinstance(self.count, int):
            return None
        return [float(s / c) if c else 0.0 for s, c in zip(self.sums, self.count)]


class ChannelAmaxObserver:
    def __init__(self):
        self.amax = None
        self.rank = 0

    def update(self, x: np.ndarray) -> None:
        if x.ndim == 0 or not x.size:
            return
        self.rank = max(self.rank, x.ndim)
        a = np.abs(x.reshape(-1, x.shape[-1]))
        a = np.max(np.where(np.isfinite(a), a, 0), axis=0)
        if self.amax is not None and a.shape != self.amax.shape:
            self.amax = np.zeros(0, np.float32)  # the channel count changed: no statistic
        if self.amax is not None and not self.amax.size:
            return
        self.amax = a if self.amax is None else np.fmax(self.amax, a)


class HistogramObserver(MinMaxObserver):
    def __init__(self, bins: int = 2048):
        super().__init__()
        if bins < 256 or bins % 2:
            raise ValueError("bins must be even and >= 256")
        self.bins = bins
        self.hist = np.zeros(bins, dtype=np.float64)
        self.top = 0.0  # the histogram covers |x| in [0, top]
        self.zeros = 0  # exact zeros, counted apart from the histogram
        self.peak, self.at_peak = 0.0, 0  # the largest |x| and how often exactly it was seen

    def update(self, x: np.ndarray) -> None:
        super().update(x)
        if not x.size:
            return
        a = _finite(np.abs(np.asarray(x, dtype=np.float32)).ravel())
        if not a.size:
            return
        amax = float(a.max())
        # Exact zeros (half of a ReLU's output) are left out: zero quantizes
        # exactly at any threshold, and in the first bin their spike, spread
        # over a merged group by the entropy search, outweighed everything
        # else and pulled ReLU6 thresholds down to ~0.4.
        seen = a.size
        a = a[a != 0]
        self.zeros += seen - a.size
        if not a.size:
            return
        if amax > self.peak:
            self.peak, self.at_peak = amax, 0
        if amax == self.peak:
            self.at_peak += int(np.count_nonzero(a == amax))
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
        total = self.hist.sum() + self.zeros
        if total == 0:
            return 0.0
        k = int(np.searchsorted(self.zeros + np.cumsum(self.hist), total * q / 100.0))
        return min(self.amax, (k + 1) * self.bin_width)

    def entropy(self, levels: int | None = None) -> float:
        """The threshold minimising KL(P || Q): P the observed |x| distribution
        (exact zeros aside) clipped at the threshold (outliers added to its
        last bin), Q its quantization to `levels` levels spread back over the
        same bins: 128 as TensorRT for a signed tensor, 256 for one never
        negative (it runs as uint8)."""
        if levels is None:
            levels = 256 if self.min >= 0 else 128
        # A tensor that often sits exactly at its largest value is clipped
        # there by its producer (ReLU6, Clip): that range is the network's
        # own, and clipping lower cuts off the saturated values it relies on.
        if self.at_peak >= 2 and self.at_peak > SATURATED * max(self.hist.sum(), 1):
            return self.amax
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
