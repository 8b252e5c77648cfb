#include <initializer_list>
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/qlinear_kernels.h"

namespace twinfer_gpu {

using twinfer::quant::ConvGeometry;
using twinfer::quant::LinearEpilogue;

// Every kernel here takes its index type I: int32_t where the host found
// every offset under 2^30 (ConvGeometry::fits_32_bits, small_enough), else
// int64_t. On an H200 the int64 forms' per-element divisions took most of
// an int8 ResNet-50's time (a 1x1 convolution's epilogue alone ~4 ms at
// batch 256).
template <typename I>
__device__ __forceinline__ I first_as() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <typename I>
__device__ __forceinline__ I stride_as() {
  return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

template <typename I>
__device__ __forceinline__ int8_t as_int8(const void* x, bool from_u8, I i) {
  return from_u8 ? static_cast<int8_t>(static_cast<int32_t>(static_cast<const uint8_t*>(x)[i]) - 128)
                 : static_cast<const int8_t*>(x)[i];
}

template <typename I>
__global__ void pack_int8_rows(const void* x, bool from_u8, I rows, I k, I kp, int8_t* out) {
  const I total = rows * kp;
  for (I i = first_as<I>(); i < total; i += stride_as<I>()) {
    const I r = i / kp, c = i - r * kp;
    out[i] = c < k ? as_int8<I>(x, from_u8, r * k + c) : int8_t(0);
  }
}

template <typename I>
__global__ void im2col_int8(const void* x, bool from_u8, ConvGeometry g, int8_t pad, I kp, int8_t* cols) {
  const I taps = static_cast<I>(g.taps()), total = static_cast<I>(g.positions()) * kp;
  for (I i = first_as<I>(); i < total; i += stride_as<I>()) {
    const I p = i / kp, k = i - p * kp;
    if (k >= taps) {
      cols[i] = 0;
      continue;
    }
    const I src = g.source_as<I>(p, k);
    cols[i] = src < 0 ? pad : as_int8<I>(x, from_u8, src);
  }
}

// im2col in the weights' own K order ((c, i) rows of KW taps): a thread per
// row of KW taps, whose index math is done once for the row (the byte-at-a-
// time kernel above ran ~57 GB/s on an H200, 9 ms for ResNet-50's 7x7 stem
// on 3 NCHW channels at batch 256), plus, where kp > taps, a thread per
// position for the zeros of K's padding.
template <typename I>
__global__ void im2col_int8_rows(const void* x, bool from_u8, ConvGeometry g, int8_t pad, I kp, int8_t* cols) {
  const I KW = static_cast<I>(g.kernel_w), taps = static_cast<I>(g.taps()), per = taps / KW + (kp > taps ? 1 : 0);
  const I total = static_cast<I>(g.positions()) * per;
  for (I q = first_as<I>(); q < total; q += stride_as<I>()) {
    const I p = q / per, r = q - p * per;
    int8_t* out = cols + p * kp;
    if (r == taps / KW) {  // K's padding (a thread a position where kp > taps)
      for (I k = taps; k < kp; ++k) out[k] = 0;
      continue;
    }
    const I k0 = r * KW;
    const ConvGeometry::TapRow<I> row = g.tap_row_as<I>(p, k0);
    for (I j = 0; j < KW; ++j) {
      const I src = g.tap_in_row_as<I>(row, j);
      out[k0 + j] = src < 0 ? pad : as_int8<I>(x, from_u8, src);
    }
  }
}

// im2col for an NHWC x with the K order taps_channels_last and channels in
// 16s: a thread per 16 bytes of a row, one tap's run of 16 channels, copied
// as one load and one store, the index math once per 16 bytes. uint8 x is
// shifted by -128 as the bytes' top bit flipped; the padding is `pad` in
// every byte.
template <typename I>
__global__ void im2col_int8_runs(const void* x, bool from_u8, ConvGeometry g, int8_t pad, I kp, int8_t* cols) {
  const I runs = kp / 16, total = static_cast<I>(g.positions()) * runs;
  const uint32_t pad4 = 0x01010101u * static_cast<uint8_t>(pad);
  for (I q = first_as<I>(); q < total; q += stride_as<I>()) {
    const I p = q / runs, k0 = (q - p * runs) * 16;
    const I src = g.source_as<I>(p, k0);
    uint4 v;
    if (src < 0) {
      v = make_uint4(pad4, pad4, pad4, pad4);
    } else {
      v = *reinterpret_cast<const uint4*>(static_cast<const int8_t*>(x) + src);
      if (from_u8) v.x ^= 0x80808080u, v.y ^= 0x80808080u, v.z ^= 0x80808080u, v.w ^= 0x80808080u;
    }
    *reinterpret_cast<uint4*>(cols + p * kp + k0) = v;
  }
}

template <typename I>
__device__ __forceinline__ void store_out(void* y, I at, float v, const LinearEpilogue& e, int yt) {
  // yt: 0 float32, 1 int8, 2 uint8, 3 float16, 4 bfloat16 (QMatMul's
  // out_dtype: a finite value past the type's range saturates, as lowering's
  // Clip -> Cast it replaces; NaN stays NaN).
  if (yt == 0) {
    static_cast<float*>(y)[at] = v;
  } else if (yt == 1) {
    static_cast<int8_t*>(y)[at] = static_cast<int8_t>(e.quantize(v));
  } else if (yt == 2) {
    static_cast<uint8_t*>(y)[at] = static_cast<uint8_t>(e.quantize(v));
  } else {
    static_cast<uint16_t*>(y)[at] = yt == 3 ? twinfer::float_to_half_saturate(v) : twinfer::float_to_bf16_saturate(v);
  }
}

template <typename I>
__global__ void linear_epilogue(const int32_t* acc, I rows, I channels, I ld, LinearEpilogue e, void* y, int yt,
                                ConvGeometry g, bool conv) {
  const I total = rows * channels;
  for (I i = first_as<I>(); i < total; i += stride_as<I>()) {
    const I r = i / channels, n = i - r * channels;
    const float v = e.value(acc[r * ld + n], n, r);
    store_out<I>(y, conv ? g.y_offset_as<I>(r, n) : i, v, e, yt);
  }
}

// yt's storage (store_out's codes: float32, int8, uint8, then float16 /
// bfloat16 as their bits).
template <int YT>
using OutType = std::conditional_t<
    YT == 0, float, std::conditional_t<YT == 1, int8_t, std::conditional_t<YT == 2, uint8_t, uint16_t>>>;

template <int YT>
__device__ __forceinline__ OutType<YT> out_value(float v, const LinearEpilogue& e) {
  if constexpr (YT == 0) return v;
  else if constexpr (YT == 1) return static_cast<int8_t>(e.quantize(v));
  else if constexpr (YT == 2) return static_cast<uint8_t>(e.quantize(v));
  else if constexpr (YT == 3) return twinfer::float_to_half_saturate(v);
  else return twinfer::float_to_bf16_saturate(v);
}

// linear_epilogue where y's rows are contiguous (a MatMul's, a channels-last
// convolution's): a thread per 4 channels of a row, one 16-byte load of
// sums and one store of 4 outputs; the value of each is store_out's. Pack p
// of y starts at element p * 4 = r * channels + n0. The host checked that
// channels and ld are multiples of 4, the pointers aligned, and the offsets
// under 2^30.
template <int YT>
__global__ void linear_epilogue_packs(const int32_t* __restrict__ acc, int32_t rows, int32_t channels, int32_t ld,
                                      LinearEpilogue e, void* __restrict__ y) {
  using Y = OutType<YT>;
  constexpr int V = 4;
  const int32_t per_row = channels / V, total = rows * per_row;
  for (int32_t p = first_as<int32_t>(); p < total; p += stride_as<int32_t>()) {
    const int32_t r = p / per_row, n0 = (p - r * per_row) * V;
    const Pack<int32_t, V> a = *reinterpret_cast<const Pack<int32_t, V>*>(acc + r * ld + n0);
    Pack<Y, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = out_value<YT>(e.value(a.v[k], n0 + k, r), e);
    reinterpret_cast<Pack<Y, V>*>(y)[p] = out;
  }
}

template <typename I>
__global__ void scatter_conv_output(const int8_t* d, I ld, ConvGeometry g, int8_t* y) {
  const I channels = static_cast<I>(g.out_channels), total = static_cast<I>(g.positions()) * channels;
  for (I i = first_as<I>(); i < total; i += stride_as<I>()) {
    const I p = i / channels, o = i - p * channels;
    y[g.y_offset_as<I>(p, o)] = d[p * ld + o];
  }
}

template <typename I>
__global__ void qconv_direct(const void* x, bool x_u8, int32_t x_zero, const int8_t* w, ConvGeometry g,
                             LinearEpilogue e, void* y, int yt) {
  const I channels = static_cast<I>(g.out_channels), total = static_cast<I>(g.positions()) * channels;
  const I taps = static_cast<I>(g.taps()), per_group = static_cast<I>(g.out_channels / g.group);
  for (I i = first_as<I>(); i < total; i += stride_as<I>()) {
    const I p = i / channels, o = i - p * channels, grp = o / per_group;
    int32_t acc = 0;
    for (I k = 0; k < taps; ++k) {
      const I src = g.source_as<I>(p, k, grp);
      if (src < 0) continue;  // the padding holds the zero point: (x_zero - x_zero) * w
      const int32_t xv = x_u8 ? static_cast<int32_t>(static_cast<const uint8_t*>(x)[src])
                              : static_cast<int32_t>(static_cast<const int8_t*>(x)[src]);
      acc += (xv - x_zero) * static_cast<int32_t>(w[o * taps + k]);
    }
    store_out<I>(y, g.y_offset_as<I>(p, o), e.value(acc, o), e, yt);
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
    case DType::kFloat16: return 3;
    case DType::kBFloat16: return 4;
    default: throw Error(ErrorKind::kDType, std::string("int8 layer output of type ") + dtype_name(t));
  }
}

// Whether products of these sizes stay under 2^30 (the int32_t kernels).
bool small_enough(std::initializer_list<int64_t> extents) {
  for (int64_t e : extents)
    if (e >= (int64_t(1) << 30)) return false;
  return true;
}

// Whether linear_epilogue_packs takes this epilogue: y's rows contiguous,
// channels and ld multiples of 4, acc and y aligned to their packs, offsets
// under 2^30.
bool packs_fit(const int32_t* acc, int64_t rows, int64_t channels, int64_t ld, const void* y, DType yt,
               const quant::ConvGeometry* conv) {
  if ((conv && !conv->y_channels_last) || channels % 4 != 0 || ld % 4 != 0) return false;
  if (!small_enough({rows * channels, rows * ld})) return false;
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return at(acc) % 16 == 0 && at(y) % (4 * dtype_size(yt)) == 0;
}

}  // namespace

void pack_int8_rows(const void* x, bool from_u8, int64_t rows, int64_t k, int64_t kp, int8_t* out, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * kp);
  if (!lc.blocks) return;
  if (small_enough({rows * kp, rows * k}))
    twinfer_gpu::pack_int8_rows<int32_t><<<lc.blocks, lc.threads, 0, s>>>(
        x, from_u8, static_cast<int32_t>(rows), static_cast<int32_t>(k), static_cast<int32_t>(kp), out);
  else
    twinfer_gpu::pack_int8_rows<int64_t><<<lc.blocks, lc.threads, 0, s>>>(x, from_u8, rows, k, kp, out);
  check_launch("int8 row packing launch");
}

