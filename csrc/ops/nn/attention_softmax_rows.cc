// com.twinfer::AttentionSoftmax (ops/nn/attention_softmax.h) on the CPU,
// threaded over rows: each row's x * scale + mask, its softmax and, when the
// node carries the exporter's guard, NaN -> 0, while the row is in cache
// (ops/nn/softmax_rows.h, the loops the plain Softmax kernel runs, so a fused
// chain normalises exactly as the unfused one).
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "core/simd_clones.h"
#include "graph/domains.h"
#include "ops/kernel.h"
#include "ops/nn/attention_softmax.h"
#include "ops/nn/softmax_rows.h"

namespace twinfer::nn {
namespace {

TWINFER_SIMD_CLONES void zero_nans(float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] == y[i] ? y[i] : 0.f;
}

class AttentionSoftmaxRows final : public Kernel {
 public:
  explicit AttentionSoftmaxRows(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(0);
    len_ = x.back();
    rows_ = len_ ? shape_numel(x) / len_ : 0;
    scale_ = info.node().attr_float("scale", 1.f);
    nan_to_zero_ = info.node().attr_int("nan_to_zero", 0) != 0;
    if (info.has_input(1)) {
      // The mask's element strides against x's row coordinates (0 where it broadcasts).
      has_mask_ = true;
      const Shape m = info.input_shape(1);
      const size_t r = x.size(), lead = r - m.size();
      std::vector<int64_t> ms(r, 0);
      int64_t stride = 1;
      for (size_t d = r; d-- > lead;) {
        const int64_t md = m[d - lead];
        ms[d] = md == 1 ? 0 : stride;
        stride *= md;
      }
      mask_step_ = ms[r - 1] ? 1 : 0;
      row_dims_.assign(x.begin(), x.end() - 1);
      mask_row_strides_.assign(ms.begin(), ms.end() - 1);
    }
  }

  const char* impl_name() const override { return "scale + mask + softmax, vectorised rows"; }

  void run(KernelContext& ctx) const override {
    if (rows_ * len_ == 0) return;
    const float* x = ctx.inputs[0].as<const float>();
    const float* m = has_mask_ ? ctx.inputs[1].as<const float>() : nullptr;
    float* y = ctx.outputs[0].as<float>();
    const int64_t grain = std::max<int64_t>(1, 16384 / len_);
    parallel_for(rows_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float* row = y + r * len_;
        softmax_row(x + r * len_, m ? m + mask_offset(r) : nullptr, mask_step_, scale_, row, len_);
        if (nan_to_zero_) zero_nans(row, len_);
      }
    });
  }

 private:
  // Where row r of x (its leading coordinates) starts in the mask.
  int64_t mask_offset(int64_t r) const {
    int64_t off = 0;
    for (size_t d = row_dims_.size(); d-- > 0;) {
      off += (r % row_dims_[d]) * mask_row_strides_[d];
      r /= row_dims_[d];
    }
    return off;
  }

  int64_t rows_ = 0, len_ = 0, mask_step_ = 0;
  float scale_ = 1.f;
  bool nan_to_zero_ = false, has_mask_ = false;
  std::vector<int64_t> row_dims_, mask_row_strides_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32 || (info.has_input(1) && info.input_dtype(1) != DType::kFloat32)) {
    if (why) *why = "AttentionSoftmax: float32 only";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL(kAttentionSoftmaxOp, Backend::kCPU, 10, supports,
                        make_kernel<AttentionSoftmaxRows>, kTwinferDomain);

}  // namespace
}  // namespace twinfer::nn
