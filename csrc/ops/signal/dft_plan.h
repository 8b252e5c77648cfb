// DFT and STFT apart from any backend's kernel: the node's configuration
// (axis, dft_length, frame step and length, as the shape rule and the
// kernels read them) and the arithmetic of one output value as
// __host__ __device__ code: direct sums over double-precision twiddles
// (O(n) per value), which the CUDA kernels (backends/cuda/signal.cu) use.
// The CPU kernels (dft.cc) use an FFT (fft.h) instead: O(n) per value made
// audio front-ends 20x slower than onnxruntime there.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.h"  // TWINFER_HD
#include "ops/kernel.h"
#include "ops/schema.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::signal {

using tensor::view_scalar_int;

// cos/sin of 2 pi j / n for j in [0, n), on the host.
struct Twiddles {
  std::vector<double> c, s;
  explicit Twiddles(int64_t n) : c(static_cast<size_t>(n)), s(static_cast<size_t>(n)) {
    for (int64_t j = 0; j < n; ++j) {
      const double a = 2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n);
      c[j] = std::cos(a);
      s[j] = std::sin(a);
    }
  }
};

// Bin k of the complex DFT of a line of m values (zero beyond m), n points;
// get(j, &re, &im) reads value j. sign -1: forward, +1: inverse. tc/ts: the
// twiddles.
template <typename Get>
TWINFER_HD void dft_bin(const Get& get, int64_t m, int64_t n, int64_t k, int sign, const double* tc, const double* ts,
                        double* re, double* im) {
  const int64_t mm = m < n ? m : n;
  double sr = 0, si = 0;
  int64_t idx = 0;  // (j * k) mod n
  for (int64_t j = 0; j < mm; ++j) {
    double xr, xi;
    get(j, &xr, &xi);
    const double c = tc[idx], s = sign * ts[idx];
    sr += xr * c - xi * s;
    si += xr * s + xi * c;
    idx += k;
    if (idx >= n) idx %= n;
  }
  *re = sr;
  *im = si;
}

// Sample t of the inverse real DFT: the Hermitian spectrum's bins 0..n/2
// (m given, zero beyond) -> n real samples, divided by n. The imaginary
// parts of bin 0 and (n even) bin n/2 are ignored, like numpy.
template <typename Get>
TWINFER_HD double irfft_sample(const Get& get, int64_t m, int64_t n, int64_t t, const double* tc, const double* ts) {
  const int64_t half = n / 2;
  double xr, xi;
  double acc = 0.0;
  if (m > 0) {
    get(0, &xr, &xi);
    acc = xr;
  }
  int64_t idx = t % n;
  for (int64_t k = 1; k <= half && k < m; ++k, idx = (idx + t) % n) {
    get(k, &xr, &xi);
    if (2 * k == n) acc += xr * tc[idx];
    else acc += 2.0 * (xr * tc[idx] - xi * ts[idx]);
  }
  return acc / static_cast<double>(n);
}

struct DftConfig {
  int64_t axis = 0;     // normalised against the input's rank
  int64_t n = -1;       // dft_length; -1 when not known
  bool inverse = false, onesided = false;
};

// Reads the axis (attribute or input) and dft_length; known=false when an
// input they come from is not a constant.
template <typename Ctx>
DftConfig dft_config(const Ctx& c, int64_t rank, const Tensor* len_t, const Tensor* axis_t, bool* known) {
  DftConfig d;
  *known = true;
  d.inverse = c.node().attr_int("inverse", 0) != 0;
  d.onesided = c.node().attr_int("onesided", 0) != 0;
  int64_t axis = 1;
  if (c.opset() >= 20) {
    axis = -2;
    if (c.has_input(2)) {
      if (axis_t) axis = view_scalar_int(axis_t->view());
      else *known = false;
    }
  } else {
    axis = c.node().attr_int("axis", 1);
  }
  if (axis < -rank || axis >= rank || axis == rank - 1 || axis == -1)
    c.fail(ErrorKind::kInvalidArgument, "axis " + std::to_string(axis) + " is out of range for a signal of rank " +
                                            std::to_string(rank) + " (the last dim holds re/im)");
  d.axis = axis < 0 ? axis + rank : axis;
  if (c.has_input(1)) {
    if (len_t) {
      d.n = view_scalar_int(len_t->view());
      if (d.n < 1) c.fail(ErrorKind::kInvalidArgument, "dft_length must be >= 1, got " + std::to_string(d.n));
    } else {
      *known = false;
    }
  }
  return d;
}

