// QuantizeLinear, DequantizeLinear and com.twinfer::QBinary on the GPU.
// The arithmetic is the CPU kernels' (ops/quant/quantize_linear.cc,
// quant_math.h). Two kernels per op:
//  - the int8/uint8 one (float32 scale, per tensor / per axis, float32
//    division): x / scale in float32, rounded half to even, saturated;
//    (q - zero) * scale back;
//  - the general one: every quantized type the CPU takes (int8/uint8/int16/
//    uint16, int4/uint4/int2/uint2 and FLOAT4E2M1 one per byte, the four
//    8-bit floats with `saturate`; DequantizeLinear also int32), float32 /
//    float16 / bfloat16 scales (and float8e8m0 for DequantizeLinear), per
//    tensor, per axis or blocked, the `precision` division of opset 23.
//    Conversions are core/float8.h and core/subbyte.h's, as cast.cu uses.
// Scales and zero points are read from the device (they may be computed);
// a nonzero zero point of a float type (an error on the CPU) sets the kernel
// error flag (kFloatZeroPoint, error_flag.h).
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "core/float8.h"
#include "core/subbyte.h"
#include "graph/domains.h"
#include "ops/elementwise/broadcast_offsets.h"
#include "ops/quant/qbinary.h"
#include "ops/quant/quant_math.h"
#include "ops/quant/quant_util.h"

namespace twinfer::ew {
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);  // broadcast.cc
}

namespace twinfer_gpu {

// The scale index of element i: 0 per tensor, (i / inner) % dim per axis,
// (o * nblocks + d / block) * inner + i' blocked (ops/quant/quant_util.h).
struct ScaleIndex {
  int64_t inner = 1, dim = 1, block = 1, nblocks = 1;
  bool per_axis = false, blocked = false;
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    if (!per_axis && !blocked) return 0;
    const int64_t row = i / inner, d = row % dim;
    if (!blocked) return d;
    return ((row / dim) * nblocks + d / block) * inner + (i - row * inner);
  }
};

template <typename X, typename Q>
__global__ void quantize(int64_t n, const X* __restrict__ x, const float* __restrict__ scale,
                         const Q* __restrict__ zero, ScaleIndex at, float type_lo, float type_hi, Q* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = at(i);
    const int32_t z = zero ? static_cast<int32_t>(zero[s]) : 0;
    const float v = static_cast<float>(twinfer::ew::load(x[i]));
    y[i] = static_cast<Q>(twinfer::quant::requantize(v, scale[s], type_lo - z, type_hi - z, z));
  }
}

template <typename Q, typename Y>
__global__ void dequantize(int64_t n, const Q* __restrict__ x, const float* __restrict__ scale,
                           const Q* __restrict__ zero, ScaleIndex at, Y* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = at(i);
    const int32_t z = zero ? static_cast<int32_t>(zero[s]) : 0;
    y[i] = twinfer::ew::store<Y>(static_cast<float>(static_cast<int32_t>(x[i]) - z) * scale[s]);
  }
}

// Per tensor over contiguous x (every graph's activations): the scale and
// zero point read once per thread, then Packs of elements (flat_map: 4 int8
// in, 16 bytes of float out), the same arithmetic as the kernels above.
template <typename X, typename Q>
struct QuantizeOne {
  float scale, lo, hi;
  int32_t zero;
  __device__ __forceinline__ Q operator()(X v) const {
    return static_cast<Q>(twinfer::quant::requantize(static_cast<float>(twinfer::ew::load(v)), scale, lo, hi, zero));
  }
};

template <typename Q, typename Y>
struct DequantizeOne {
  float scale;
  int32_t zero;
  __device__ __forceinline__ Y operator()(Q v) const {
    return twinfer::ew::store<Y>(static_cast<float>(static_cast<int32_t>(v) - zero) * scale);
  }
};

template <typename X, typename Q>
__global__ void quantize_per_tensor(int64_t n, const X* __restrict__ x, const float* __restrict__ scale,
                                    const Q* __restrict__ zero, float type_lo, float type_hi, Q* __restrict__ y) {
  const int32_t z = zero ? static_cast<int32_t>(zero[0]) : 0;
  flat_map(n, x, y, QuantizeOne<X, Q>{scale[0], type_lo - z, type_hi - z, z});
}

