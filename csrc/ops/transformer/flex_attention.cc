// ai.onnx.preview FlexAttention: Y = prob_mod(softmax(score_mod(Q K^T *
// scale))) V over [batch, heads, seq, head_size] tensors, scale 1/sqrt(head
// size) unless given; K/V heads shared by groups of query heads (GQA). The
// optional score_mod / prob_mod subgraphs map a [B, Hq, Lq, Lkv] tensor to
// one of the same shape and type; they run through the subgraph evaluator,
// as If/Loop bodies do (ops/control). Scores and probabilities are computed
// in softmax_precision (float, or double for double inputs by default) and
// Y is returned in Q's type.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/domains.h"
#include "ops/control/control_util.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

// softmax_precision, or its default (double for double inputs, else float).
DType precision_of(const graph::Node& n, DType input) {
  if (!n.has_attr("softmax_precision")) return input == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  return dtype_from_onnx(static_cast<int32_t>(n.attr_int("softmax_precision", 1)));
}

void flex_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Q must be a float type, got ") + dtype_name(dt));
  check_same_dtype_as(c, 1, dt);
  check_same_dtype_as(c, 2, dt);
  const DType p = precision_of(c.node(), dt);
  if (!(p == DType::kFloat32 || p == DType::kFloat64))
    c.fail(ErrorKind::kUnsupportedOp,
           std::string("softmax_precision ") + dtype_name(p) + " is not supported (float or double)");
  for (const char* g : {"score_mod", "prob_mod"})
    if (const graph::Attribute* a = c.node().attr(g))
      if (!(a->g && a->g->inputs.size() == 1 && a->g->outputs.size() == 1))
        c.fail(ErrorKind::kModelFormat, std::string(g) + " must be a graph of one input and one output");
  if (!c.input_has_shape(0) || !c.input_has_shape(1) || !c.input_has_shape(2))
    return c.set_output(0, dt, {Dim(), Dim(), Dim(), Dim()});
  const SymShape &q = c.input_shape(0), &k = c.input_shape(1), &v = c.input_shape(2);
  if (!(q.size() == 4 && k.size() == 4 && v.size() == 4))
    c.fail(ErrorKind::kShape,
           "Q, K and V must be rank 4, got " + sym_shape_str(q) + ", " + sym_shape_str(k) + ", " + sym_shape_str(v));
  if (!(dims_compatible(q[3], k[3]))) c.fail(ErrorKind::kShape, "Q and K head sizes differ");
  if (!(dims_compatible(k[2], v[2]) && dims_compatible(k[1], v[1])))
    c.fail(ErrorKind::kShape, "K and V shapes disagree");
  if (q[1].known() && k[1].known())
    if (!(k[1].value > 0 && q[1].value % k[1].value == 0))
      c.fail(ErrorKind::kShape,
             "query heads (" + q[1].str() + ") must be a multiple of key/value heads (" + k[1].str() + ")");
  c.set_output(0, dt, {q[0], q[1], q[2], v[3]});
}

class FlexAttentionKernel final : public Kernel {
 public:
  explicit FlexAttentionKernel(const KernelBuildInfo& info)
      : node_(info.node().name), precision_(precision_of(info.node(), info.input_dtype(0))) {
    const graph::Node& n = info.node();
    if (n.has_attr("score_mod")) score_mod_ = std::make_unique<control::Body>(info, "score_mod");
    if (n.has_attr("prob_mod")) prob_mod_ = std::make_unique<control::Body>(info, "prob_mod");
    has_scale_ = n.has_attr("scale");
    scale_ = n.attr_float("scale", 1.f);
  }
  const char* impl_name() const override { return "reference (subgraph mods)"; }

  void run(KernelContext& ctx) const override {
    const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
    if (precision_ == DType::kFloat64) go<double>(q, k, v, ctx);
    else go<float>(q, k, v, ctx);
  }