namespace {

// One of the im2col kernels over `threads`, in 32-bit index math where the
// geometry's offsets fit.
using Im2col32 = void (*)(const void*, bool, quant::ConvGeometry, int8_t, int32_t, int8_t*);
using Im2col64 = void (*)(const void*, bool, quant::ConvGeometry, int8_t, int64_t, int8_t*);
void launch_im2col(Im2col32 k32, Im2col64 k64, int64_t threads, const void* x, bool from_u8,
                   const quant::ConvGeometry& g, int8_t pad, int64_t kp, int8_t* cols, cudaStream_t s,
                   const char* what) {
  const ew::LaunchConfig lc = ew::elementwise_launch(threads);
  if (!lc.blocks) return;
  if (g.fits_32_bits(kp))
    k32<<<lc.blocks, lc.threads, 0, s>>>(x, from_u8, g, pad, static_cast<int32_t>(kp), cols);
  else
    k64<<<lc.blocks, lc.threads, 0, s>>>(x, from_u8, g, pad, kp, cols);
  check_launch(what);
}

}  // namespace

void im2col_int8(const void* x, bool from_u8, const quant::ConvGeometry& g, int8_t pad, int64_t kp, int8_t* cols,
                 cudaStream_t s) {
  const int64_t cg = g.channels / g.group;
  if (g.taps_channels_last && g.x_channels_last && cg % 16 == 0 && kp == g.taps() &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(cols) % 16 == 0) {
    launch_im2col(twinfer_gpu::im2col_int8_runs<int32_t>, twinfer_gpu::im2col_int8_runs<int64_t>,
                  g.positions() * (kp / 16), x, from_u8, g, pad, kp, cols, s,
                  "int8 im2col (runs of 16 channels) launch");
  } else if (!g.taps_channels_last && g.group == 1 && g.kernel_w > 1) {
    const int64_t per = g.taps() / g.kernel_w + (kp > g.taps() ? 1 : 0);  // rows of taps, and K's padding
    launch_im2col(twinfer_gpu::im2col_int8_rows<int32_t>, twinfer_gpu::im2col_int8_rows<int64_t>,
                  g.positions() * per, x, from_u8, g, pad, kp, cols, s, "int8 im2col (rows of taps) launch");
  } else {
    launch_im2col(twinfer_gpu::im2col_int8<int32_t>, twinfer_gpu::im2col_int8<int64_t>, g.positions() * kp, x,
                  from_u8, g, pad, kp, cols, s, "int8 im2col launch");
  }
}

