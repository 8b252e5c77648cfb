// Trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle of the
// last two dims, zero the rest. Each row is one kept run and one zero run,
// so it is two memcpy/memset per row whatever the dtype (zero bytes are zero
// for every dtype).
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

void trilu_infer(InferContext& c) {
  if (c.has_input(1)) {
    const DType kt = c.input_dtype(1);
    if (!(kt == DType::kInt64)) c.fail(ErrorKind::kDType, std::string("k must be int64, got ") + dtype_name(kt));
    if (c.input_known(1))
      if (!(shape_numel(c.input_values_shape(1)) == 1))
        c.fail(ErrorKind::kShape, "k must be a scalar, got shape " + sym_shape_str(c.input_shape(1)));
  }
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).size() >= 2))
      c.fail(ErrorKind::kShape, "input must have rank >= 2, got " + sym_shape_str(c.input_shape(0)));
  infer_same_as_input0(c);
}

class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelBuildInfo& info)
      : upper_(info.node().attr_int("upper", 1) != 0), elem_(dtype_size(info.input_dtype(0))) {
    const Shape s = info.input_shape(0);
    rows_ = s[s.size() - 2];
    cols_ = s[s.size() - 1];
  }

  void run(KernelContext& ctx) const override {
    int64_t k = 0;
    if (ctx.inputs.size() > 1 && ctx.inputs[1].data) k = view_scalar_int(ctx.inputs[1]);
    k = std::clamp<int64_t>(k, -rows_ - 1, cols_ + 1);  // beyond these nothing changes
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const int64_t total_rows = ctx.inputs[0].numel() / std::max<int64_t>(1, cols_);
    if (cols_ == 0) return;
    const size_t row_bytes = static_cast<size_t>(cols_) * elem_;
    parallel_for(total_rows, ctx.num_threads, std::max<int64_t>(1, kCopyGrain / cols_), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r % rows_;
        const char* xp = x + r * row_bytes;
        char* yp = y + r * row_bytes;
        if (upper_) {
          const int64_t z = std::clamp<int64_t>(i + k, 0, cols_);  // columns [0, z) are zero
          std::memset(yp, 0, z * elem_);
          if (xp != yp) std::memcpy(yp + z * elem_, xp + z * elem_, (cols_ - z) * elem_);
        } else {
          const int64_t keep = std::clamp<int64_t>(i + k + 1, 0, cols_);  // columns [0, keep) stay
          if (xp != yp) std::memcpy(yp, xp, keep * elem_);
          std::memset(yp + keep * elem_, 0, (cols_ - keep) * elem_);
        }
      }
    });
  }

 private:
  bool upper_;
  size_t elem_;
  int64_t rows_ = 0, cols_ = 0;
};

bool trilu_supports(const KernelBuildInfo& info, std::string* why) { return check_movable(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Trilu", trilu_infer);
TWINFER_REGISTER_KERNEL("Trilu", Backend::kCPU, 0, trilu_supports, make_kernel<TriluKernel>);

}  // namespace twinfer::tensor
