#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/qlinear_kernels.h"

namespace twinfer_gpu {

using twinfer::quant::ConvGeometry;
using twinfer::quant::LinearEpilogue;

__device__ __forceinline__ int8_t as_int8(const void* x, bool from_u8, int64_t i) {
  return from_u8 ? static_cast<int8_t>(static_cast<int32_t>(static_cast<const uint8_t*>(x)[i]) - 128)
                 : static_cast<const int8_t*>(x)[i];
}

__global__ void pack_int8_rows(const void* x, bool from_u8, int64_t rows, int64_t k, int64_t kp, int8_t* out) {
  const int64_t total = rows * kp;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t r = i / kp, c = i - r * kp;
    out[i] = c < k ? as_int8(x, from_u8, r * k + c) : int8_t(0);
  }
}

__global__ void im2col_int8(const void* x, bool from_u8, ConvGeometry g, int8_t pad, int64_t kp, int8_t* cols) {
  const int64_t taps = g.taps(), total = g.positions() * kp;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / kp, k = i - p * kp;
    if (k >= taps) {
      cols[i] = 0;
      continue;
    }
    const int64_t src = g.source(p, k);
    cols[i] = src < 0 ? pad : as_int8(x, from_u8, src);
  }
}

__device__ __forceinline__ void store_out(void* y, int64_t at, float v, const LinearEpilogue& e, int yt) {
  // yt: 0 float32, 1 int8, 2 uint8
  if (yt == 0) static_cast<float*>(y)[at] = v;
  else if (yt == 1) static_cast<int8_t*>(y)[at] = static_cast<int8_t>(e.quantize(v));
  else static_cast<uint8_t*>(y)[at] = static_cast<uint8_t>(e.quantize(v));
}

__global__ void linear_epilogue(const int32_t* acc, int64_t rows, int64_t channels, int64_t ld, LinearEpilogue e,
                                void* y, int yt, ConvGeometry g, bool conv) {
  const int64_t total = rows * channels;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t r = i / channels, n = i - r * channels;
    const float v = e.value(acc[r * ld + n], n, r);
    store_out(y, conv ? g.y_offset(r, n) : i, v, e, yt);
  }
}

__global__ void scatter_conv_output(const int8_t* d, int64_t ld, ConvGeometry g, int8_t* y) {
  const int64_t total = g.positions() * g.out_channels;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / g.out_channels, o = i - p * g.out_channels;
    y[g.y_offset(p, o)] = d[p * ld + o];
  }
}

__global__ void qconv_direct(const void* x, bool x_u8, int32_t x_zero, const int8_t* w, ConvGeometry g,
                             LinearEpilogue e, void* y, int yt) {
  const int64_t total = g.positions() * g.out_channels, taps = g.taps();
  const int64_t per_group = g.out_channels / g.group;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / g.out_channels, o = i - p * g.out_channels, grp = o / per_group;
    int32_t acc = 0;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t src = g.source(p, k, grp);
      if (src < 0) continue;  // the padding holds the zero point: (x_zero - x_zero) * w
      const int32_t xv = x_u8 ? static_cast<int32_t>(static_cast<const uint8_t*>(x)[src])
                              : static_cast<int32_t>(static_cast<const int8_t*>(x)[src]);
      acc += (xv - x_zero) * static_cast<int32_t>(w[o * taps + k]);
    }
    store_out(y, g.y_offset(p, o), e.value(acc, o), e, yt);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

namespace {
int out_code(DType t) {
  switch (t) {
    case DType::kFloat32: return 0;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 2;
    default: throw Error(ErrorKind::kDType, std::string("int8 layer output of type ") + dtype_name(t));
  }
}
}  // namespace

void pack_int8_rows(const void* x, bool from_u8, int64_t rows, int64_t k, int64_t kp, int8_t* out, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * kp);
  if (!lc.blocks) return;
  twinfer_gpu::pack_int8_rows<<<lc.blocks, lc.threads, 0, s>>>(x, from_u8, rows, k, kp, out);
  check_launch("int8 row packing launch");
}

void im2col_int8(const void* x, bool from_u8, const quant::ConvGeometry& g, int8_t pad, int64_t kp, int8_t* cols,
                 cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(g.positions() * kp);
  if (!lc.blocks) return;
  twinfer_gpu::im2col_int8<<<lc.blocks, lc.threads, 0, s>>>(x, from_u8, g, pad, kp, cols);
  check_launch("int8 im2col launch");
}

void linear_epilogue(const int32_t* acc, int64_t rows, int64_t channels, int64_t ld, const quant::LinearEpilogue& e,
                     void* y, DType yt, const quant::ConvGeometry* conv, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * channels);
  if (!lc.blocks) return;
  twinfer_gpu::linear_epilogue<<<lc.blocks, lc.threads, 0, s>>>(acc, rows, channels, ld, e, y, out_code(yt),
                                                                conv ? *conv : quant::ConvGeometry{}, conv != nullptr);
  check_launch("int8 epilogue launch");
}

void scatter_conv_output(const int8_t* d, int64_t ld, const quant::ConvGeometry& g, int8_t* y, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(g.positions() * g.out_channels);
  if (!lc.blocks) return;
  twinfer_gpu::scatter_conv_output<<<lc.blocks, lc.threads, 0, s>>>(d, ld, g, y);
  check_launch("int8 conv output launch");
}

void qconv_direct(const void* x, bool x_u8, int32_t x_zero, const int8_t* w, const quant::ConvGeometry& g,
                  const quant::LinearEpilogue& e, void* y, DType yt, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(g.positions() * g.out_channels);
  if (!lc.blocks) return;
  twinfer_gpu::qconv_direct<<<lc.blocks, lc.threads, 0, s>>>(x, x_u8, x_zero, w, g, e, y, out_code(yt));
  check_launch("direct int8 convolution launch");
}

}  // namespace twinfer::cuda
