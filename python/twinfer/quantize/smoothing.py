"""Activation smoothing for int8 transformers (the idea of SmoothQuant, Xiao
et al. 2023), chosen at calibration and applied by the int8 build
(csrc/graph/passes/smooth_activations.h).

A transformer's LayerNorm outputs carry a few outlier channels, 10-30x the
rest in every token, so one int8 scale for the tensor leaves the ordinary
channels a handful of levels. Per input channel j of a MatMul/Gemm, with
``a_j = max |x[..., j]|`` over the calibration data and ``w_j = max |W[j, :]|``
over the layers that read x,

    s_j = a_j ** alpha / w_j ** (1 - alpha)

and the build computes ``(x / s) (diag(s) W)``: the same product, with the
range moved from the activation (one scale per tensor, or per token) into
the weights (one scale per output channel, where a larger row costs little).
``alpha`` = 0.5 splits the range evenly; larger moves more of it.

The factors are fixed by calibration and saved with it, so a rebuilt engine
smooths the same way without the data.
"""

from __future__ import annotations

import numpy as np

DEFAULT_ALPHA = 0.5
# Factors are kept within [1/LIMIT, LIMIT]: a channel never seen non-zero (or
# a weight row of zeros) would otherwise get 0 or infinity.
LIMIT = 1e4


def smoothing_factors(act_amax, weight_amax, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """s_j = act_amax_j ** alpha / weight_amax_j ** (1 - alpha), float32; 1
    where either statistic is 0 (nothing to balance)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    a = np.asarray(act_amax, np.float64)
    w = np.asarray(weight_amax, np.float64)
    if a.shape != w.shape:
        raise ValueError(f"{a.shape[0] if a.ndim else a} activation channels vs {w.shape[0] if w.ndim else w} weight rows")
    ok = (a > 0) & (w > 0) & np.isfinite(a) & np.isfinite(w)
    s = np.ones_like(a)
    s[ok] = a[ok] ** alpha / w[ok] ** (1.0 - alpha)
    return np.clip(s, 1.0 / LIMIT, LIMIT).astype(np.float32)