template <typename Q, typename Y>
__global__ void dequantize_per_tensor(int64_t n, const Q* __restrict__ x, const float* __restrict__ scale,
                                      const Q* __restrict__ zero, Y* __restrict__ y) {
  flat_map(n, x, y, DequantizeOne<Q, Y>{scale[0], zero ? static_cast<int32_t>(zero[0]) : 0});
}

// ---- the general kernels ----------------------------------------------------------

// A scale of float32 (0), float16 (1), bfloat16 (2) or float8e8m0 (3), as float.
__device__ __forceinline__ float scale_value(const void* p, int code, int64_t i) {
  switch (code) {
    case 0: return static_cast<const float*>(p)[i];
    case 1: return twinfer::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case 2: return twinfer::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return twinfer::e8m0_to_float(static_cast<const uint8_t*>(p)[i]);
  }
}

// A quantized element type: how its bytes read and how a value encodes.
struct QCode {
  enum Kind : int { kI8, kU8, kI16, kU16, kI32, kSubInt, kFloat8, kFloat4 } kind = kI8;
  int bits = 8;
  bool is_signed = true;                 // kSubInt
  int64_t lo = 0, hi = 0;                // integer range (kI8 .. kSubInt)
  twinfer::Float8Format fmt{};           // kFloat8
  bool saturate = true;                  // kFloat8

  __device__ __forceinline__ bool is_float() const { return kind == kFloat8 || kind == kFloat4; }
  // Element i of an integer-kind buffer as int32.
  __device__ __forceinline__ int32_t int_at(const void* p, int64_t i) const {
    switch (kind) {
      case kI8: return static_cast<const int8_t*>(p)[i];
      case kU8: return static_cast<const uint8_t*>(p)[i];
      case kI16: return static_cast<const int16_t*>(p)[i];
      case kU16: return static_cast<const uint16_t*>(p)[i];
      case kI32: return static_cast<const int32_t*>(p)[i];
      default: {
        const uint32_t b = static_cast<const uint8_t*>(p)[i];
        const uint32_t mask = (1u << bits) - 1u, v = b & mask;
        return is_signed && (v >> (bits - 1)) ? static_cast<int32_t>(v) - (1 << bits) : static_cast<int32_t>(v);
      }
    }
  }
  // Element i of a float-kind buffer as float (exact).
  __device__ __forceinline__ float float_at(const void* p, int64_t i) const {
    const uint8_t b = static_cast<const uint8_t*>(p)[i];
    return kind == kFloat4 ? twinfer::float4_e2m1_value(b) : twinfer::float8_to_float(b, fmt);
  }
  // The zero point at scale index s (nullptr: 0); a float type's must be 0.
  __device__ __forceinline__ int32_t zero_at(const void* z, int64_t s, int* error) const {
    if (!z) return 0;
    if (is_float()) {
      if (float_at(z, s) != 0.f) *error = twinfer::cuda::kFloatZeroPoint;
      return 0;
    }
    return int_at(z, s);
  }
};

// x / scale as the CPU's QuantizeKernel::divide: in float64 (prec 3), else
// both operands and the quotient rounded to the precision (0 float32,
// 1 float16, 2 bfloat16).
__device__ __forceinline__ float round_prec(int prec, float v) {
  if (prec == 1) return twinfer::half_to_float(twinfer::float_to_half(v));
  if (prec == 2) return twinfer::bf16_to_float(twinfer::float_to_bf16(v));
  return v;
}
__device__ __forceinline__ double divide(int prec, float x, float s) {
  if (prec == 3) return __ddiv_rn(static_cast<double>(x), static_cast<double>(s));
  return round_prec(prec, __fdiv_rn(round_prec(prec, x), round_prec(prec, s)));
}

