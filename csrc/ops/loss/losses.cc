// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference-time
// evaluation of the losses): shape rules and CPU kernels, float32/float64 and
// float16/bfloat16 (computed in float). The per-element rule (loss_math.h)
// and the node's checks (loss_spec.h) are shared with the CUDA kernel.
//
//   NLL:  loss[n, d...] = -input[n, target[n, d...], d...] * weight[target]
//   SCE:  log_prob = log_softmax(scores, axis=1); loss = NLL(log_prob, labels)
// with elements whose target equals ignore_index contributing 0 (weight 0).
// reduction: none (shape of target), sum, or mean = sum / the sum of the
// weights of the elements not ignored (their count without weights). Targets
// out of [0, C) that are not ignore_index raise an error naming the node.
#include <algorithm>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel.h"
#include "ops/loss/loss_math.h"
#include "ops/loss/loss_spec.h"
#include "ops/schema.h"

namespace twinfer::loss {
namespace {

void loss_infer(InferContext& c) {
  const bool sce = c.node().op_type == "SoftmaxCrossEntropyLoss";
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, c.node().op_type + " needs a float input, got " + dtype_name(dt));
  const DType it = c.input_dtype(1);
  if (!(it == DType::kInt32 || it == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("targets must be int32/int64, got ") + dtype_name(it));
  if (c.has_input(2)) if (!(c.input_dtype(2) == dt))
      c.fail(ErrorKind::kDType, "weights dtype differs from the input");
  const Reduction red = reduction_of(c);
  if (sce && c.has_output(1)) {
    if (c.input_has_shape(0)) c.set_output(1, dt, c.input_shape(0));
    else c.set_output_rank_unknown(1, dt);
  }
  if (red != Reduction::kNone) return c.set_output(0, dt, SymShape{});
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() >= 2)) c.fail(ErrorKind::kShape, "input must have rank >= 2, got " + sym_shape_str(x));
    SymShape out{x[0]};
    out.insert(out.end(), x.begin() + 2, x.end());
    if (c.input_has_shape(1)) {
      const SymShape& t = c.input_shape(1);
      if (!(t.size() == out.size()))
        c.fail(ErrorKind::kShape, "target " + sym_shape_str(t) + " does not match the input " + sym_shape_str(x));
      for (size_t i = 0; i < t.size(); ++i)
        if (!out[i].known() && t[i].known()) out[i] = t[i];
    }
    return c.set_output(0, dt, out);
  }
  if (c.input_has_shape(1)) return c.set_output(0, dt, c.input_shape(1));
  c.set_output_rank_unknown(0, dt);
}

class LossKernel final : public Kernel {
 public:
  explicit LossKernel(const KernelBuildInfo& info) : s_(info), in_dtype_(info.input_dtype(0)) {}

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const DType it = ctx.inputs[1].dtype;
    ew::dispatch_typeset<kLossTypes>(in_dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (it == DType::kInt32) compute<T, int32_t>(ctx);
      else compute<T, int64_t>(ctx);
    });
  }

 private:
  template <typename T>
  void log_softmax(const T* x, T* lp, int threads) const {
    const int64_t C = s_.C, D = s_.D;
    parallel_for(s_.elements(), threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const int64_t at = class_offset(r, 0, C, D);
                     const auto lse = log_sum_exp(x + at, C, D);
                     for (int64_t c = 0; c < C; ++c) lp[at + c * D] = log_prob(x[at + c * D], lse);
                   }
                 });
  }

  template <typename T, typename I>
  void compute(KernelContext& ctx) const {
    using A = ew::compute_t<T>;
    const I* t = ctx.inputs[1].as<const I>();
    const T* w = s_.has_weight ? ctx.inputs[2].as<const T>() : nullptr;
    const int64_t C = s_.C, D = s_.D, total = s_.elements();
    for (int64_t k = 0; k < total; ++k) {
      const int64_t v = static_cast<int64_t>(t[k]);
      if (target_kind(v, C, s_.has_ignore, s_.ignore) == Target::kOutOfRange)
        throw Error(ErrorKind::kInvalidArgument,
                    "target " + std::to_string(v) + " is out of range [0, " + std::to_string(C) + ")", s_.node,
                    s_.op);
    }
    const T* x = ctx.inputs[0].as<const T>();
    const T* lp = x;
    std::vector<T> tmp;
    if (s_.sce) {
      T* dst;
      if (s_.want_log_prob) {
        dst = ctx.outputs[1].as<T>();
      } else {
        tmp.resize(static_cast<size_t>(s_.N * C * D));
        dst = tmp.data();
      }
      log_softmax(x, dst, ctx.num_threads);
      lp = dst;
    }
    T* y = ctx.outputs[0].as<T>();
    double sum = 0, wsum = 0;
    for (int64_t k = 0; k < total; ++k) {
      const int64_t v = static_cast<int64_t>(t[k]);
      A l = 0;
      if (target_kind(v, C, s_.has_ignore, s_.ignore) == Target::kUsed) {
        const A wt = w ? ew::load(w[v]) : A(1);
        l = nll_term(lp[class_offset(k, v, C, D)], wt);
        wsum += static_cast<double>(wt);
      }
      if (s_.red == Reduction::kNone) y[k] = ew::store<T>(l);
      else sum += static_cast<double>(l);
    }
    if (s_.red != Reduction::kNone) y[0] = ew::store<T>(reduce_loss(sum, wsum, s_.red));
  }

  LossSpec s_;
  DType in_dtype_;
};

bool loss_supports(const KernelBuildInfo& info, std::string* why) { return loss_dtypes_supported(info, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("NegativeLogLikelihoodLoss", loss_infer);
TWINFER_REGISTER_SCHEMA("SoftmaxCrossEntropyLoss", loss_infer);
TWINFER_REGISTER_KERNEL("NegativeLogLikelihoodLoss", Backend::kCPU, 0, loss_supports, make_kernel<LossKernel>);
TWINFER_REGISTER_KERNEL("SoftmaxCrossEntropyLoss", Backend::kCPU, 0, loss_supports, make_kernel<LossKernel>);

}  // namespace twinfer::loss
