// MatMul (ai.onnx and com.twinfer): shape rule and the reference kernel
// (plain loops, float32/float64). The fast path is
// backends/cpu/onednn_matmul.cc.
#include "ops/nn/matmul.h"

#include <vector>

#include "core/dispatch.h"
#include "graph/domains.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/schema.h"

namespace twinfer::nn {

namespace {

void infer_matmul(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(c.input_dtype(1) == dt))
    c.fail(ErrorKind::kDType,
           std::string("MatMul operands differ in dtype: ") + dtype_name(dt) + " and " + dtype_name(c.input_dtype(1)));
  const bool fused = n.domain == kTwinferDomain;
  if (fused) {
    parse_activation(n);
    if (!(c.num_inputs() <= 4)) c.fail(ErrorKind::kModelFormat, "com.twinfer MatMul takes at most 4 inputs");
    for (size_t i : {size_t(2), size_t(3)})
      if (c.has_input(i))
        if (!(c.input_dtype(i) == dt))
          c.fail(ErrorKind::kDType,
                 std::string(i == 2 ? "bias" : "residual") + " dtype differs from the input dtype");
  } else {
    if (!(c.num_inputs() == 2)) c.fail(ErrorKind::kModelFormat, "MatMul takes 2 inputs");
  }
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) {
    c.set_output_rank_unknown(0, dt);
    return;
  }
  SymShape a = c.input_shape(0), b = c.input_shape(1);
  if (!(!a.empty() && !b.empty())) c.fail(ErrorKind::kShape, "MatMul operands must have rank >= 1");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), Dim(1));
  if (b1) b.push_back(Dim(1));
  const Dim& ka = a[a.size() - 1];
  const Dim& kb = b[b.size() - 2];
  if (!(!ka.known() || !kb.known() || ka.value == kb.value))
    c.fail(ErrorKind::kShape,
           "MatMul inner dims differ: " + sym_shape_str(c.input_shape(0)) + " x " + sym_shape_str(c.input_shape(1)));
  SymShape y;
  try {
    y = broadcast_sym_shapes(SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2));
  } catch (const Error& e) {
    c.fail(ErrorKind::kShape, e.what());
  }
  if (!a1) y.push_back(a[a.size() - 2]);
  if (!b1) y.push_back(b.back());
  if (fused && c.has_input(2) && c.input_has_shape(2)) {
    const SymShape& bs = c.input_shape(2);
    const Dim& nd = b.back();
    if (!(bs.size() == 1 && (!bs[0].known() || !nd.known() || bs[0].value == nd.value)))
      c.fail(ErrorKind::kShape, "bias must have shape [N] = [" + nd.str() + "], got " + sym_shape_str(bs));
  }
  if (fused && c.has_input(3) && c.input_has_shape(3)) {
    const SymShape& rs = c.input_shape(3);
    bool same = rs.size() == y.size();
    for (size_t d = 0; same && d < y.size(); ++d) same = !rs[d].known() || !y[d].known() || rs[d].value == y[d].value;
    if (!(same))
      c.fail(ErrorKind::kShape,
             "residual must have the output's shape " + sym_shape_str(y) + ", got " + sym_shape_str(rs));
  }
  c.set_output(0, dt, y);
}

TWINFER_REGISTER_SCHEMA("MatMul", infer_matmul);
TWINFER_REGISTER_SCHEMA("MatMul", infer_matmul, kTwinferDomain);

