// Gemm (ai.onnx) and fused Gemm (com.twinfer) on oneDNN matmul, float32.
// y = act(alpha * A'B' + beta * C). Transposes are expressed as strides; a
// constant B is packed once with alpha folded in. C takes the cheapest route
// oneDNN runs fast (see onednn_matmul.h): bias for [N]-shaped C, a binary-add
// post-op for constant C or a runtime C of shape [1,1]/[M,N] with beta 1,
// else C is broadcast into y first and added with a sum post-op (beta).
#include <memory>
#include <vector>

#include "backends/cpu/onednn_matmul.h"
#include "graph/domains.h"
#include "ops/nn/matmul.h"

namespace twinfer::cpu::onednn {
namespace {

enum class CMode { kNone, kBias, kAdd, kSum };

class OnednnGemm final : public Kernel {
 public:
  explicit OnednnGemm(const KernelBuildInfo& info) : g_(nn::gemm_geom(info)) {
    empty_ = g_.M == 0 || g_.N == 0;
    if (empty_) return;
    MatmulDesc d;
    d.a = {g_.M, g_.K};
    if (g_.trans_a) d.a_strides = {1, g_.M};
    d.b = {g_.K, g_.N};
    if (g_.trans_b) d.b_strides = {1, g_.K};
    d.y = {g_.M, g_.N};
    const Tensor* bc = info.input_constant(1);
    b_const_ = bc != nullptr;
    d.b_const = bc ? bc->data() : nullptr;
    if (bc) d.b_owner = bc->storage();
    d.alpha = g_.alpha;
    d.act = g_.act;
    if (g_.has_c && g_.beta != 0.f) {
      c2_ = nn::gemm_c_2d(g_.c);
      const Tensor* cc = info.input_constant(2);
      const bool row = c2_[0] == 1 && c2_[1] == g_.N;               // [1, N]: oneDNN bias
      const bool fast_add = c2_ == Shape{1, 1} || c2_ == Shape{g_.M, g_.N};
      if (row && (cc || g_.beta == 1.f)) {
        cmode_ = CMode::kBias;
        d.bias = {1, g_.N};
        d.bias_const = cc ? cc->data() : nullptr;
        d.bias_scale = g_.beta;
      } else if (cc) {
        cmode_ = CMode::kAdd;
        d.add = fast_add ? c2_ : Shape{g_.M, g_.N};
        if (!fast_add) {  // [M, 1] (or [1, N] handled above): expand once
          c_full_.resize(g_.M * g_.N);
          broadcast_c(static_cast<const float*>(cc->data()), c_full_.data());
          d.add_const = c_full_.data();
        } else {
          d.add_const = cc->data();
        }
        d.add_scale = g_.beta;
      } else if (g_.beta == 1.f && fast_add) {
        cmode_ = CMode::kAdd;
        d.add = c2_;
      } else {
        cmode_ = CMode::kSum;
        d.sum = true;
        d.sum_scale = g_.beta;
      }
    }
    core_ = std::make_unique<MatmulCore>(std::move(d), info.node().name, info.node().op_type);
    c_full_ = {};  // the core keeps its own copy
  }

  size_t scratch_bytes() const override { return core_ ? core_->scratch_bytes() : 0; }
  const char* impl_name() const override { return "onednn matmul"; }

  void run(KernelContext& ctx) const override {
    if (empty_) return;
    float* y = ctx.outputs[0].as<float>();
    const void* c = g_.has_c ? ctx.inputs[2].data : nullptr;
    if (cmode_ == CMode::kSum) broadcast_c(static_cast<const float*>(c), y);
    core_->run(ctx, ctx.inputs[0].data, b_const_ ? nullptr : ctx.inputs[1].data,
               cmode_ == CMode::kBias ? c : nullptr, cmode_ == CMode::kAdd ? c : nullptr, y);
  }

 private:
  // Writes C broadcast to [M, N] into out.
  void broadcast_c(const float* c, float* out) const {
    for (int64_t m = 0; m < g_.M; ++m) {
      const float* row = c + (c2_[0] == 1 ? 0 : m * c2_[1]);
      float* o = out + m * g_.N;
      if (c2_[1] == 1)
        for (int64_t n = 0; n < g_.N; ++n) o[n] = row[0];
      else
        for (int64_t n = 0; n < g_.N; ++n) o[n] = row[n];
    }
  }

  nn::GemmGeom g_;
  bool empty_ = false, b_const_ = false;
  CMode cmode_ = CMode::kNone;
  Shape c2_;
  std::vector<float> c_full_;
  std::unique_ptr<MatmulCore> core_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      *why = std::string("oneDNN Gemm supports float32 only, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  Shape a = info.input_shape(0);
  if (a.size() == 2 && a[info.node().attr_int("transA", 0) ? 0 : 1] == 0) {
    *why = "oneDNN Gemm needs K > 0";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Gemm", Backend::kCPU, 10, supports, make_kernel<OnednnGemm>);
TWINFER_REGISTER_KERNEL("Gemm", Backend::kCPU, 10, supports, make_kernel<OnednnGemm>, kTwinferDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
