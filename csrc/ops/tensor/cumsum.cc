// CumSum(x, axis) with the exclusive and reverse attributes. Sums run in the
// element type (float for float16/bfloat16), like the reference runtimes;
// the tensor is seen as [outer, n, inner] and each block of up to 256 inner
// positions keeps its running sums on the stack, so rows are read in order.
#include <algorithm>

#include "backends/cpu/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kCumSumTypes = ew::kFloatTypes | ew::kI32 | ew::kI64 | ew::kU32 | ew::kU64;
constexpr int64_t kBlock = 256;

void cumsum_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  c.check(ew::in_typeset(kCumSumTypes, dt), ErrorKind::kDType,
          std::string("CumSum does not support dtype ") + dtype_name(dt));
  const DType at = c.input_dtype(1);
  c.check(at == DType::kInt32 || at == DType::kInt64, ErrorKind::kDType,
          std::string("axis must be int32/int64, got ") + dtype_name(at));
  std::vector<int64_t> axis;
  if (c.input_has_shape(0) && c.constant_ints(1, &axis)) {
    c.check(axis.size() == 1, ErrorKind::kShape, "axis must be one value");
    normalize_axis(c, axis[0], static_cast<int64_t>(c.input_shape(0).size()));
  }
  infer_same_as_input0(c);
}

class CumSumKernel final : public Kernel {
 public:
  explicit CumSumKernel(const KernelBuildInfo& info)
      : exclusive_(info.node().attr_int("exclusive", 0) != 0),
        reverse_(info.node().attr_int("reverse", 0) != 0),
        node_(info.node().name) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const int64_t r = static_cast<int64_t>(x.rank());
    int64_t axis = view_scalar_int(ctx.inputs[1]);
    if (axis < -r || axis >= r)
      throw Error(ErrorKind::kInvalidArgument, "axis " + std::to_string(axis) + " is out of range for rank " +
                                                   std::to_string(r), node_, "CumSum");
    if (axis < 0) axis += r;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
    const int64_t n = x.shape[axis];
    ew::dispatch_typeset<kCumSumTypes>(x.dtype, [&](auto tag) {
      go<typename decltype(tag)::type>(x.as<const typename decltype(tag)::type>(),
                                       ctx.outputs[0].as<typename decltype(tag)::type>(), outer, n, inner,
                                       ctx.num_threads);
    });
  }

 private:
  template <typename T>
  void go(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, int threads) const {
    using C = ew::compute_t<T>;
    const int64_t nb = (inner + kBlock - 1) / kBlock;
    const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(1, n * std::min(inner, kBlock)));
    cpu::parallel_for(outer * nb, threads, grain, [&](int64_t b, int64_t e) {
      C acc[kBlock];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / nb, j0 = (t % nb) * kBlock, m = std::min(kBlock, inner - j0);
        std::fill(acc, acc + m, C(0));
        for (int64_t s = 0; s < n; ++s) {
          const int64_t k = reverse_ ? n - 1 - s : s;
          const T* xp = x + (o * n + k) * inner + j0;
          T* yp = y + (o * n + k) * inner + j0;
          if (exclusive_) {
            for (int64_t j = 0; j < m; ++j) {
              const C v = ew::load(xp[j]);
              yp[j] = ew::store<T>(acc[j]);
              acc[j] += v;
            }
          } else {
            for (int64_t j = 0; j < m; ++j) {
              acc[j] += ew::load(xp[j]);
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

bool cumsum_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kCumSumTypes, why) && check_index_dtype(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("CumSum", cumsum_infer);
TWINFER_REGISTER_KERNEL("CumSum", Backend::kCPU, 0, cumsum_supports, make_kernel<CumSumKernel>);

}  // namespace twinfer::tensor
