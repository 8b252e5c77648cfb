#include "ops/quant/qbinary.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "graph/domains.h"
#include "ops/elementwise/binary_kernel.h"  // plan_for_node
#include "ops/elementwise/broadcast.h"
#include "ops/kernel.h"
#include "ops/quant/quant_util.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

void qbinary_infer(InferContext& c) {
  if (!(c.num_inputs() == kQbNumInputs)) c.fail(ErrorKind::kModelFormat, "QBinary takes 8 inputs");
  const std::string op = c.node().attr_string("op", "");
  if (!(op == "Add" || op == "Mul"))
    c.fail(ErrorKind::kModelFormat, "QBinary op must be Add or Mul, got '" + op + "'");
  const std::string act = c.node().attr_string("activation", "");
  if (!(act.empty() || act == "Relu")) c.fail(ErrorKind::kModelFormat, "QBinary activation must be Relu or none");
  const DType y = c.input_dtype(kQbYZero);
  if (!(is_q8(c.input_dtype(kQbA)) && is_q8(c.input_dtype(kQbB)) && is_q8(y)))
    c.fail(ErrorKind::kDType, "QBinary reads and writes uint8/int8");
  // The kernel reads each scale and zero point as one element of its type.
  for (size_t i : {kQbAScale, kQbBScale, kQbYScale})
    if (!(c.has_input(i) && c.input_dtype(i) == DType::kFloat32 && c.input_known(i) && shape_numel(c.input_values_shape(i)) == 1))
      c.fail(ErrorKind::kModelFormat, "QBinary scales must be float32 with one element");
  const std::pair<size_t, size_t> zeros[] = {{kQbAZero, kQbA}, {kQbBZero, kQbB}, {kQbYZero, kQbYZero}};
  for (auto [z, of] : zeros)
    if (c.has_input(z))
      if (!(c.input_dtype(z) == c.input_dtype(of) && c.input_known(z) && shape_numel(c.input_values_shape(z)) == 1))
        c.fail(ErrorKind::kModelFormat, "QBinary zero points must have one element of their operand's type");
  if (!(c.has_input(kQbYZero)))
    c.fail(ErrorKind::kModelFormat, "QBinary needs y_zero_point (its type is the output's)");
  if (!c.input_has_shape(kQbA) || !c.input_has_shape(kQbB)) return c.set_output_rank_unknown(0, y);
  c.set_output(0, y, broadcast_sym_shapes(c.input_shape(kQbA), c.input_shape(kQbB)));
}

using Params = QBinaryParams;

