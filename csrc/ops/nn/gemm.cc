// Gemm (ai.onnx and com.twinfer): shape rule and the reference kernel
// (plain loops, float32/float64). y = act(alpha * A' B' + beta * C), with
// A' = transA ? A^T : A, B' likewise, C unidirectionally broadcast to [M, N].
// The fast path is backends/cpu/onednn_gemm.cc.
#include "core/dispatch.h"
#include "graph/domains.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/nn/matmul.h"
#include "ops/schema.h"

namespace twinfer::nn {

namespace {

void infer_gemm(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (c.has_input(i))
      if (!(c.input_dtype(i) == dt)) c.fail(ErrorKind::kDType, "Gemm inputs differ in dtype");
  if (!(c.num_inputs() <= 3)) c.fail(ErrorKind::kModelFormat, "Gemm takes at most 3 inputs");
  if (n.domain == kTwinferDomain) parse_activation(n);
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) {
    c.set_output(0, dt, SymShape{Dim(), Dim()});
    return;
  }
  const SymShape& a = c.input_shape(0);
  const SymShape& b = c.input_shape(1);
  if (!(a.size() == 2 && b.size() == 2))
    c.fail(ErrorKind::kShape, "Gemm operands must be 2-D, got " + sym_shape_str(a) + " and " + sym_shape_str(b));
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  Dim M = a[ta ? 1 : 0], Ka = a[ta ? 0 : 1], Kb = b[tb ? 1 : 0], N = b[tb ? 0 : 1];
  if (!(!Ka.known() || !Kb.known() || Ka.value == Kb.value))
    c.fail(ErrorKind::kShape,
           "Gemm inner dims differ: " + sym_shape_str(a) + " x " + sym_shape_str(b) + (ta ? " (transA)" : "") +
               (tb ? " (transB)" : ""));
  if (c.has_input(2) && c.input_has_shape(2)) {
    const SymShape& cs = c.input_shape(2);
    if (!(cs.size() <= 2)) c.fail(ErrorKind::kShape, "C must have rank <= 2, got " + sym_shape_str(cs));
    // Unidirectional broadcast: each of C's dims is 1 or equals y's.
    const Dim* yd[2] = {&M, &N};
    for (size_t i = 0; i < cs.size(); ++i) {
      const Dim& want = *yd[2 - cs.size() + i];
      if (!(!cs[i].known() || !want.known() || cs[i].value == 1 || cs[i].value == want.value))
        c.fail(ErrorKind::kShape,
               "C " + sym_shape_str(cs) + " does not broadcast to [" + M.str() + ", " + N.str() + "]");
    }
  }
  c.set_output(0, dt, SymShape{M, N});
}

TWINFER_REGISTER_SCHEMA("Gemm", infer_gemm);
TWINFER_REGISTER_SCHEMA("Gemm", infer_gemm, kTwinferDomain);

class GemmReference final : public Kernel {
 public:
  explicit GemmReference(const KernelBuildInfo& info) : g_(gemm_geom(info)) {
    if (g_.has_c) c2_ = gemm_c_2d(g_.c);
  }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  // 16-bit floats accumulate in float and round once per output element.
  template <typename T>
  void compute(KernelContext& ctx) const {
    using C = ew::compute_t<T>;
    const T* A = ctx.inputs[0].as<T>();
    const T* B = ctx.inputs[1].as<T>();
    const T* Cm = g_.has_c ? ctx.inputs[2].as<T>() : nullptr;
    T* Y = ctx.outputs[0].as<T>();
    const int64_t M = g_.M, K = g_.K, N = g_.N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        C acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          C a = ew::load(g_.trans_a ? A[k * M + m] : A[m * K + k]);
          C b = ew::load(g_.trans_b ? B[n * K + k] : B[k * N + n]);
          acc += a * b;
        }
        C v = C(g_.alpha) * acc;
        if (Cm) v += C(g_.beta) * ew::load(Cm[(c2_[0] == 1 ? 0 : m) * c2_[1] + (c2_[1] == 1 ? 0 : n)]);
        Y[m * N + n] = ew::store<T>(g_.act.apply(v));
      }
  }

  GemmGeom g_;
  Shape c2_;
};

bool reference_supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = std::string("reference Gemm supports float types, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Gemm", Backend::kCPU, 0, reference_supports, make_kernel<GemmReference>);
TWINFER_REGISTER_KERNEL("Gemm", Backend::kCPU, 0, reference_supports, make_kernel<GemmReference>,
                        kTwinferDomain);

}  // namespace

Shape gemm_c_2d(const Shape& c) {
  if (c.empty()) return {1, 1};
  if (c.size() == 1) return {1, c[0]};
  return c;
}

GemmGeom gemm_geom(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  GemmGeom g;
  Shape a = info.input_shape(0), b = info.input_shape(1);
  if (a.size() != 2 || b.size() != 2)
    info.fail(ErrorKind::kShape, "Gemm operands must be 2-D, got " + shape_str(a) + " and " + shape_str(b));
  g.trans_a = n.attr_int("transA", 0) != 0;
  g.trans_b = n.attr_int("transB", 0) != 0;
  g.alpha = n.attr_float("alpha", 1.f);
  g.beta = n.attr_float("beta", 1.f);
  g.M = a[g.trans_a ? 1 : 0];
  g.K = a[g.trans_a ? 0 : 1];
  g.N = b[g.trans_b ? 0 : 1];
  if (b[g.trans_b ? 1 : 0] != g.K)
    info.fail(ErrorKind::kShape, "Gemm inner dims differ: " + shape_str(a) + " x " + shape_str(b));
  if (info.output_shape(0) != Shape{g.M, g.N})
    info.fail(ErrorKind::kShape, "output shape " + shape_str(info.output_shape(0)) + " differs from [" +
                                     std::to_string(g.M) + ", " + std::to_string(g.N) + "]");
  g.has_c = info.has_input(2);
  if (g.has_c) {
    g.c = info.input_shape(2);
    Shape c2 = gemm_c_2d(g.c);
    if (g.c.size() > 2 || (c2[0] != 1 && c2[0] != g.M) || (c2[1] != 1 && c2[1] != g.N))
      info.fail(ErrorKind::kShape, "C " + shape_str(g.c) + " does not broadcast to [" + std::to_string(g.M) +
                                       ", " + std::to_string(g.N) + "]");
  }
  if (n.domain == kTwinferDomain) g.act = parse_activation(n);
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != info.input_dtype(0))
      info.fail(ErrorKind::kDType, "all inputs must have the same dtype");
  return g;
}

}  // namespace twinfer::nn
