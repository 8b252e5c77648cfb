// DeformConv's bilinear sample, shared by the CPU kernel (deform_conv.cc) and
// CUDA's (backends/cuda/vision.cu), so the CPU tests exercise the arithmetic
// the GPU runs. No framework headers: nvcc includes it as it is.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"
#include "ops/elementwise/scalar.h"

namespace twinfer::vision {

// The H x W plane xc at (hy, wx), in double: corners outside read 0, and a
// point with no corner inside reads 0.
template <typename T>
TWINFER_HD double deform_sample(const T* xc, int64_t H, int64_t W, double hy, double wx) {
  const double fh = floor(hy), fw = floor(wx);
  const int64_t h0 = static_cast<int64_t>(fh), w0 = static_cast<int64_t>(fw);
  if (!(h0 >= -1 && h0 < H && w0 >= -1 && w0 < W)) return 0.0;
  const double lh = hy - fh, lw = wx - fw;
  auto at = [&](int64_t hh, int64_t ww) -> double {
    return hh >= 0 && hh < H && ww >= 0 && ww < W ? static_cast<double>(ew::load(xc[hh * W + ww])) : 0.0;
  };
  return (1 - lh) * (1 - lw) * at(h0, w0) + (1 - lh) * lw * at(h0, w0 + 1) + lh * (1 - lw) * at(h0 + 1, w0) +
         lh * lw * at(h0 + 1, w0 + 1);
}

}  // namespace twinfer::vision