// One contiguous run of the output: a and b each step by 1 or stay on one
// value (stride 0), the shapes numpy broadcasting leaves after the plan
// merges dims (ops/elementwise/broadcast.h). Six plain loops so each
// vectorises.
template <typename QA, typename QB, typename QY>
inline __attribute__((always_inline)) void run_loop(const QA* a, bool a_step, const QB* b, bool b_step, QY* y,
                                                    int64_t n, bool mul, const Params& p) {
  if (a_step && b_step) {
    if (mul) for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, true>(a[i], b[i], p);
    else for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, false>(a[i], b[i], p);
  } else if (a_step) {
    const QB vb = *b;
    if (mul) for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, true>(a[i], vb, p);
    else for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, false>(a[i], vb, p);
  } else if (b_step) {
    const QA va = *a;
    if (mul) for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, true>(va, b[i], p);
    else for (int64_t i = 0; i < n; ++i) y[i] = qbinary_one<QY, false>(va, b[i], p);
  } else {  // both on one value: one result repeated
    const QY v = mul ? qbinary_one<QY, true>(*a, *b, p) : qbinary_one<QY, false>(*a, *b, p);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

// Built for AVX-512 / AVX2 / baseline (core/simd_clones.h), one per
// combination of integer types: a, b, y (s = int8, u = uint8). A residual
// Add in precision="int8" reads a signed convolution output and an unsigned
// ReLU output and writes unsigned.
#define TWINFER_QBINARY_RUN(name, QA, QB, QY)                                                                 \
  TWINFER_SIMD_CLONES void name(const void* a, bool a_step, const void* b, bool b_step, void* y, int64_t n,   \
                                bool mul, const Params& p) {                                                  \
    run_loop(static_cast<const QA*>(a), a_step, static_cast<const QB*>(b), b_step, static_cast<QY*>(y), n, mul, \
             p);                                                                                              \
  }
TWINFER_QBINARY_RUN(run_uuu, uint8_t, uint8_t, uint8_t)
TWINFER_QBINARY_RUN(run_sss, int8_t, int8_t, int8_t)
TWINFER_QBINARY_RUN(run_suu, int8_t, uint8_t, uint8_t)
TWINFER_QBINARY_RUN(run_usu, uint8_t, int8_t, uint8_t)
TWINFER_QBINARY_RUN(run_sus, int8_t, uint8_t, int8_t)
TWINFER_QBINARY_RUN(run_uss, uint8_t, int8_t, int8_t)
TWINFER_QBINARY_RUN(run_ssu, int8_t, int8_t, uint8_t)
TWINFER_QBINARY_RUN(run_uus, uint8_t, uint8_t, int8_t)
#undef TWINFER_QBINARY_RUN

using RunFn = void (*)(const void*, bool, const void*, bool, void*, int64_t, bool, const Params&);

RunFn run_for(DType a, DType b, DType y) {
  const bool ua = a == DType::kUInt8, ub = b == DType::kUInt8, uy = y == DType::kUInt8;
  static const RunFn table[2][2][2] = {{{run_sss, run_ssu}, {run_sus, run_suu}}, {{run_uss, run_usu}, {run_uus, run_uuu}}};
  return table[ua][ub][uy];
}

class QBinaryKernel final : public Kernel {
 public:
  explicit QBinaryKernel(const KernelBuildInfo& info)
      : mul_(info.node().attr_string("op", "") == "Mul"),
        a_t_(info.input_dtype(kQbA)), b_t_(info.input_dtype(kQbB)), y_t_(info.output(0).dtype),
        plan_(ew::plan_for_node(info, {kQbA, kQbB})), p_(qbinary_params(info)) {
    run_ = run_for(a_t_, b_t_, y_t_);
  }
  const char* impl_name() const override { return "fused dequantize-op-quantize (vectorised)"; }

  void run(KernelContext& ctx) const override {
    const bool a_step = plan_.inner_stride[0] != 0, b_step = plan_.inner_stride[1] != 0;
    const auto* a = static_cast<const uint8_t*>(ctx.inputs[kQbA].data);  // bytes: offsets are in elements of 1 byte
    const auto* b = static_cast<const uint8_t*>(ctx.inputs[kQbB].data);
    auto* y = static_cast<uint8_t*>(ctx.outputs[0].data);
    ew::broadcast_for_each(plan_, ctx.num_threads, 16384, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
      run_(a + off[0], a_step, b + off[1], b_step, y + o, n, mul_, p_);
    });
  }

 private:
  bool mul_;
  RunFn run_ = nullptr;
  DType a_t_, b_t_, y_t_;
  ew::BroadcastPlan plan_;
  Params p_;
};

}  // namespace

QBinaryParams qbinary_params(const KernelBuildInfo& info) {
  auto operand = [&](size_t scale, size_t zero) {
    QOperand o;
    o.scale = *info.input_constant(scale)->data_as<float>();
    if (info.has_input(zero)) load_int32s(info.input_constant(zero)->view(), &o.zero);
    return o;
  };
  QBinaryParams p;
  p.a = operand(kQbAScale, kQbAZero);
  p.b = operand(kQbBScale, kQbBZero);
  const QOperand y = operand(kQbYScale, kQbYZero);
  p.y_scale = y.scale;
  p.y_zero = y.zero;
  if (info.node().attr_string("activation", "") == "Relu") p.floor = 0.f;
  p.offset = info.node().attr_float("offset", 0.f);
  const DType yt = info.output(0).dtype;
  p.lo = static_cast<float>((yt == DType::kUInt8 ? 0 : -128) - y.zero);
  p.hi = static_cast<float>((yt == DType::kUInt8 ? 255 : 127) - y.zero);
  return p;
}

bool qbinary_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {kQbAScale, kQbAZero, kQbBScale, kQbBZero, kQbYScale, kQbYZero})
    if (info.has_input(i) && !info.input_constant(i)) {
      if (why) *why = "QBinary needs constant scales and zero points";
      return false;
    }
  return true;
}

TWINFER_REGISTER_SCHEMA(kQBinaryOp, qbinary_infer, kTwinferDomain);
TWINFER_REGISTER_KERNEL(kQBinaryOp, Backend::kCPU, 10, qbinary_supports, make_kernel<QBinaryKernel>,
                        kTwinferDomain);

}  // namespace twinfer::quant