template <typename X>
__global__ void quantize_any(int64_t n, const X* __restrict__ x, const void* scale, int scale_code, const void* zero,
                             ScaleIndex at, int prec, QCode q, void* y, int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = at(i);
    const double v = divide(prec, static_cast<float>(twinfer::ew::load(x[i])), scale_value(scale, scale_code, s));
    uint8_t* yb = static_cast<uint8_t*>(y);
    if (q.kind == QCode::kFloat8) {
      q.zero_at(zero, s, error);
      yb[i] = twinfer::float_to_float8(v, q.fmt, q.saturate);
    } else if (q.kind == QCode::kFloat4) {
      q.zero_at(zero, s, error);
      yb[i] = twinfer::float_to_float4_e2m1(v);
    } else {
      double r = rint(v);  // half to even
      r = r != r ? 0.0 : fmin(fmax(r, -4294967296.0), 4294967296.0);
      int64_t w = static_cast<int64_t>(r) + q.zero_at(zero, s, error);
      w = w < q.lo ? q.lo : (w > q.hi ? q.hi : w);
      switch (q.kind) {
        case QCode::kI8: static_cast<int8_t*>(y)[i] = static_cast<int8_t>(w); break;
        case QCode::kU8: yb[i] = static_cast<uint8_t>(w); break;
        case QCode::kI16: static_cast<int16_t*>(y)[i] = static_cast<int16_t>(w); break;
        case QCode::kU16: static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(w); break;
        default: yb[i] = twinfer::wrap_subbyte(w, q.bits); break;
      }
    }
  }
}