 private:
  template <typename P>
  void go(const TensorView& q, const TensorView& k, const TensorView& v, KernelContext& ctx) const {
    const int64_t B = q.dim(0), Hq = q.dim(1), Lq = q.dim(2), D = q.dim(3);
    const int64_t Hkv = k.dim(1), Lkv = k.dim(2), Dv = v.dim(3);
    if (Hkv <= 0 || Hq % Hkv != 0)
      throw Error(ErrorKind::kShape, "query heads must be a multiple of key/value heads", node_, "FlexAttention");
    const int64_t group = Hq / Hkv;
    const std::vector<P> Q = to<P>(q), K = to<P>(k), V = to<P>(v);
    const P scale = has_scale_ ? static_cast<P>(scale_) : P(1) / std::sqrt(static_cast<P>(D));
    const DType pt = precision_;
    Tensor s = Tensor::empty(pt, {B, Hq, Lq, Lkv});
    P* sp = s.data_as<P>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const P* qh = Q.data() + ((b * Hq + h) * Lq) * D;
        const P* kh = K.data() + ((b * Hkv + h / group) * Lkv) * D;
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lkv; ++j) {
            P acc = 0;
            for (int64_t d = 0; d < D; ++d) acc += qh[i * D + d] * kh[j * D + d];
            sp[((b * Hq + h) * Lq + i) * Lkv + j] = acc * scale;
          }
      }
    if (score_mod_) s = apply(*score_mod_, s, ctx, "score_mod");
    P* p = s.data_as<P>();
    for (int64_t r = 0; r < B * Hq * Lq; ++r) {  // softmax over each row of Lkv
      P* row = p + r * Lkv;
      const P mx = *std::max_element(row, row + Lkv);
      P sum = 0;
      for (int64_t j = 0; j < Lkv; ++j) sum += (row[j] = std::exp(row[j] - mx));
      for (int64_t j = 0; j < Lkv; ++j) row[j] /= sum;
    }
    if (prob_mod_) s = apply(*prob_mod_, s, ctx, "prob_mod");
    p = s.data_as<P>();
    const TensorView& y = ctx.outputs[0];
    dispatch_any_float(y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = y.as<T>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h) {
          const P* vh = V.data() + ((b * Hkv + h / group) * Lkv) * Dv;
          const P* ph = p + ((b * Hq + h) * Lq) * Lkv;
          for (int64_t i = 0; i < Lq; ++i)
            for (int64_t d = 0; d < Dv; ++d) {
              P acc = 0;
              for (int64_t j = 0; j < Lkv; ++j) acc += ph[i * Lkv + j] * vh[j * Dv + d];
              out[((b * Hq + h) * Lq + i) * Dv + d] = store<T>(static_cast<compute_t<T>>(acc));
            }
        }
    });
  }

  // A view's values in the compute precision P.
  template <typename P>
  static std::vector<P> to(const TensorView& t) {
    std::vector<P> out(static_cast<size_t>(t.numel()));
    dispatch_any_float(t.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = t.as<const T>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<P>(load(in[i]));
    });
    return out;
  }

  Tensor apply(const control::Body& body, const Tensor& x, const KernelContext& ctx, const char* what) const {
    std::vector<Tensor> out = body.run({x}, ctx);
    if (out.size() != 1 || out[0].dtype() != x.dtype() || out[0].shape() != x.shape())
      throw Error(ErrorKind::kShape,
                  std::string(what) + " must return one " + dtype_name(x.dtype()) + shape_str(x.shape()) +
                      " tensor, got " + (out.empty() ? std::string("none") : dtype_name(out[0].dtype()) + shape_str(out[0].shape())),
                  node_, "FlexAttention");
    return out[0];
  }

  std::string node_;
  DType precision_;
  std::unique_ptr<control::Body> score_mod_, prob_mod_;
  bool has_scale_ = false;
  float scale_ = 1.f;
};

bool flex_supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2}, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("FlexAttention", flex_infer, kPreviewDomain);
TWINFER_REGISTER_KERNEL("FlexAttention", Backend::kCPU, 0, flex_supports, make_kernel<FlexAttentionKernel>,
                        kPreviewDomain);

}  // namespace twinfer::tx
