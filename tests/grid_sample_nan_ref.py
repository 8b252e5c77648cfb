"""The expected GridSample output for a grid holding NaN coordinates, shared by
tests/test_ops_vision.py (the CPU kernel) and tests/test_vision_cuda.py (the
CUDA kernel and the simulated device).

The ONNX reference evaluator has no answer for a NaN coordinate (linear and
cubic raise "cannot convert float NaN to integer"; nearest casts NaN to
int32, INT32_MIN on x86, and reflects that), so twinfer follows PyTorch's
CUDA grid_sample kernel (csrc/ops/vision/grid_sample_math.h,
gs_nan_coordinate), per NaN coordinate:

* nearest / linear: border and reflection clamp it to pixel 0 (PyTorch's
  clip_coordinates with CUDA's fmaxf / fminf); zeros puts it outside the
  input, so the sample is 0 (PyTorch's safe_downgrade_to_int_range:
  non-finite -> -100);
* cubic: NaN whatever the padding (its weights come from the NaN fraction).

PyTorch's CPU kernels each depart from that in one case: the vectorised 2-D
kernel gives NaN for linear + zeros, and the scalar (volumetric) kernel
clamps NaN to the last pixel for border / reflection (std::min / std::max
on NaN). expected_grid_sample therefore states the rule through the ONNX
reference evaluator: each NaN coordinate replaced by the normalised
coordinate of pixel 0 (border, reflection) or by one far outside (zeros),
and NaN for cubic; torch_grid_sample_2d is PyTorch's 2-D result with the
linear + zeros case taken from its CUDA rule, the independent check of the
2-D cases."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx_helpers import make_model, run_reference

TORCH_MODE = {"nearest": "nearest", "linear": "bilinear", "bilinear": "bilinear", "cubic": "bicubic",
              "bicubic": "bicubic"}
ONNX_MODE = {"bilinear": "linear", "bicubic": "cubic"}


def _nan_points(grid):
    """[N, out...] : whether the grid point holds a NaN."""
    return np.isnan(grid).any(axis=-1)


def _reference(x, grid, mode, padding_mode, align):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=ONNX_MODE.get(mode, mode),
                            padding_mode=padding_mode, align_corners=align)
    ys = [x.shape[0], x.shape[1], *grid.shape[1:-1]]
    model = make_model([node], [("x", x.dtype, list(x.shape)), ("g", grid.dtype, list(grid.shape))],
                       [("y", x.dtype, ys)], opset=20)
    return np.asarray(run_reference(model, {"x": x, "g": grid})[0], np.float64)


def expected_grid_sample(x, grid, mode, padding_mode, align):
    """GridSample of x by grid (1-3 spatial dims), NaN in the grid included, in x's dtype."""
    x, grid = np.asarray(x), np.asarray(grid)
    nsp = grid.shape[-1]
    sub = grid.astype(np.float64)
    for k in range(nsp):  # grid holds (x, y, z): coordinate k runs along spatial dim nsp-1-k
        length = x.shape[2 + nsp - 1 - k]
        if padding_mode == "zeros":
            pixel0 = -10.0  # every tap outside
        else:
            pixel0 = -1.0 if align else 1.0 / length - 1.0
        col = sub[..., k]
        col[np.isnan(col)] = pixel0
    want = _reference(x, sub.astype(grid.dtype), mode, padding_mode, align)
    if ONNX_MODE.get(mode, mode) == "cubic":
        want[np.broadcast_to(_nan_points(grid)[:, None], want.shape)] = np.nan
    return want.astype(x.dtype)


def torch_grid_sample_2d(x, grid, mode, padding_mode, align):
    """PyTorch's 2-D grid_sample in float64; linear + zeros at NaN points is 0
    (PyTorch's CUDA kernel; its vectorised CPU kernel gives NaN)."""
    import torch
    import torch.nn.functional as F

    tmode = TORCH_MODE[mode]
    y = F.grid_sample(torch.from_numpy(np.asarray(x, np.float64)), torch.from_numpy(np.asarray(grid, np.float64)),
                      mode=tmode, padding_mode=padding_mode, align_corners=bool(align)).numpy()
    if tmode == "bilinear" and padding_mode == "zeros":
        y[np.broadcast_to(_nan_points(grid)[:, None], y.shape)] = 0.0
    return y


def grid_with_nan(rng, shape, lo=-1.3, hi=1.3, dtype=np.float32):
    """A random grid of `shape` ([N, out..., nsp]) with NaN in one coordinate, in
    every coordinate, and beside coordinates inside and outside [-1, 1]."""
    g = rng.uniform(lo, hi, shape).astype(dtype)
    flat = g.reshape(-1, shape[-1])
    n = flat.shape[0]
    picks = rng.choice(n, size=min(n, 4 * shape[-1] + 4), replace=False)
    for k, p in enumerate(picks):
        if k < len(picks) // 2:
            flat[p, k % shape[-1]] = np.nan  # one coordinate
        elif k < 3 * len(picks) // 4:
            flat[p, :] = np.nan  # every coordinate
        else:  # NaN beside a coordinate far outside (zeros: every tap of that dim outside too)
            flat[p, :] = 2.5
            flat[p, k % shape[-1]] = np.nan
    return g
