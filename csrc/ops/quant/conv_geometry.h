// One QConv's geometry in the form the CUDA int8 convolution kernels index
// with (1-D and 2-D; a 1-D convolution is a 2-D one of height 1), and the
// index math they run, __host__ __device__ so tests/test_index_math.py runs
// it on the host against NumPy (bindings' _test_im2col).
//
// The GEMM form: y[p, o] = sum over k of cols[p, k] * w[o, k], with
//   p = (b * OH + oh) * OW + ow         (one output position)
//   k = (c * KH + i) * KW + j           (one input channel and tap; the
//                                        weights' own [O, C, KH, KW] order)
// and cols[p, k] = x[b, c, oh*SH - PH + i*DH, ow*SW - PW + j*DW], the zero
// point where that falls in the padding.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace twinfer::quant {

struct ConvGeometry {
  int64_t batch = 1, channels = 1, height = 1, width = 1;  // x
  int64_t out_channels = 1, out_height = 1, out_width = 1;  // y
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t group = 1;
  bool x_channels_last = false;  // x stored [B, H, W, C]
  bool y_channels_last = false;  // y stored [B, OH, OW, O]

  TWINFER_HD int64_t positions() const { return batch * out_height * out_width; }
  TWINFER_HD int64_t taps() const { return (channels / group) * kernel_h * kernel_w; }  // K of one group

  // Offset in x of (b, c, h, w), in x's layout.
  TWINFER_HD int64_t x_offset(int64_t b, int64_t c, int64_t h, int64_t w) const {
    return x_channels_last ? ((b * height + h) * width + w) * channels + c : ((b * channels + c) * height + h) * width + w;
  }
  // Offset in y of output position p and channel o, in y's layout.
  TWINFER_HD int64_t y_offset(int64_t p, int64_t o) const {
    const int64_t spatial = out_height * out_width;
    const int64_t b = p / spatial, s = p - b * spatial;
    return y_channels_last ? p * out_channels + o : (b * out_channels + o) * spatial + s;
  }
  // Where cols[p, k] comes from for the input channels of group g: an
  // offset in x, or -1 in the padding.
  TWINFER_HD int64_t source(int64_t p, int64_t k, int64_t g = 0) const {
    const int64_t ow = p % out_width, t = p / out_width, oh = t % out_height, b = t / out_height;
    const int64_t j = k % kernel_w, u = k / kernel_w, i = u % kernel_h, c = u / kernel_h + g * (channels / group);
    const int64_t h = oh * stride_h - pad_h + i * dil_h, w = ow * stride_w - pad_w + j * dil_w;
    if (h < 0 || h >= height || w < 0 || w >= width) return -1;
    return x_offset(b, c, h, w);
  }
};

}  // namespace twinfer::quant
