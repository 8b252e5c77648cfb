// Fast paths of QuantizeLinear and DequantizeLinear for the case int8
// inference runs on every activation: float32 <-> int8/uint8 with one scale
// and zero point (per tensor). The general kernels (quantize_linear.cc)
// handle every dtype and granularity element by element in double; these
// compute the same float32 arithmetic the ONNX definition asks for,
//   QuantizeLinear:   y = saturate(round_half_even(x / scale) + zero_point)
//   DequantizeLinear: y = (x - zero_point) * scale
// in loops the compiler vectorises (one division or one multiply per
// element), so a quantized model's Q/DQ nodes stay cheap next to its GEMMs.
// Registered at a higher priority; supports() leaves everything else to the
// general kernels.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/quant/quant_util.h"
#include "ops/quant/quantize_fast.h"

namespace twinfer::quant {
namespace {

constexpr int64_t kGrain = 16384;

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// One element, float32 scale, optional zero point of the quantized type.
bool per_tensor_params(const KernelBuildInfo& info, DType q, std::string* why) {
  if (info.input_dtype(1) != DType::kFloat32 || shape_numel(info.input_shape(1)) != 1) {
    if (why) *why = "fast path: per-tensor float32 scale only";
    return false;
  }
  if (info.has_input(2) && (info.input_dtype(2) != q || shape_numel(info.input_shape(2)) != 1)) {
    if (why) *why = "fast path: one zero point of the quantized type only";
    return false;
  }
  return true;
}

bool quantize_supports(const KernelBuildInfo& info, std::string* why) {
  const graph::Node& n = info.node();
  const DType out = info.output(0).dtype;
  if (info.input_dtype(0) != DType::kFloat32 || !is_q8(out) ||
      (info.opset() >= 23 && n.attr_int("precision", 0) != 0) ||
      (info.opset() >= 21 && n.attr_int("block_size", 0) != 0)) {
    if (why) *why = "fast path: float32 -> int8/uint8 only";
    return false;
  }
  return per_tensor_params(info, out, why);
}

bool dequantize_supports(const KernelBuildInfo& info, std::string* why) {
  const graph::Node& n = info.node();
  if (!is_q8(info.input_dtype(0)) || info.output(0).dtype != DType::kFloat32 ||
      (info.opset() >= 21 && n.attr_int("block_size", 0) != 0)) {
    if (why) *why = "fast path: int8/uint8 -> float32 only";
    return false;
  }
  return per_tensor_params(info, info.input_dtype(0), why);
}

int32_t zero_point(const KernelContext& ctx) {
  if (ctx.inputs.size() < 3 || !ctx.inputs[2].data) return 0;
  int32_t z = 0;
  load_int32s(ctx.inputs[2], &z);
  return z;
}

// The element loops, multiversioned (core/simd_clones.h): without
// AVX2 the division, rounding and narrowing ran 4 wide and Q took ~4x
// onnxruntime's time.
//
// Clamping before rounding equals clamping after it (the bounds are
// integers); adding and subtracting 1.5 * 2^23 rounds a float of magnitude
// below 2^22 to the nearest integer, ties to even, in the default FP mode.
constexpr float kMagic = 12582912.f;

TWINFER_SIMD_CLONES void quantize_u8(const float* __restrict x, uint8_t* __restrict y, int64_t n, float scale,
                                     float lo, float hi, int32_t zp) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v == v ? v : 0.f;  // NaN quantizes to the zero point
    v = std::min(std::max(v, lo), hi);
    v = (v + kMagic) - kMagic;
    y[i] = static_cast<uint8_t>(static_cast<int32_t>(v) + zp);
  }
}

TWINFER_SIMD_CLONES void quantize_s8(const float* __restrict x, int8_t* __restrict y, int64_t n, float scale,
                                     float lo, float hi, int32_t zp) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v == v ? v : 0.f;
    v = std::min(std::max(v, lo), hi);
    v = (v + kMagic) - kMagic;
    y[i] = static_cast<int8_t>(static_cast<int32_t>(v) + zp);
  }
}

TWINFER_SIMD_CLONES void dequantize_u8(const uint8_t* __restrict x, float* __restrict y, int64_t n, float scale,
                                       int32_t zp) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * scale;
}

TWINFER_SIMD_CLONES void dequantize_s8(const int8_t* __restrict x, float* __restrict y, int64_t n, float scale,
                                       int32_t zp) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * scale;
}