template <typename Y>
__global__ void dequantize_any(int64_t n, const void* x, QCode q, const void* scale, int scale_code, const void* zero,
                               ScaleIndex at, Y* __restrict__ y, int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = at(i);
    const float sc = scale_value(scale, scale_code, s);
    float v;
    if (q.is_float()) {
      q.zero_at(zero, s, error);
      v = __fmul_rn(q.float_at(x, i), sc);
    } else if (q.kind == QCode::kI32) {
      // As the CPU (the reference): float32(x) - zp in float64, times the scale.
      const double d = __dsub_rn(static_cast<double>(static_cast<float>(q.int_at(x, i))),
                                 static_cast<double>(q.zero_at(zero, s, error)));
      v = static_cast<float>(__dmul_rn(d, static_cast<double>(sc)));
    } else {
      v = __fmul_rn(static_cast<float>(q.int_at(x, i) - q.zero_at(zero, s, error)), sc);
    }
    y[i] = twinfer::ew::store<Y>(v);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using quant::Granularity;

int64_t axis_of(const KernelBuildInfo& info) { return info.opset() >= 13 ? info.node().attr_int("axis", 1) : 1; }
int64_t block_of(const KernelBuildInfo& info) {
  return info.opset() >= 21 ? info.node().attr_int("block_size", 0) : 0;
}

bool q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }
bool float_type(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// 0 float32, 1 float16, 2 bfloat16, 3 float8e8m0, -1 other.
int scale_code(DType t) {
  switch (t) {
    case DType::kFloat32: return 0;
    case DType::kFloat16: return 1;
    case DType::kBFloat16: return 2;
    case DType::kFloat8E8M0: return 3;
    default: return -1;
  }
}

// The quantized types the general kernels read / write (int32: `with_int32`).
bool qcode_of(DType t, bool with_int32, twinfer_gpu::QCode* q) {
  using twinfer_gpu::QCode;
  int64_t lo = 0, hi = 0;
  switch (t) {
    case DType::kInt8: q->kind = QCode::kI8; break;
    case DType::kUInt8: q->kind = QCode::kU8; break;
    case DType::kInt16: q->kind = QCode::kI16; break;
    case DType::kUInt16: q->kind = QCode::kU16; break;
    case DType::kInt32:
      if (!with_int32) return false;
      q->kind = QCode::kI32;
      break;
    case DType::kInt4: case DType::kUInt4: case DType::kInt2: case DType::kUInt2:
      q->kind = QCode::kSubInt;
      q->bits = dtype_bits(t);
      q->is_signed = t == DType::kInt4 || t == DType::kInt2;
      q->lo = q->is_signed ? -(int64_t(1) << (q->bits - 1)) : 0;
      q->hi = q->is_signed ? (int64_t(1) << (q->bits - 1)) - 1 : (int64_t(1) << q->bits) - 1;
      return true;
    case DType::kFloat4E2M1: q->kind = QCode::kFloat4; return true;
    case DType::kFloat8E4M3FN: q->kind = QCode::kFloat8; q->fmt = Float8Traits<float8_e4m3fn_t>::fmt(); return true;
    case DType::kFloat8E4M3FNUZ:
      q->kind = QCode::kFloat8;
      q->fmt = Float8Traits<float8_e4m3fnuz_t>::fmt();
      return true;
    case DType::kFloat8E5M2: q->kind = QCode::kFloat8; q->fmt = Float8Traits<float8_e5m2_t>::fmt(); return true;
    case DType::kFloat8E5M2FNUZ:
      q->kind = QCode::kFloat8;
      q->fmt = Float8Traits<float8_e5m2fnuz_t>::fmt();
      return true;
    default: return false;
  }
  quant::quant_int_range(t, &lo, &hi);
  q->lo = lo;
  q->hi = hi;
  return true;
}

twinfer_gpu::ScaleIndex scale_index(const KernelBuildInfo& info, size_t x_input) {
  const Granularity g = quant::granularity(info, info.input_shape(x_input), info.input_shape(1), axis_of(info),
                                           block_of(info), "scale");
  twinfer_gpu::ScaleIndex at;
  at.per_axis = g.kind == Granularity::kAxis;
  at.blocked = g.kind == Granularity::kBlocked;
  at.inner = g.inner;
  at.dim = g.dim;
  at.block = g.block > 0 ? g.block : 1;
  at.nblocks = g.nblocks;
  return at;
}

// The CPU's division precision (QuantizeKernel): 0 float32, 1 float16,
// 2 bfloat16, 3 float64; -1 when not one of these.
int quantize_precision(const KernelBuildInfo& info) {
  const int64_t p = info.opset() >= 23 ? info.node().attr_int("precision", 0) : 0;
  const DType xt = info.input_dtype(0), st = info.input_dtype(1);
  const DType d = p != 0 ? dtype_from_onnx(static_cast<int32_t>(p)) : (xt == st ? xt : DType::kFloat32);
  switch (d) {
    case DType::kFloat32: return 0;
    case DType::kFloat16: return 1;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 3;
    default: return -1;
  }
}

// The int8/uint8 kernels: float32 scale, per tensor / per axis, float32 division.
bool quantize_int8_path(const KernelBuildInfo& info) {
  return q8(info.output(0).dtype) && info.input_dtype(1) == DType::kFloat32 && block_of(info) == 0 &&
         quantize_precision(info) == 0;
}
bool dequantize_int8_path(const KernelBuildInfo& info) {
  return q8(info.input_dtype(0)) && info.input_dtype(1) == DType::kFloat32 && block_of(info) == 0;
}

bool quantize_supports(const KernelBuildInfo& info, std::string* why) {
  const DType out = info.output(0).dtype, xt = info.input_dtype(0), st = info.input_dtype(1);
  twinfer_gpu::QCode q;
  if (!float_type(xt)) {
    if (why) *why = std::string("the CUDA QuantizeLinear reads float32/float16/bfloat16, not ") + dtype_name(xt);
    return false;
  }
  if (!float_type(st)) {
    if (why) *why = std::string("the CUDA QuantizeLinear takes a float32/float16/bfloat16 scale, not ") + dtype_name(st);
    return false;
  }
  if (!qcode_of(out, false, &q)) {
    if (why) *why = std::string("the CUDA QuantizeLinear does not make ") + dtype_name(out);
    return false;
  }
  if (quantize_precision(info) < 0) {
    if (why) *why = "the CUDA QuantizeLinear divides in float32/float16/bfloat16/float64 only";
    return false;
  }
  if (info.has_input(2) && info.input_dtype(2) != out) {
    if (why) *why = "zero point dtype differs from the output dtype";
    return false;
  }
  return true;
}

const void* optional_input(const KernelContext& ctx, size_t i) {
  return ctx.inputs.size() > i && ctx.inputs[i].data ? ctx.inputs[i].data : nullptr;
}

class QuantizeKernel final : public Kernel {
 public:
  explicit QuantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), out_(info.output(0).dtype), at_(scale_index(info, 0)),
        int8_(quantize_int8_path(info)), scale_code_(scale_code(info.input_dtype(1))),
        prec_(quantize_precision(info)) {
    if (info.has_input(2)) quant::check_zero_point(info, info.input_shape(1), info.input_shape(2), "y_scale");
    qcode_of(out_, false, &q_);
    q_.saturate = info.opset() >= 19 ? info.node().attr_int("saturate", 1) != 0 : true;
  }
  const char* impl_name() const override { return int8_ ? "cuda quantize" : "cuda quantize (any type)"; }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (!int8_) {
      int* error = kernel_error_flag(ctx.backend_state);
      ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt_, [&](auto tag) {
        using X = typename decltype(tag)::type;
        twinfer_gpu::quantize_any<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const X>(),
                                                                   ctx.inputs[1].data, scale_code_,
                                                                   optional_input(ctx, 2), at_, prec_, q_,
                                                                   ctx.outputs[0].data, error);
      });
      check_launch("QuantizeLinear launch");
      return;
    }
    const float* scale = ctx.inputs[1].as<const float>();
    const bool u8 = out_ == DType::kUInt8;
    ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt_, [&](auto tag) {
      using X = typename decltype(tag)::type;
      auto go = [&](auto q) {
        using Q = decltype(q);
        const Q* zero = static_cast<const Q*>(optional_input(ctx, 2));
        const float lo = u8 ? 0.f : -128.f, hi = u8 ? 255.f : 127.f;
        if (per_tensor())
          twinfer_gpu::quantize_per_tensor<<<twinfer_gpu::flat_grid<X, Q>(lc), lc.threads, 0, s>>>(
              n, ctx.inputs[0].as<const X>(), scale, zero, lo, hi, ctx.outputs[0].as<Q>());
        else
          twinfer_gpu::quantize<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const X>(), scale, zero, at_, lo,
                                                                 hi, ctx.outputs[0].as<Q>());
      };
      if (u8) go(uint8_t{});
      else go(int8_t{});
    });
    check_launch("QuantizeLinear launch");
  }

 private:
  bool per_tensor() const { return !at_.per_axis && !at_.blocked; }

  DType xt_, out_;
  twinfer_gpu::ScaleIndex at_;
  bool int8_;
  int scale_code_, prec_;
  twinfer_gpu::QCode q_;
};

