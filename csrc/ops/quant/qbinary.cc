#include "ops/quant/qbinary.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backends/cpu/parallel.h"
#include "backends/cpu/simd_clones.h"
#include "core/dispatch.h"
#include "ops/elementwise/binary_kernel.h"  // plan_for_node
#include "ops/elementwise/broadcast.h"
#include "ops/nn/conv.h"  // kTwinferDomain
#include "ops/quant/quant_util.h"
#include "ops/schema.h"
#include "runtime/kernel.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

void qbinary_infer(InferContext& c) {
  c.check(c.num_inputs() == kQbNumInputs, ErrorKind::kModelFormat, "QBinary takes 8 inputs");
  const std::string op = c.node().attr_string("op", "");
  c.check(op == "Add" || op == "Mul", ErrorKind::kModelFormat, "QBinary op must be Add or Mul, got '" + op + "'");
  const DType y = c.input_dtype(kQbYZero);
  c.check(is_q8(c.input_dtype(kQbA)) && is_q8(c.input_dtype(kQbB)) && is_q8(y), ErrorKind::kDType,
          "QBinary reads and writes uint8/int8");
  // The kernel reads each scale and zero point as one element of its type.
  for (size_t i : {kQbAScale, kQbBScale, kQbYScale})
    c.check(c.has_input(i) && c.input_dtype(i) == DType::kFloat32 && c.input_known(i) &&
                shape_numel(c.input_values_shape(i)) == 1,
            ErrorKind::kModelFormat, "QBinary scales must be float32 with one element");
  const std::pair<size_t, size_t> zeros[] = {{kQbAZero, kQbA}, {kQbBZero, kQbB}, {kQbYZero, kQbYZero}};
  for (auto [z, of] : zeros)
    if (c.has_input(z))
      c.check(c.input_dtype(z) == c.input_dtype(of) && c.input_known(z) && shape_numel(c.input_values_shape(z)) == 1,
              ErrorKind::kModelFormat, "QBinary zero points must have one element of their operand's type");
  c.check(c.has_input(kQbYZero), ErrorKind::kModelFormat, "QBinary needs y_zero_point (its type is the output's)");
  if (!c.input_has_shape(kQbA) || !c.input_has_shape(kQbB)) return c.set_output_rank_unknown(0, y);
  c.set_output(0, y, broadcast_sym_shapes(c.input_shape(kQbA), c.input_shape(kQbB)));
}

// One quantized operand: q -> (q - zero) * scale, as DequantizeLinear computes it.
struct Operand {
  float scale = 1.f;
  int32_t zero = 0;
};

struct Params {
  Operand a, b;
  float y_scale = 1.f, lo = 0.f, hi = 0.f;  // lo/hi: y's integer range less its zero point
  int32_t y_zero = 0;
};

// One element, in the QDQ graph's float32 order; 1.5 * 2^23 rounds half to
// even (see quantize_fast.cc). std::min/max (not nested ?:) so it vectorises.
template <typename QA, typename QB, typename QY, bool kMul>
inline __attribute__((always_inline)) QY qbinary_one(QA qa, QB qb, const Params& p) {
  constexpr float kMagic = 12582912.f;
  const float fa = static_cast<float>(static_cast<int32_t>(qa) - p.a.zero) * p.a.scale;
  const float fb = static_cast<float>(static_cast<int32_t>(qb) - p.b.zero) * p.b.scale;
  float v = (kMul ? fa * fb : fa + fb) / p.y_scale;
  v = v == v ? v : 0.f;
  v = std::min(std::max(v, p.lo), p.hi);
  v = (v + kMagic) - kMagic;
  return static_cast<QY>(static_cast<int32_t>(v) + p.y_zero);
}

// One contiguous run of the output: a and b each step by 1 or stay on one
// value (stride 0), the shapes numpy broadcasting leaves after the plan
// merges dims (ops/elementwise/broadcast.h). Six plain loops so each
// vectorises.
template <typename Q>
inline __attribute__((always_inline)) void run_loop(const Q* a, bool a_step, const Q* b, bool b_step, Q* y,
                                                    int64_t n, bool mul, const Params& p) {
  if (a_step && b_step) {
    if (mul) for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, true>(a[i], b[i], p);
    else for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, false>(a[i], b[i], p);
  } else if (a_step) {
    const Q vb = *b;
    if (mul) for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, true>(a[i], vb, p);
    else for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, false>(a[i], vb, p);
  } else {
    const Q va = *a;
    const Q* bb = b_step ? b : nullptr;
    if (!bb) {  // both on one value: one result repeated
      const Q v = mul ? qbinary_one<Q, Q, Q, true>(va, *b, p) : qbinary_one<Q, Q, Q, false>(va, *b, p);
      for (int64_t i = 0; i < n; ++i) y[i] = v;
    } else if (mul) {
      for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, true>(va, bb[i], p);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<Q, Q, Q, false>(va, bb[i], p);
    }
  }
}