void quantize_loop(const float* x, uint8_t* y, int64_t n, float s, float lo, float hi, int32_t zp) {
  quantize_u8(x, y, n, s, lo, hi, zp);
}
void quantize_loop(const float* x, int8_t* y, int64_t n, float s, float lo, float hi, int32_t zp) {
  quantize_s8(x, y, n, s, lo, hi, zp);
}
void dequantize_loop(const uint8_t* x, float* y, int64_t n, float s, int32_t zp) { dequantize_u8(x, y, n, s, zp); }
void dequantize_loop(const int8_t* x, float* y, int64_t n, float s, int32_t zp) { dequantize_s8(x, y, n, s, zp); }

template <typename Q>
void quantize(const float* x, Q* y, int64_t n, float scale, int32_t zp, int threads) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min() - zp);
  const float hi = static_cast<float>(std::numeric_limits<Q>::max() - zp);
  parallel_for(n, threads, kGrain,
               [&](int64_t b, int64_t e) { quantize_loop(x + b, y + b, e - b, scale, lo, hi, zp); });
}

template <typename Q>
void dequantize(const Q* x, float* y, int64_t n, float scale, int32_t zp, int threads) {
  parallel_for(n, threads, kGrain, [&](int64_t b, int64_t e) { dequantize_loop(x + b, y + b, e - b, scale, zp); });
}

// min and max of x[0, n) together with 0 (DynamicQuantizeLinear's range).
// Sixteen independent lanes so the compiler vectorises without reassociating;
// a NaN never wins a comparison, so it is skipped.
TWINFER_SIMD_CLONES void min_max_loop(const float* __restrict x, int64_t n, float* mn, float* mx) {
  constexpr int kLanes = 16;
  float lo[kLanes] = {}, hi[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      lo[j] = x[i + j] < lo[j] ? x[i + j] : lo[j];
      hi[j] = x[i + j] > hi[j] ? x[i + j] : hi[j];
    }
  float a = 0.f, b = 0.f;
  for (int j = 0; j < kLanes; ++j) {
    a = lo[j] < a ? lo[j] : a;
    b = hi[j] > b ? hi[j] : b;
  }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *mn = a;
  *mx = b;
}

class FastQuantize final : public Kernel {
 public:
  explicit FastQuantize(const KernelBuildInfo& info) : out_(info.output(0).dtype) {}
  const char* impl_name() const override { return "fast per-tensor"; }
  void run(KernelContext& ctx) const override {
    const float scale = *ctx.inputs[1].as<const float>();
    const int32_t zp = zero_point(ctx);
    const float* x = ctx.inputs[0].as<const float>();
    const int64_t n = ctx.inputs[0].numel();
    if (out_ == DType::kUInt8)
      quantize(x, ctx.outputs[0].as<uint8_t>(), n, scale, zp, ctx.num_threads);
    else
      quantize(x, ctx.outputs[0].as<int8_t>(), n, scale, zp, ctx.num_threads);
  }

 private:
  DType out_;
};

class FastDequantize final : public Kernel {
 public:
  explicit FastDequantize(const KernelBuildInfo& info) : xt_(info.input_dtype(0)) {}
  const char* impl_name() const override { return "fast per-tensor"; }
  void run(KernelContext& ctx) const override {
    const float scale = *ctx.inputs[1].as<const float>();
    const int32_t zp = zero_point(ctx);
    float* y = ctx.outputs[0].as<float>();
    const int64_t n = ctx.inputs[0].numel();
    if (xt_ == DType::kUInt8)
      dequantize(ctx.inputs[0].as<const uint8_t>(), y, n, scale, zp, ctx.num_threads);
    else
      dequantize(ctx.inputs[0].as<const int8_t>(), y, n, scale, zp, ctx.num_threads);
  }

 private:
  DType xt_;
};

}  // namespace

void min_max_with_zero(const float* x, int64_t n, int threads, float* mn, float* mx) {
  const int chunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n / kGrain)));
  std::vector<float> lo(chunks, 0.f), hi(chunks, 0.f);
  const int64_t per = (n + chunks - 1) / chunks;
  parallel_for(chunks, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t start = std::min(n, c * per), stop = std::min(n, start + per);
      min_max_loop(x + start, stop - start, &lo[c], &hi[c]);
    }
  });
  *mn = *std::min_element(lo.begin(), lo.end());
  *mx = *std::max_element(hi.begin(), hi.end());
}

void min_max_with_zero_serial(const float* x, int64_t n, float* mn, float* mx) { min_max_loop(x, n, mn, mx); }

void quantize_to_u8(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero_point, int threads) {
  quantize(x, y, n, scale, zero_point, threads);
}

TWINFER_REGISTER_KERNEL("QuantizeLinear", Backend::kCPU, 10, quantize_supports, make_kernel<FastQuantize>);
TWINFER_REGISTER_KERNEL("DequantizeLinear", Backend::kCPU, 10, dequantize_supports, make_kernel<FastDequantize>);

}  // namespace twinfer::quant
