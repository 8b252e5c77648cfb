// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference-time
// evaluation of the losses): shape rules and CPU kernels, float32/float64.
//
//   NLL:  loss[n, d...] = -input[n, target[n, d...], d...] * weight[target]
//   SCE:  log_prob = log_softmax(scores, axis=1); loss = NLL(log_prob, labels)
// with elements whose target equals ignore_index contributing 0 (weight 0).
// reduction: none (shape of target), sum, or mean = sum / the sum of the
// weights of the elements not ignored (their count without weights). Targets
// out of [0, C) that are not ignore_index raise an error naming the node.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::loss {
namespace {

enum class Reduction { kNone, kSum, kMean };

template <typename Ctx>
Reduction reduction_of(const Ctx& c) {
  const std::string r = c.node().attr_string("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  c.fail(ErrorKind::kUnsupportedOp, "unknown reduction '" + r + "'");
}

void loss_infer(InferContext& c) {
  const bool sce = c.node().op_type == "SoftmaxCrossEntropyLoss";
  const DType dt = c.input_dtype(0);
  c.check(dtype_is_float(dt), ErrorKind::kDType, c.node().op_type + " needs a float input, got " + dtype_name(dt));
  const DType it = c.input_dtype(1);
  c.check(it == DType::kInt32 || it == DType::kInt64, ErrorKind::kDType,
          std::string("targets must be int32/int64, got ") + dtype_name(it));
  if (c.has_input(2)) c.check(c.input_dtype(2) == dt, ErrorKind::kDType, "weights dtype differs from the input");
  const Reduction red = reduction_of(c);
  if (sce && c.has_output(1)) {
    if (c.input_has_shape(0)) c.set_output(1, dt, c.input_shape(0));
    else c.set_output_rank_unknown(1, dt);
  }
  if (red != Reduction::kNone) return c.set_output(0, dt, SymShape{});
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    c.check(x.size() >= 2, ErrorKind::kShape, "input must have rank >= 2, got " + sym_shape_str(x));
    SymShape out{x[0]};
    out.insert(out.end(), x.begin() + 2, x.end());
    if (c.input_has_shape(1)) {
      const SymShape& t = c.input_shape(1);
      c.check(t.size() == out.size(), ErrorKind::kShape,
              "target " + sym_shape_str(t) + " does not match the input " + sym_shape_str(x));
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
  explicit LossKernel(const KernelBuildInfo& info)
      : node_(info.node().name), op_(info.node().op_type), sce_(op_ == "SoftmaxCrossEntropyLoss"),
        red_(reduction_of(info)) {
    const Shape x = info.input_shape(0), t = info.input_shape(1);
    if (x.size() < 2) info.fail(ErrorKind::kShape, "input must have rank >= 2, got " + shape_str(x));
    Shape expect{x[0]};
    expect.insert(expect.end(), x.begin() + 2, x.end());
    if (t != expect)
      info.fail(ErrorKind::kShape, "target " + shape_str(t) + " does not match the input " + shape_str(x) +
                                       " (expected " + shape_str(expect) + ")");
    N_ = x[0];
    C_ = x[1];
    D_ = shape_numel(Shape(x.begin() + 2, x.end()));
    has_weight_ = info.has_input(2);
    if (has_weight_ && info.input_shape(2) != Shape{C_})
      info.fail(ErrorKind::kShape, "weights must have shape [" + std::to_string(C_) + "], got " +
                                       shape_str(info.input_shape(2)));
    has_ignore_ = info.node().has_attr("ignore_index");
    ignore_ = info.node().attr_int("ignore_index", 0);
    want_log_prob_ = sce_ && info.num_outputs() > 1 && info.has_output(1);
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const DType it = ctx.inputs[1].dtype;
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (it == DType::kInt32) compute<T, int32_t>(ctx);
      else compute<T, int64_t>(ctx);
    });
  }

 private:
  template <typename T>
  void log_softmax(const T* x, T* lp, int threads) const {
    const int64_t C = C_, D = D_;
    parallel_for(N_ * D, threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C)),
                 [&](int64_t b, int64_t e) {
                        for (int64_t r = b; r < e; ++r) {
                          const int64_t n = r / D, d = r - n * D;
                          const T* xp = x + n * C * D + d;
                          T* lpp = lp + n * C * D + d;
                          T m = -std::numeric_limits<T>::infinity();
                          for (int64_t c = 0; c < C; ++c) m = std::max(m, xp[c * D]);
                          T s = 0;
                          for (int64_t c = 0; c < C; ++c) s += std::exp(xp[c * D] - m);
                          const T ls = m + std::log(s);
                          for (int64_t c = 0; c < C; ++c) lpp[c * D] = xp[c * D] - ls;
                        }
                      });
  }

  template <typename T, typename I>
  void compute(KernelContext& ctx) const {
    const I* t = ctx.inputs[1].as<const I>();
    const T* w = has_weight_ ? ctx.inputs[2].as<const T>() : nullptr;
    const int64_t C = C_, D = D_, total = N_ * D_;
    for (int64_t k = 0; k < total; ++k) {
      const int64_t v = static_cast<int64_t>(t[k]);
      if (has_ignore_ && v == ignore_) continue;
      if (v < 0 || v >= C)
        throw Error(ErrorKind::kInvalidArgument,
                    "target " + std::to_string(v) + " is out of range [0, " + std::to_string(C) + ")", node_, op_);
    }
    const T* x = ctx.inputs[0].as<const T>();
    const T* lp = x;
    std::vector<T> tmp;
    if (sce_) {
      T* dst;
      if (want_log_prob_) {
        dst = ctx.outputs[1].as<T>();
      } else {
        tmp.resize(static_cast<size_t>(N_ * C * D));
        dst = tmp.data();
      }
      log_softmax(x, dst, ctx.num_threads);
      lp = dst;
    }
    T* y = ctx.outputs[0].as<T>();
    double sum = 0, wsum = 0;
    for (int64_t k = 0; k < total; ++k) {
      const int64_t v = static_cast<int64_t>(t[k]);
      T l = 0;
      if (!(has_ignore_ && v == ignore_)) {
        const int64_t n = k / D, d = k - n * D;
        const T wt = w ? w[v] : T(1);
        l = -lp[(n * C + v) * D + d] * wt;
        wsum += static_cast<double>(wt);
      }
      if (red_ == Reduction::kNone) y[k] = l;
      else sum += static_cast<double>(l);
    }
    if (red_ == Reduction::kSum) y[0] = static_cast<T>(sum);
    else if (red_ == Reduction::kMean) y[0] = static_cast<T>(sum / wsum);
  }

  std::string node_, op_;
  bool sce_;
  Reduction red_;
  int64_t N_ = 0, C_ = 0, D_ = 1;
  bool has_weight_ = false, has_ignore_ = false, want_log_prob_ = false;
  int64_t ignore_ = 0;
};

bool loss_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = info.node().op_type + " supports float32/float64, not " + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("NegativeLogLikelihoodLoss", loss_infer);
TWINFER_REGISTER_SCHEMA("SoftmaxCrossEntropyLoss", loss_infer);
TWINFER_REGISTER_KERNEL("NegativeLogLikelihoodLoss", Backend::kCPU, 0, loss_supports, make_kernel<LossKernel>);
TWINFER_REGISTER_KERNEL("SoftmaxCrossEntropyLoss", Backend::kCPU, 0, loss_supports, make_kernel<LossKernel>);

}  // namespace twinfer::loss
