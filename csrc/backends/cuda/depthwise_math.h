// The arithmetic of the channels-last depthwise convolution kernel
// (depthwise_conv.cu): one output position's run of V consecutive channels,
// y[n, oh, ow, c0 .. c0+V) = sum over the window of x[n, ih, iw, c] *
// w[r, s, c], accumulated in float. x and y are NHWC; the kernel's own copy
// of the weights is [KH, KW, C] (channel innermost, so V channels are one
// load, as they are in x). __host__ __device__ and free of CUDA headers:
// bindings/kernel_math.cc runs this code on the host for
// tests/test_depthwise_conv.py, which checks it against NumPy.
#pragma once
#include <cstdint>

#include "core/half.h"
#include "ops/elementwise/offset_calc.h"

namespace twinfer::cuda {

struct DepthwiseGeometry {
  int64_t channels = 1;  // C = groups = output channels
  int64_t in_h = 1, in_w = 1, out_h = 1, out_w = 1;
  int64_t k_h = 1, k_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  // Divisors of a pack index (V channels at one output position): packs per
  // position (C / V), then out_w, then out_h.
  ew::FastDivmod packs_per_position, width, height;

  DepthwiseGeometry() = default;
  // pack: V, the channels a thread computes; C % V == 0 (the caller checks).
  DepthwiseGeometry(int64_t c, int64_t ih, int64_t iw, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
                    int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int pack)
      : channels(c), in_h(ih), in_w(iw), out_h(oh), out_w(ow), k_h(kh), k_w(kw), stride_h(sh), stride_w(sw),
        pad_h(ph), pad_w(pw), dil_h(dh), dil_w(dw),
        packs_per_position(static_cast<uint64_t>(c / pack > 0 ? c / pack : 1)),
        width(static_cast<uint64_t>(ow > 0 ? ow : 1)), height(static_cast<uint64_t>(oh > 0 ? oh : 1)) {}

  TWINFER_HD int64_t packs(int64_t batch, int pack) const { return batch * out_h * out_w * (channels / pack); }

  // Pack p's output position and first channel; its element offset in y.
  TWINFER_HD int64_t position(uint64_t p, int pack, int64_t* n, int64_t* oh, int64_t* ow, int64_t* c0) const {
    uint64_t q, r;
    packs_per_position.divmod(p, q, r);
    *c0 = static_cast<int64_t>(r) * pack;
    const uint64_t pos = q;  // (n, oh, ow) flattened: y's row
    width.divmod(q, q, r);
    *ow = static_cast<int64_t>(r);
    height.divmod(q, q, r);
    *oh = static_cast<int64_t>(r);
    *n = static_cast<int64_t>(q);
    return static_cast<int64_t>(pos) * channels + *c0;
  }

  // acc[0 .. V) += the window's products for channels c0 .. c0+V.
  // load_x(offset, v) / load_w(offset, v) read V elements from that element
  // offset of x / the [KH, KW, C] weights into floats. Padding reads nothing.
  template <int V, typename LoadX, typename LoadW>
  TWINFER_HD void accumulate(int64_t n, int64_t oh, int64_t ow, int64_t c0, const LoadX& load_x,
                             const LoadW& load_w, float* acc) const {
    float xv[V], wv[V];
    const int64_t h0 = oh * stride_h - pad_h, w0 = ow * stride_w - pad_w;
    for (int64_t r = 0; r < k_h; ++r) {
      const int64_t ih = h0 + r * dil_h;
      if (ih < 0 || ih >= in_h) continue;
      const int64_t row = (n * in_h + ih) * in_w;
      for (int64_t s = 0; s < k_w; ++s) {
        const int64_t iw = w0 + s * dil_w;
        if (iw < 0 || iw >= in_w) continue;
        load_x((row + iw) * channels + c0, xv);
        load_w((r * k_w + s) * channels + c0, wv);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int k = 0; k < V; ++k) acc[k] += xv[k] * wv[k];
      }
    }
  }
};

}  // namespace twinfer::cuda