// Points of the transform for an axis of m entries.
inline int64_t dft_points(const DftConfig& d, int64_t m) {
  if (d.n > 0) return d.n;
  return d.inverse && d.onesided ? 2 * (m - 1) : m;
}

// A DFT node's lines for the kernels: input [outer, m, inner, cin], output
// [outer, bins, inner, 1 or 2]; n points per transform. Built with
// dft_length and axis as constants (or absent); the output shape already
// says how many bins there are.
struct DftGeometry {
  DftConfig d;
  int64_t outer = 1, inner = 1, m = 0, cin = 1, n = 0, bins = 0;
};

inline DftGeometry dft_geometry(const KernelBuildInfo& info) {
  DftGeometry g;
  const Shape x = info.input_shape(0);
  const int64_t r = static_cast<int64_t>(x.size());
  bool known;
  g.d = dft_config(info, r, info.has_input(1) ? info.input_constant(1) : nullptr,
                   info.has_input(2) ? info.input_constant(2) : nullptr, &known);
  if (!known) info.fail(ErrorKind::kUnsupportedOp, "dft_length and axis must be known when the plan is built");
  for (int64_t k = 0; k < g.d.axis; ++k) g.outer *= x[k];
  for (int64_t k = g.d.axis + 1; k < r - 1; ++k) g.inner *= x[k];
  g.m = x[g.d.axis];
  g.cin = x.back();
  g.n = dft_points(g.d, g.m);
  if (g.n < 1) info.fail(ErrorKind::kInvalidArgument, "the transform has no points");
  g.bins = info.output_shape(0)[g.d.axis];
  return g;
}

struct StftConfig {
  int64_t step = -1, length = -1;  // -1: not known
};

template <typename Ctx>
StftConfig stft_config(const Ctx& c, const Tensor* step_t, const Tensor* len_t, Dim window_len, Dim signal_len) {
  StftConfig s;
  if (step_t) {
    s.step = view_scalar_int(step_t->view());
    if (s.step < 1) c.fail(ErrorKind::kInvalidArgument, "frame_step must be >= 1, got " + std::to_string(s.step));
  }
  if (c.has_input(3) && len_t) {
    s.length = view_scalar_int(len_t->view());
  } else if (!c.has_input(3)) {
    if (c.has_input(2)) {
      if (window_len.known()) s.length = window_len.value;
    } else if (signal_len.known()) {
      s.length = signal_len.value;
    }
  }
  if (s.length == 0 || s.length < -1)
    c.fail(ErrorKind::kInvalidArgument, "frame_length must be >= 1, got " + std::to_string(s.length));
  if (s.length > 0 && window_len.known() && c.has_input(2))
    if (window_len.value != s.length)
      c.fail(ErrorKind::kShape, "window length " + std::to_string(window_len.value) + " differs from frame_length " +
                                    std::to_string(s.length));
  if (s.length > 0 && signal_len.known() && s.length > signal_len.value)
    c.fail(ErrorKind::kInvalidArgument, "frame_length " + std::to_string(s.length) + " exceeds the signal length " +
                                            std::to_string(signal_len.value));
  return s;
}


// An STFT node's frames for the kernels: a signal [batch, len, cin], output
// [batch, frames, bins, 2], frames of n samples every `step`.
struct StftGeometry {
  int64_t batch = 0, len = 0, cin = 1, frames = 0, bins = 0, step = 1, n = 1;
};

inline StftGeometry stft_geometry(const KernelBuildInfo& info) {
  StftGeometry g;
  const Shape x = info.input_shape(0);
  const Shape y = info.output_shape(0);
  g.batch = x[0];
  g.len = x[1];
  g.cin = x.size() == 3 ? x[2] : 1;
  g.frames = y[1];
  g.bins = y[2];
  const Dim wl = info.has_input(2) ? Dim(info.input_shape(2)[0]) : Dim();
  const StftConfig cfg =
      stft_config(info, info.input_constant(1), info.has_input(3) ? info.input_constant(3) : nullptr, wl, Dim(g.len));
  if (cfg.step < 0 || cfg.length < 0) info.fail(ErrorKind::kUnsupportedOp, "frame_step/frame_length must be known");
  g.step = cfg.step;
  g.n = cfg.length;
  return g;
}

}  // namespace twinfer::signal