void linear_epilogue(const int32_t* acc, int64_t rows, int64_t channels, int64_t ld, const quant::LinearEpilogue& e,
                     void* y, DType yt, const quant::ConvGeometry* conv, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * channels);
  if (!lc.blocks) return;
  const quant::ConvGeometry g = conv ? *conv : quant::ConvGeometry{};
  const int code = out_code(yt);
  if (packs_fit(acc, rows, channels, ld, y, yt, conv)) {
    const ew::LaunchConfig lp = ew::elementwise_launch(rows * channels / 4);
    const int32_t r = static_cast<int32_t>(rows), c = static_cast<int32_t>(channels), l = static_cast<int32_t>(ld);
    switch (code) {
      case 0: twinfer_gpu::linear_epilogue_packs<0><<<lp.blocks, lp.threads, 0, s>>>(acc, r, c, l, e, y); break;
      case 1: twinfer_gpu::linear_epilogue_packs<1><<<lp.blocks, lp.threads, 0, s>>>(acc, r, c, l, e, y); break;
      case 2: twinfer_gpu::linear_epilogue_packs<2><<<lp.blocks, lp.threads, 0, s>>>(acc, r, c, l, e, y); break;
      case 3: twinfer_gpu::linear_epilogue_packs<3><<<lp.blocks, lp.threads, 0, s>>>(acc, r, c, l, e, y); break;
      default: twinfer_gpu::linear_epilogue_packs<4><<<lp.blocks, lp.threads, 0, s>>>(acc, r, c, l, e, y); break;
    }
    check_launch("int8 epilogue (packs of 4 channels) launch");
    return;
  }
  if (small_enough({rows * channels, rows * ld}) && (!conv || g.fits_32_bits()))
    twinfer_gpu::linear_epilogue<int32_t><<<lc.blocks, lc.threads, 0, s>>>(
        acc, static_cast<int32_t>(rows), static_cast<int32_t>(channels), static_cast<int32_t>(ld), e, y, code, g,
        conv != nullptr);
  else
    twinfer_gpu::linear_epilogue<int64_t><<<lc.blocks, lc.threads, 0, s>>>(acc, rows, channels, ld, e, y, code, g,
                                                                           conv != nullptr);
  check_launch("int8 epilogue launch");
}

