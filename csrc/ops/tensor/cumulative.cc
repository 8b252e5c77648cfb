// CumSum(x, axis) and CumProd(x, axis) (opset 26) with the exclusive and
// reverse attributes: the running sum / product along an axis, computed in
// the element type (float for float16/bfloat16) like the reference runtimes.
// The tensor is seen as [outer, n, inner] and each block of up to 256 inner
// positions keeps its running values on the stack, so rows are read in order.
#include <algorithm>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kCumulativeTypes = ew::kFloatTypes | ew::kI32 | ew::kI64 | ew::kU32 | ew::kU64;
constexpr int64_t kBlock = 256;

struct Sum {
  static constexpr const char* kOp = "CumSum";
  template <typename C> static C identity() { return C(0); }
  template <typename C> static C apply(C acc, C v) { return static_cast<C>(acc + v); }
};

struct Prod {
  static constexpr const char* kOp = "CumProd";
  template <typename C> static C identity() { return C(1); }
  template <typename C> static C apply(C acc, C v) { return static_cast<C>(acc * v); }
};

template <typename Op>
void cumulative_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kCumulativeTypes, dt)))
    c.fail(ErrorKind::kDType, std::string(Op::kOp) + " does not support dtype " + dtype_name(dt));
  const DType at = c.input_dtype(1);
  if (!(at == DType::kInt32 || at == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("axis must be int32/int64, got ") + dtype_name(at));
  std::vector<int64_t> axis;
  if (c.input_has_shape(0) && c.constant_ints(1, &axis)) {
    if (!(axis.size() == 1)) c.fail(ErrorKind::kShape, "axis must be one value");
    normalize_axis(c, axis[0], static_cast<int64_t>(c.input_shape(0).size()));
  }
  infer_same_as_input0(c);
}

template <typename Op>
class CumulativeKernel final : public Kernel {
 public:
  explicit CumulativeKernel(const KernelBuildInfo& info)
      : exclusive_(info.node().attr_int("exclusive", 0) != 0),
        reverse_(info.node().attr_int("reverse", 0) != 0),
        node_(info.node().name) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const int64_t r = static_cast<int64_t>(x.rank());
    int64_t axis = view_scalar_int(ctx.inputs[1]);
    if (axis < -r || axis >= r)
      throw Error(ErrorKind::kInvalidArgument,
                  "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r), node_, Op::kOp);
    if (axis < 0) axis += r;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
    const int64_t n = x.shape[axis];
    ew::dispatch_typeset<kCumulativeTypes>(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      go<T>(x.as<const T>(), ctx.outputs[0].as<T>(), outer, n, inner, ctx.num_threads);
    });
  }

 private:
  template <typename T>
  void go(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, int threads) const {
    using C = ew::compute_t<T>;
    const int64_t nb = (inner + kBlock - 1) / kBlock;
    const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(1, n * std::min(inner, kBlock)));
    parallel_for(outer * nb, threads, grain, [&](int64_t b, int64_t e) {
      C acc[kBlock];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / nb, j0 = (t % nb) * kBlock, m = std::min(kBlock, inner - j0);
        std::fill(acc, acc + m, Op::template identity<C>());
        for (int64_t s = 0; s < n; ++s) {
          const int64_t k = reverse_ ? n - 1 - s : s;
          const T* xp = x + (o * n + k) * inner + j0;
          T* yp = y + (o * n + k) * inner + j0;
          if (exclusive_) {
            for (int64_t j = 0; j < m; ++j) {
              const C v = ew::load(xp[j]);
              yp[j] = ew::store<T>(acc[j]);
              acc[j] = Op::apply(acc[j], v);
            }
          } else {
            for (int64_t j = 0; j < m; ++j) {
              acc[j] = Op::apply(acc[j], static_cast<C>(ew::load(xp[j])));
              yp[j] = ew::store<T>(acc[j]);
            }
          }
        }
      }
    });
  }

  bool exclusive_, reverse_;
  std::string node_;
};

bool cumulative_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kCumulativeTypes, why) && check_index_dtype(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("CumSum", cumulative_infer<Sum>);
TWINFER_REGISTER_KERNEL("CumSum", Backend::kCPU, 0, cumulative_supports, make_kernel<CumulativeKernel<Sum>>);
TWINFER_REGISTER_SCHEMA("CumProd", cumulative_infer<Prod>);
TWINFER_REGISTER_KERNEL("CumProd", Backend::kCPU, 0, cumulative_supports, make_kernel<CumulativeKernel<Prod>>);

}  // namespace twinfer::tensor
