// One QConv's geometry in the form the CUDA int8 convolution kernels index
// with (1-D and 2-D; a 1-D convolution is a 2-D one of height 1), and the
// index math they run, __host__ __device__ so tests/test_index_math.py runs
// it on the host against NumPy (bindings' _test_im2col).
//
// The GEMM form: y[p, o] = sum over k of cols[p, k] * w[o, k], with
//   p = (b * OH + oh) * OW + ow         (one output position)
//   k = (c * KH + i) * KW + j           (one input channel and tap; the
//                                        weights' own [O, C, KH, KW] order)
//   or, taps_channels_last (an NHWC x):
//   k = (i * KW + j) * C + c            (the weights as [O, KH, KW, C]: a
//                                        tap's channels are one run of x)
// and cols[p, k] = x[b, c, oh*SH - PH + i*DH, ow*SW - PW + j*DW], the zero
// point where that falls in the padding.
#pragma once
#include <cstdint>
#include <vector>

#include "core/half.h"

namespace twinfer::quant {

struct ConvGeometry {
  int64_t batch = 1, channels = 1, height = 1, width = 1;  // x
  int64_t out_channels = 1, out_height = 1, out_width = 1;  // y
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t group = 1;
  bool x_channels_last = false;  // x stored [B, H, W, C]
  bool y_channels_last = false;  // y stored [B, OH, OW, O]
  bool taps_channels_last = false;  // the GEMM's K ordered (i, j, c): see above

  TWINFER_HD int64_t positions() const { return batch * out_height * out_width; }
  TWINFER_HD int64_t taps() const { return (channels / group) * kernel_h * kernel_w; }  // K of one group

  // The index math below in `I`: int64_t always works; int32_t (far fewer
  // instructions on a GPU, where 64-bit division is a long software
  // sequence) when every offset fits, see fits_32_bits.
  // Offset in x of (b, c, h, w), in x's layout.
  template <typename I>
  TWINFER_HD I x_offset_as(I b, I c, I h, I w) const {
    const I C = static_cast<I>(channels), H = static_cast<I>(height), W = static_cast<I>(width);
    return x_channels_last ? ((b * H + h) * W + w) * C + c : ((b * C + c) * H + h) * W + w;
  }
  // Offset in y of output position p and channel o, in y's layout.
  template <typename I>
  TWINFER_HD I y_offset_as(I p, I o) const {
    const I spatial = static_cast<I>(out_height * out_width), O = static_cast<I>(out_channels);
    if (y_channels_last) return p * O + o;
    const I b = p / spatial, s = p - b * spatial;
    return (b * O + o) * spatial + s;
  }
  // cols[p, k]'s place in x for the input channels of group g: batch,
  // channel and (h, w), before any bounds check (padding falls outside x).
  template <typename I>
  TWINFER_HD void tap_as(I p, I k, I g, I* b, I* c, I* h, I* w) const {
    const I OW = static_cast<I>(out_width), OH = static_cast<I>(out_height);
    const I KW = static_cast<I>(kernel_w), KH = static_cast<I>(kernel_h);
    const I ow = p % OW, t = p / OW, oh = t % OH;
    *b = t / OH;
    const I CG = static_cast<I>(channels / group);
    I i, j;
    if (taps_channels_last) {
      const I u = k / CG;
      *c = k - u * CG;
      j = u % KW;
      i = u / KW;
    } else {
      const I u = k / KW;
      j = k - u * KW;
      i = u % KH;
      *c = u / KH;
    }
    *c += g * CG;
    *h = oh * static_cast<I>(stride_h) - static_cast<I>(pad_h) + i * static_cast<I>(dil_h);
    *w = ow * static_cast<I>(stride_w) - static_cast<I>(pad_w) + j * static_cast<I>(dil_w);
  }
  // Where cols[p, k] comes from for the input channels of group g: an
  // offset in x, or -1 in the padding.
  template <typename I>
  TWINFER_HD I source_as(I p, I k, I g = 0) const {
    I b, c, h, w;
    tap_as<I>(p, k, g, &b, &c, &h, &w);
    if (h < 0 || h >= static_cast<I>(height) || w < 0 || w >= static_cast<I>(width)) return -1;
    return x_offset_as<I>(b, c, h, w);
  }
  // A row of KW taps, k0 .. k0 + KW (k0 at j = 0, the weights' own K order):
  // its index math done once, then tap_in_row_as gives tap j's offset in x
  // (or -1 in the padding) as source_as(p, k0 + j, g) does.
  template <typename I>
  struct TapRow {
    I base, w;  // x's offset at (b, c, h, w = 0); the row's first w
    bool in;    // h inside x
  };
  template <typename I>
  TWINFER_HD TapRow<I> tap_row_as(I p, I k0, I g = 0) const {
    I b, c, h, w;
    tap_as<I>(p, k0, g, &b, &c, &h, &w);
    TapRow<I> r;
    r.in = h >= 0 && h < static_cast<I>(height);
    r.base = r.in ? x_offset_as<I>(b, c, h, I(0)) : I(0);
    r.w = w;
    return r;
  }
  template <typename I>
  TWINFER_HD I tap_in_row_as(const TapRow<I>& r, I j) const {
    const I w = r.w + j * static_cast<I>(dil_w);
    if (!r.in || w < 0 || w >= static_cast<I>(width)) return -1;
    return r.base + w * (x_channels_last ? static_cast<I>(channels) : I(1));
  }
  TWINFER_HD int64_t x_offset(int64_t b, int64_t c, int64_t h, int64_t w) const {
    return x_offset_as<int64_t>(b, c, h, w);
  }
  TWINFER_HD int64_t y_offset(int64_t p, int64_t o) const { return y_offset_as<int64_t>(p, o); }
  TWINFER_HD int64_t source(int64_t p, int64_t k, int64_t g = 0) const { return source_as<int64_t>(p, k, g); }

  // The weights [O, C/group, KH, KW] reordered to the taps_channels_last K
  // order, [O, KH, KW, C/group] (host only, once at plan build).
  std::vector<int8_t> weights_taps_last(const int8_t* w) const {
    const int64_t cg = channels / group, kk = kernel_h * kernel_w;
    std::vector<int8_t> out(static_cast<size_t>(out_channels * cg * kk));
    for (int64_t o = 0; o < out_channels; ++o)
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t t = 0; t < kk; ++t) out[(o * kk + t) * cg + c] = w[(o * cg + c) * kk + t];
    return out;
  }

  // Whether the int32_t forms hold every offset of x, y, and `cols_width`
  // columns per output position (im2col's rows; 0: none): all under 2^31,
  // with room for a padded coordinate's negative intermediate.
  bool fits_32_bits(int64_t cols_width = 0) const {
    const int64_t limit = int64_t(1) << 30;
    const int64_t x = batch * channels * (height + pad_h + 1) * (width + pad_w + 1);
    const int64_t y = positions() * out_channels;
    // source_as's coordinates before the bounds check (the end padding is not stored).
    const int64_t reach_h = (out_height - 1) * stride_h + (kernel_h - 1) * dil_h;
    const int64_t reach_w = (out_width - 1) * stride_w + (kernel_w - 1) * dil_w;
    return x < limit && y < limit && positions() * cols_width < limit && reach_h < limit && reach_w < limit;
  }
};

}  // namespace twinfer::quant
