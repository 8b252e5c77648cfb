// QuantizeLinear, DequantizeLinear and com.twinfer::QBinary on the GPU: per
// tensor and per axis, 8-bit integers, float32 / float16 / bfloat16 floats.
// The arithmetic is the CPU kernels' (ops/quant/quant_math.h): x / scale in
// float32, rounded half to even, saturated; (q - zero) * scale back. Blocked
// scales, 4-bit and 8-bit float types stay on the CPU (placement says so).
// Scales and zero points are read from the device (they may be computed).
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/elementwise/broadcast_offsets.h"
#include "ops/quant/qbinary.h"
#include "ops/quant/quant_math.h"
#include "ops/quant/quant_util.h"

namespace twinfer::ew {
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);  // broadcast.cc
}

namespace twinfer_gpu {

// The scale index of element i: 0 per tensor, (i / inner) % dim per axis.
struct ScaleIndex {
  int64_t inner = 1, dim = 1;
  bool per_axis = false;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return per_axis ? (i / inner) % dim : 0; }
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

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using quant::Granularity;

int64_t axis_of(const KernelBuildInfo& info) { return info.opset() >= 13 ? info.node().attr_int("axis", 1) : 1; }

bool q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }
bool float_type(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// Per tensor or per axis, with a float32 scale: what the device kernels take.
bool simple_scale(const KernelBuildInfo& info, std::string* why) {
  if (info.opset() >= 21 && info.node().attr_int("block_size", 0) != 0) {
    if (why) *why = "blocked quantization has no CUDA kernel";
    return false;
  }
  if (info.input_dtype(1) != DType::kFloat32) {
    if (why) *why = "the CUDA kernels take a float32 scale";
    return false;
  }
  return true;
}

twinfer_gpu::ScaleIndex scale_index(const KernelBuildInfo& info, size_t x_input) {
  const Granularity g = quant::granularity(info, info.input_shape(x_input), info.input_shape(1), axis_of(info), 0,
                                           "scale");
  twinfer_gpu::ScaleIndex at;
  at.per_axis = g.kind == Granularity::kAxis;
  at.inner = g.inner;
  at.dim = g.dim;
  return at;
}

bool quantize_supports(const KernelBuildInfo& info, std::string* why) {
  if (!simple_scale(info, why)) return false;
  const DType out = info.output(0).dtype;
  if (!q8(out) || !float_type(info.input_dtype(0))) {
    if (why) *why = std::string("the CUDA QuantizeLinear makes int8/uint8 from float32/16, not ") + dtype_name(out);
    return false;
  }
  if (info.has_input(2) && info.input_dtype(2) != out) {
    if (why) *why = "zero point dtype differs from the output dtype";
    return false;
  }
  return true;
}

class QuantizeKernel final : public Kernel {
 public:
  explicit QuantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), out_(info.output(0).dtype), at_(scale_index(info, 0)) {}
  const char* impl_name() const override { return "cuda quantize"; }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const float* scale = ctx.inputs[1].as<const float>();
    const bool u8 = out_ == DType::kUInt8;
    ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt_, [&](auto tag) {
      using X = typename decltype(tag)::type;
      auto go = [&](auto q) {
        using Q = decltype(q);
        const Q* zero = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const Q>() : nullptr;
        twinfer_gpu::quantize<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const X>(), scale, zero, at_,
                                                               u8 ? 0.f : -128.f, u8 ? 255.f : 127.f,
                                                               ctx.outputs[0].as<Q>());
      };
      if (u8) go(uint8_t{});
      else go(int8_t{});
    });
    check_launch("QuantizeLinear launch");
  }

 private:
  DType xt_, out_;
  twinfer_gpu::ScaleIndex at_;
};

bool dequantize_supports(const KernelBuildInfo& info, std::string* why) {
  if (!simple_scale(info, why)) return false;
  if (!q8(info.input_dtype(0)) || !float_type(info.output(0).dtype)) {
    if (why) *why = std::string("the CUDA DequantizeLinear reads int8/uint8, not ") + dtype_name(info.input_dtype(0));
    return false;
  }
  return true;
}

class DequantizeKernel final : public Kernel {
 public:
  explicit DequantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), out_(info.output(0).dtype), at_(scale_index(info, 0)) {}
  const char* impl_name() const override { return "cuda dequantize"; }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const float* scale = ctx.inputs[1].as<const float>();
    ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(out_, [&](auto tag) {
      using Y = typename decltype(tag)::type;
      auto go = [&](auto q) {
        using Q = decltype(q);
        const Q* zero = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const Q>() : nullptr;
        twinfer_gpu::dequantize<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const Q>(), scale, zero, at_,
                                                                 ctx.outputs[0].as<Y>());
      };
      if (xt_ == DType::kUInt8) go(uint8_t{});
      else go(int8_t{});
    });
    check_launch("DequantizeLinear launch");
  }

 private:
  DType xt_, out_;
  twinfer_gpu::ScaleIndex at_;
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