class MatMulReference final : public Kernel {
 public:
  explicit MatMulReference(const KernelBuildInfo& info) : g_(matmul_geom(info)) {}

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
    const T* bias = g_.has_bias ? ctx.inputs[2].as<T>() : nullptr;
    const T* R = g_.has_residual ? ctx.inputs[3].as<T>() : nullptr;
    T* Y = ctx.outputs[0].as<T>();
    const size_t r = g_.y_batch.size();
    const Shape as = contiguous_strides(g_.a_batch), bs = contiguous_strides(g_.b_batch);
    const int64_t nb = shape_numel(g_.y_batch);
    const int64_t M = g_.M, K = g_.K, N = g_.N;
    std::vector<C> acc(static_cast<size_t>(N));
    for (int64_t bi = 0; bi < nb; ++bi) {
      // Map the output batch index to A's and B's (broadcast dims stay 0).
      int64_t rem = bi, ao = 0, bo = 0;
      for (size_t d = r; d-- > 0;) {
        int64_t idx = rem % g_.y_batch[d];
        rem /= g_.y_batch[d];
        if (g_.a_batch[d] != 1) ao += idx * as[d];
        if (g_.b_batch[d] != 1) bo += idx * bs[d];
      }
      const T* a = A + ao * M * K;
      const T* b = B + bo * K * N;
      T* y = Y + bi * M * N;
      const T* res = R ? R + bi * M * N : nullptr;
      for (int64_t m = 0; m < M; ++m) {
        // Row of y accumulated over k (B read row by row, not column by column).
        for (int64_t nn = 0; nn < N; ++nn) acc[nn] = bias ? ew::load(bias[nn]) : C(0);
        for (int64_t k = 0; k < K; ++k) {
          const C av = ew::load(a[m * K + k]);
          const T* brow = b + k * N;
          for (int64_t nn = 0; nn < N; ++nn) acc[nn] += av * ew::load(brow[nn]);
        }
        if (res)
          for (int64_t nn = 0; nn < N; ++nn) acc[nn] += ew::load(res[m * N + nn]);
        for (int64_t nn = 0; nn < N; ++nn) y[m * N + nn] = ew::store<T>(g_.act.apply(acc[nn]));
      }
    }
  }

  MatMulGeom g_;
};

bool reference_supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = std::string("reference MatMul supports float types, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("MatMul", Backend::kCPU, 0, reference_supports, make_kernel<MatMulReference>);
TWINFER_REGISTER_KERNEL("MatMul", Backend::kCPU, 0, reference_supports, make_kernel<MatMulReference>,
                        kTwinferDomain);

}  // namespace

MatMulGeom matmul_geom(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  MatMulGeom g;
  g.a = info.input_shape(0);
  g.b = info.input_shape(1);
  if (g.a.empty() || g.b.empty()) info.fail(ErrorKind::kShape, "MatMul operands must have rank >= 1");
  Shape a = g.a, b = g.b;
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  g.M = a[a.size() - 2];
  g.K = a.back();
  g.N = b.back();
  if (b[b.size() - 2] != g.K)
    info.fail(ErrorKind::kShape, "MatMul inner dims differ: " + shape_str(g.a) + " x " + shape_str(g.b));
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  try {
    g.y_batch = broadcast_shapes(ab, bb);
  } catch (const Error& e) {
    info.fail(ErrorKind::kShape, e.what());
  }
  const size_t r = g.y_batch.size();
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  g.a_batch = ab;
  g.b_batch = bb;
  g.y = g.y_batch;
  if (!a1) g.y.push_back(g.M);
  if (!b1) g.y.push_back(g.N);
  if (info.output_shape(0) != g.y)
    info.fail(ErrorKind::kShape, "output shape " + shape_str(info.output_shape(0)) + " differs from the expected " +
                                     shape_str(g.y));
  if (n.domain == kTwinferDomain) {
    g.act = parse_activation(n);
    g.has_bias = info.has_input(2);
    if (g.has_bias && info.input_shape(2) != Shape{g.N})
      info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(g.N) + "], got " +
                                       shape_str(info.input_shape(2)));
    g.has_residual = info.num_inputs() > 3 && info.has_input(3);
    if (g.has_residual && info.input_shape(3) != g.y)
      info.fail(ErrorKind::kShape, "residual must have the output's shape " + shape_str(g.y) + ", got " +
                                       shape_str(info.input_shape(3)));
  }
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != info.input_dtype(0))
      info.fail(ErrorKind::kDType, "all inputs must have the same dtype");
  return g;
}

}  // namespace twinfer::nn