void scatter_conv_output(const int8_t* d, int64_t ld, const quant::ConvGeometry& g, int8_t* y, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(g.positions() * g.out_channels);
  if (!lc.blocks) return;
  if (g.fits_32_bits(ld))
    twinfer_gpu::scatter_conv_output<int32_t><<<lc.blocks, lc.threads, 0, s>>>(d, static_cast<int32_t>(ld), g, y);
  else
    twinfer_gpu::scatter_conv_output<int64_t><<<lc.blocks, lc.threads, 0, s>>>(d, ld, g, y);
  check_launch("int8 conv output launch");
}

void qconv_direct(const void* x, bool x_u8, int32_t x_zero, const int8_t* w, const quant::ConvGeometry& g,
                  const quant::LinearEpilogue& e, void* y, DType yt, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(g.positions() * g.out_channels);
  if (!lc.blocks) return;
  if (g.fits_32_bits() && small_enough({g.out_channels * g.taps()}))
    twinfer_gpu::qconv_direct<int32_t><<<lc.blocks, lc.threads, 0, s>>>(x, x_u8, x_zero, w, g, e, y, out_code(yt));
  else
    twinfer_gpu::qconv_direct<int64_t><<<lc.blocks, lc.threads, 0, s>>>(x, x_u8, x_zero, w, g, e, y, out_code(yt));
  check_launch("direct int8 convolution launch");
}

}  // namespace twinfer::cuda