bool dequantize_supports(const KernelBuildInfo& info, std::string* why) {
  const DType xt = info.input_dtype(0), st = info.input_dtype(1), out = info.output(0).dtype;
  twinfer_gpu::QCode q;
  if (!qcode_of(xt, true, &q)) {
    if (why) *why = std::string("the CUDA DequantizeLinear does not read ") + dtype_name(xt);
    return false;
  }
  if (scale_code(st) < 0) {
    if (why) *why = std::string("the CUDA DequantizeLinear takes a float32/float16/bfloat16/float8e8m0 scale, not ") +
                    dtype_name(st);
    return false;
  }
  if (!float_type(out)) {
    if (why) *why = std::string("the CUDA DequantizeLinear makes float32/float16/bfloat16, not ") + dtype_name(out);
    return false;
  }
  return true;
}

class DequantizeKernel final : public Kernel {
 public:
  explicit DequantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), out_(info.output(0).dtype), at_(scale_index(info, 0)),
        int8_(dequantize_int8_path(info)), scale_code_(scale_code(info.input_dtype(1))) {
    if (info.has_input(2)) quant::check_zero_point(info, info.input_shape(1), info.input_shape(2), "x_scale");
    qcode_of(xt_, true, &q_);
  }
  const char* impl_name() const override { return int8_ ? "cuda dequantize" : "cuda dequantize (any type)"; }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (!int8_) {
      int* error = kernel_error_flag(ctx.backend_state);
      ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(out_, [&](auto tag) {
        using Y = typename decltype(tag)::type;
        twinfer_gpu::dequantize_any<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].data, q_, ctx.inputs[1].data,
                                                                     scale_code_, optional_input(ctx, 2), at_,
                                                                     ctx.outputs[0].as<Y>(), error);
      });
      check_launch("DequantizeLinear launch");
      return;
    }
    const float* scale = ctx.inputs[1].as<const float>();
    ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(out_, [&](auto tag) {
      using Y = typename decltype(tag)::type;
      auto go = [&](auto q) {
        using Q = decltype(q);
        const Q* zero = static_cast<const Q*>(optional_input(ctx, 2));
        if (per_tensor())
          twinfer_gpu::dequantize_per_tensor<<<twinfer_gpu::flat_grid<Q, Y>(lc), lc.threads, 0, s>>>(
              n, ctx.inputs[0].as<const Q>(), scale, zero, ctx.outputs[0].as<Y>());
        else
          twinfer_gpu::dequantize<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const Q>(), scale, zero, at_,
                                                                   ctx.outputs[0].as<Y>());
      };
      if (xt_ == DType::kUInt8) go(uint8_t{});
      else go(int8_t{});
    });
    check_launch("DequantizeLinear launch");
  }

 private:
  bool per_tensor() const { return !at_.per_axis && !at_.blocked; }

  DType xt_, out_;
  twinfer_gpu::ScaleIndex at_;
  bool int8_;
  int scale_code_;
  twinfer_gpu::QCode q_;
};

