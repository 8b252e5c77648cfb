// TopK(X, K) -> (Values, Indices) along `axis`: the k largest (or smallest)
// elements of every slice. K is an attribute before opset 10 and a
// one-element int64 input since; `largest`/`sorted` came in opset 11. Ties
// keep the lower index first (the spec's rule), which a stable ordering on
// (value, index) gives; with sorted=0 we still return sorted output, which is
// one of the orders the spec allows. NaN counts as larger than any number,
// like the reference runtimes.
#include <algorithm>
#include <numeric>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"
#include "ops/tensor/topk_order.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kTopKTypes = ew::kNumericTypes;

void topk_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kTopKTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("TopK does not support dtype ") + dtype_name(dt));
  int64_t k = -1;
  if (c.opset() < 10) {
    k = c.node().attr_int("k", -1);
    if (!(k >= 0)) c.fail(ErrorKind::kModelFormat, "attribute k is missing or negative");
  } else {
    if (!(c.has_input(1))) c.fail(ErrorKind::kModelFormat, "input K is missing");
    std::vector<int64_t> kv;
    if (c.constant_ints(1, &kv)) {
      if (!(kv.size() == 1)) c.fail(ErrorKind::kShape, "K must hold one value");
      k = kv[0];
      if (!(k >= 0)) c.fail(ErrorKind::kInvalidArgument, "K must be >= 0, got " + std::to_string(k));
    }
  }
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, dt);
    if (c.has_output(1)) c.set_output_rank_unknown(1, DType::kInt64);
    return;
  }
  SymShape s = c.input_shape(0);
  if (!(!s.empty())) c.fail(ErrorKind::kShape, "X must have rank >= 1");
  const int64_t axis = normalize_axis(c, c.node().attr_int("axis", -1), static_cast<int64_t>(s.size()));
  if (k >= 0 && s[axis].known())
    if (!(k <= s[axis].value))
      c.fail(ErrorKind::kInvalidArgument,
             "K = " + std::to_string(k) + " exceeds the axis length " + std::to_string(s[axis].value));
  s[axis] = k >= 0 ? Dim(k) : Dim();
  c.set_output(0, dt, s);
  if (c.has_output(1)) c.set_output(1, DType::kInt64, s);
}

class TopKKernel final : public Kernel {
 public:
  explicit TopKKernel(const KernelBuildInfo& info)
      : largest_(info.opset() < 11 || info.node().attr_int("largest", 1) != 0), node_(info.node().name) {
    const Shape x = info.input_shape(0);
    int64_t axis = info.node().attr_int("axis", -1);
    if (axis < 0) axis += static_cast<int64_t>(x.size());
    for (int64_t d = 0; d < axis; ++d) outer_ *= x[d];
    for (size_t d = axis + 1; d < x.size(); ++d) inner_ *= x[d];
    n_ = x[axis];
    k_ = info.output_shape(0)[axis];
  }

  void run(KernelContext& ctx) const override {
    if (ctx.inputs.size() > 1 && ctx.inputs[1].data) {
      const int64_t k = view_scalar_int(ctx.inputs[1]);
      if (k != k_)
        throw Error(ErrorKind::kInvalidArgument,
                    "K = " + std::to_string(k) + " differs from the " + std::to_string(k_) + " the plan was built for",
                    node_, "TopK");
    }
    ew::dispatch_typeset<kTopKTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      go<T>(ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(),
            ctx.outputs.size() > 1 ? ctx.outputs[1].as<int64_t>() : nullptr, ctx.num_threads);
    });
  }

 private:
  template <typename T>
  void go(const T* x, T* y, int64_t* yi, int threads) const {
    using C = ew::compute_t<T>;
    if (k_ == 0) return;
    const int64_t n = n_, k = k_, inner = inner_;
    const bool largest = largest_;
    const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(1, n));
    parallel_for(outer_ * inner, threads, grain, [&](int64_t b, int64_t e) {
      std::vector<std::pair<C, int64_t>> row;
      // a before b: a's value is "better", or equal with a lower index.
      auto better = [largest](const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& bb) {
        return topk_before(a.first, a.second, bb.first, bb.second, largest);
      };
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / inner, j = t % inner;
        const T* xp = x + o * n * inner + j;
        if (k * 8 <= n) {
          // Few of many (a sampler's top-k of a vocabulary): one pass keeping
          // the k best in a heap whose top is the worst of them; most
          // elements lose to it at the first comparison, with no (value,
          // index) pair written per element. NaN and equal values take the
          // full order.
          row.resize(static_cast<size_t>(k));
          for (int64_t i = 0; i < k; ++i) row[i] = {ew::load(xp[i * inner]), i};
          std::make_heap(row.begin(), row.end(), better);
          for (int64_t i = k; i < n; ++i) {
            const C v = ew::load(xp[i * inner]), worst = row.front().first;
            if (largest ? v < worst : v > worst) continue;
            if (!topk_before(v, i, worst, row.front().second, largest)) continue;
            std::pop_heap(row.begin(), row.end(), better);
            row.back() = {v, i};
            std::push_heap(row.begin(), row.end(), better);
          }
          std::sort(row.begin(), row.end(), better);
        } else {
          row.resize(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) row[i] = {ew::load(xp[i * inner]), i};
          if (k < n) {
            std::partial_sort(row.begin(), row.begin() + k, row.end(), better);
          } else {
            std::sort(row.begin(), row.end(), better);
          }
        }
        T* yp = y + o * k * inner + j;
        int64_t* ip = yi ? yi + o * k * inner + j : nullptr;
        for (int64_t i = 0; i < k; ++i) {
          yp[i * inner] = xp[row[i].second * inner];
          if (ip) ip[i * inner] = row[i].second;
        }
      }
    });
  }

  bool largest_;
  std::string node_;
  int64_t outer_ = 1, inner_ = 1, n_ = 0, k_ = 0;
};

bool topk_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kTopKTypes, why) && (!info.has_input(1) || check_index_dtype(info, 1, why));
}

}  // namespace

TWINFER_REGISTER_SCHEMA("TopK", topk_infer);
TWINFER_REGISTER_KERNEL("TopK", Backend::kCPU, 0, topk_supports, make_kernel<TopKKernel>);

}  // namespace twinfer::tensor
