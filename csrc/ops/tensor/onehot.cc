// OneHot(indices, depth, values=[off, on]) with the axis attribute. Indices
// of any numeric type (floats are truncated), negative ones count from depth,
// and out-of-range ones give an all-"off" line, as the spec says.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// depth from a constant one-element tensor of any numeric type; -1 when not constant.
int64_t const_depth(const Tensor* t) {
  if (!t) return -1;
  return view_scalar_int(t->view());
}

void onehot_infer(InferContext& c) {
  const DType dt = c.input_dtype(2);
  if (!(ew::in_typeset(ew::kNumericTypes, c.input_dtype(0))))
    c.fail(ErrorKind::kDType, std::string("indices must be numeric, got ") + dtype_name(c.input_dtype(0)));
  if (!(ew::in_typeset(ew::kNumericTypes, c.input_dtype(1))))
    c.fail(ErrorKind::kDType, std::string("depth must be numeric, got ") + dtype_name(c.input_dtype(1)));
  if (c.input_has_shape(2)) {
    const SymShape& v = c.input_shape(2);
    if (!(v.size() == 1 && (!v[0].known() || v[0].value == 2)))
      c.fail(ErrorKind::kShape, "values must have shape [2], got " + sym_shape_str(v));
  }
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& ind = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(ind.size()) + 1;
  const int64_t axis = normalize_axis(c, c.node().attr_int("axis", -1), r);
  int64_t depth = -1;
  try {
    depth = const_depth(c.input_constant(1));
  } catch (const Error& e) {
    c.fail(ErrorKind::kShape, std::string("depth: ") + e.what());
  }
  if (c.input_constant(1)) if (!(depth > 0))
      c.fail(ErrorKind::kShape, "depth must be positive, got " + std::to_string(depth));
  SymShape out = ind;
  out.insert(out.begin() + axis, depth >= 0 ? Dim(depth) : Dim());
  c.set_output(0, dt, out);
}

class OneHotKernel final : public Kernel {
 public:
  explicit OneHotKernel(const KernelBuildInfo& info) {
    const Shape out = info.output_shape(0);
    const int64_t r = static_cast<int64_t>(out.size());
    int64_t axis = info.node().attr_int("axis", -1);
    if (axis < 0) axis += r;
    for (int64_t d = 0; d < axis; ++d) outer_ *= out[d];
    depth_ = out[axis];
    for (int64_t d = axis + 1; d < r; ++d) inner_ *= out[d];
  }

  void run(KernelContext& ctx) const override {
    const TensorView& ind = ctx.inputs[0];
    const TensorView& vals = ctx.inputs[2];
    ew::dispatch_typeset<ew::kNumericTypes>(ind.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      dispatch_bytes(vals.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        go<I, T>(ind.as<const I>(), vals.as<const T>(), ctx.outputs[0].as<T>(), ctx.num_threads);
      });
    });
  }

 private:
  template <typename I, typename T>
  void go(const I* ind, const T* vals, T* y, int threads) const {
    const T off = vals[0], on = vals[1];
    const int64_t D = depth_, inner = inner_;
    const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(1, D * inner));
    parallel_for(outer_, threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        T* yo = y + o * D * inner;
        std::fill(yo, yo + D * inner, off);
        const I* io = ind + o * inner;
        for (int64_t i = 0; i < inner; ++i) {
          int64_t k = static_cast<int64_t>(ew::load(io[i]));
          if (k < 0) k += D;
          if (k >= 0 && k < D) yo[k * inner + i] = on;
        }
      }
    });
  }

  int64_t outer_ = 1, depth_ = 0, inner_ = 1;
};

bool onehot_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, ew::kNumericTypes, why) && check_movable(info, 2, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("OneHot", onehot_infer);
TWINFER_REGISTER_KERNEL("OneHot", Backend::kCPU, 0, onehot_supports, make_kernel<OneHotKernel>);

}  // namespace twinfer::tensor