// ---- QBinary ------------------------------------------------------------------

template <typename QY, bool kMul>
struct QBinaryFn {
  quant::QBinaryParams p;
  template <typename QA, typename QB>
  TWINFER_HD QY operator()(QA a, QB b) const {
    return quant::qbinary_one<QY, kMul>(a, b, p);
  }
};

class QBinaryKernel final : public Kernel {
 public:
  explicit QBinaryKernel(const KernelBuildInfo& info)
      : mul_(info.node().attr_string("op", "") == "Mul"), a_t_(info.input_dtype(quant::kQbA)),
        b_t_(info.input_dtype(quant::kQbB)), y_t_(info.output(0).dtype), p_(quant::qbinary_params(info)) {
    const Shape out = info.output_shape(0);
    n_ = shape_numel(out);
    flat_ = info.input_shape(quant::kQbA) == out && info.input_shape(quant::kQbB) == out;
    calc_ = ew::offset_calc_for<2>(ew::plan_for_node(info, {quant::kQbA, quant::kQbB}));
  }
  const char* impl_name() const override { return "cuda dequantize-op-quantize"; }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    auto with = [&](auto a_tag, auto b_tag, auto y_tag) {
      using A = decltype(a_tag);
      using B = decltype(b_tag);
      using Y = decltype(y_tag);
      const A* a = ctx.inputs[quant::kQbA].as<const A>();
      const B* b = ctx.inputs[quant::kQbB].as<const B>();
      Y* y = ctx.outputs[0].as<Y>();
      auto launch = [&](auto f) {
        if (flat_) twinfer_gpu::binary_flat<<<twinfer_gpu::flat_grid<A, B, Y>(lc), lc.threads, 0, s>>>(n_, a, b, y, f);
        else twinfer_gpu::binary_bcast<<<lc.blocks, lc.threads, 0, s>>>(n_, calc_, a, b, y, f);
      };
      if (mul_) launch(QBinaryFn<Y, true>{p_});
      else launch(QBinaryFn<Y, false>{p_});
    };
    auto by_y = [&](auto a, auto b) {
      if (y_t_ == DType::kUInt8) with(a, b, uint8_t{});
      else with(a, b, int8_t{});
    };
    auto by_b = [&](auto a) {
      if (b_t_ == DType::kUInt8) by_y(a, uint8_t{});
      else by_y(a, int8_t{});
    };
    if (a_t_ == DType::kUInt8) by_b(uint8_t{});
    else by_b(int8_t{});
    check_launch("QBinary launch");
  }

 private:
  bool mul_;
  DType a_t_, b_t_, y_t_;
  quant::QBinaryParams p_;
  int64_t n_ = 0;
  bool flat_ = false;
  ew::OffsetCalc<2> calc_;
};

bool qbinary_supports(const KernelBuildInfo& info, std::string* why) {
  if (!quant::qbinary_supports(info, why)) return false;
  if (ew::offset_calc_fits(ew::plan_for_node(info, {quant::kQbA, quant::kQbB}))) return true;
  if (why) *why = "a broadcast of more than " + std::to_string(ew::kMaxOffsetDims) + " dims has no CUDA kernel";
  return false;
}

}  // namespace

TWINFER_REGISTER_KERNEL("QuantizeLinear", Backend::kCUDA, 0, quantize_supports, make_kernel<QuantizeKernel>);
TWINFER_REGISTER_KERNEL("DequantizeLinear", Backend::kCUDA, 0, dequantize_supports, make_kernel<DequantizeKernel>);
TWINFER_REGISTER_KERNEL(quant::kQBinaryOp, Backend::kCUDA, 10, qbinary_supports, make_kernel<QBinaryKernel>,
                        kTwinferDomain);

}  // namespace twinfer::cuda