// The common case (a, b and y of one integer type), built for AVX-512 /
// AVX2 / baseline (backends/cpu/simd_clones.h).
TWINFER_SIMD_CLONES void run_u8(const uint8_t* a, bool a_step, const uint8_t* b, bool b_step, uint8_t* y, int64_t n,
                                bool mul, const Params& p) {
  run_loop(a, a_step, b, b_step, y, n, mul, p);
}
TWINFER_SIMD_CLONES void run_s8(const int8_t* a, bool a_step, const int8_t* b, bool b_step, int8_t* y, int64_t n,
                                bool mul, const Params& p) {
  run_loop(a, a_step, b, b_step, y, n, mul, p);
}

template <typename QA, typename QB, typename QY, bool kMul>
struct Apply {
  Params p;
  QY operator()(QA qa, QB qb) const { return qbinary_one<QA, QB, QY, kMul>(qa, qb, p); }
};

class QBinaryKernel final : public Kernel {
 public:
  explicit QBinaryKernel(const KernelBuildInfo& info)
      : mul_(info.node().attr_string("op", "") == "Mul"),
        a_t_(info.input_dtype(kQbA)), b_t_(info.input_dtype(kQbB)), y_t_(info.output(0).dtype),
        plan_(ew::plan_for_node(info, {kQbA, kQbB})) {
    p_.a = operand(info, kQbAScale, kQbAZero);
    p_.b = operand(info, kQbBScale, kQbBZero);
    const Operand y = operand(info, kQbYScale, kQbYZero);
    p_.y_scale = y.scale;
    p_.y_zero = y.zero;
    p_.lo = static_cast<float>((y_t_ == DType::kUInt8 ? 0 : -128) - y.zero);
    p_.hi = static_cast<float>((y_t_ == DType::kUInt8 ? 255 : 127) - y.zero);
    one_type_ = a_t_ == b_t_ && b_t_ == y_t_;
  }
  const char* impl_name() const override {
    return one_type_ ? "fused dequantize-op-quantize (vectorised)" : "fused dequantize-op-quantize (mixed types)";
  }

  void run(KernelContext& ctx) const override {
    if (one_type_) {
      const bool a_step = plan_.inner_stride[0] != 0, b_step = plan_.inner_stride[1] != 0;
      const bool u8 = y_t_ == DType::kUInt8;
      const auto* a = static_cast<const uint8_t*>(ctx.inputs[kQbA].data);
      const auto* b = static_cast<const uint8_t*>(ctx.inputs[kQbB].data);
      auto* y = static_cast<uint8_t*>(ctx.outputs[0].data);
      ew::broadcast_for_each(plan_, ctx.num_threads, 16384,
                             [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
                               if (u8)
                                 run_u8(a + off[0], a_step, b + off[1], b_step, y + o, n, mul_, p_);
                               else
                                 run_s8(reinterpret_cast<const int8_t*>(a) + off[0], a_step,
                                        reinterpret_cast<const int8_t*>(b) + off[1], b_step,
                                        reinterpret_cast<int8_t*>(y) + o, n, mul_, p_);
                             });
      return;
    }
    dispatch_q8(a_t_, [&](auto a_tag) {
      dispatch_q8(b_t_, [&](auto b_tag) {
        dispatch_q8(y_t_, [&](auto y_tag) {
          using QA = typename decltype(a_tag)::type;
          using QB = typename decltype(b_tag)::type;
          using QY = typename decltype(y_tag)::type;
          const QA* a = ctx.inputs[kQbA].as<const QA>();
          const QB* b = ctx.inputs[kQbB].as<const QB>();
          QY* y = ctx.outputs[0].as<QY>();
          if (mul_)
            ew::broadcast_apply2(plan_, a, b, y, Apply<QA, QB, QY, true>{p_}, ctx.num_threads, 16384);
          else
            ew::broadcast_apply2(plan_, a, b, y, Apply<QA, QB, QY, false>{p_}, ctx.num_threads, 16384);
        });
      });
    });
  }

 private:
  template <typename F>
  static void dispatch_q8(DType t, F&& f) {
    if (t == DType::kUInt8) f(TypeTag<uint8_t>{});
    else f(TypeTag<int8_t>{});
  }
  static Operand operand(const KernelBuildInfo& info, size_t scale, size_t zero) {
    Operand o;
    o.scale = *info.input_constant(scale)->data_as<float>();
    if (info.has_input(zero)) load_int32s(info.input_constant(zero)->view(), &o.zero);
    return o;
  }

  bool mul_, one_type_ = false;
  DType a_t_, b_t_, y_t_;
  ew::BroadcastPlan plan_;
  Params p_;
};

bool qbinary_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {kQbAScale, kQbAZero, kQbBScale, kQbBZero, kQbYScale, kQbYZero})
    if (info.has_input(i) && !info.input_constant(i)) {
      if (why) *why = "QBinary needs constant scales and zero points";
      return false;
    }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA(kQBinaryOp, qbinary_infer, nn::kTwinferDomain);
TWINFER_REGISTER_KERNEL(kQBinaryOp, Backend::kCPU, 10, qbinary_supports, make_kernel<QBinaryKernel>,
                        nn::kTwinferDomain);

}  // namespace twinfer::quant
