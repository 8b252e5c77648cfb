// MatMul (ai.onnx) and fused MatMul (com.twinfer: + bias [N], + residual of
// y's shape as a binary-add post-op, activation) on
// oneDNN matmul, float32. When B has no batch (the Linear-layer case) A's
// batch dims are folded into M, giving one large GEMM against a B packed
// once at construction; otherwise a batched matmul with numpy broadcasting
// of the batch dims (oneDNN broadcasts dims of size 1).
#include <memory>

#include "backends/cpu/onednn_matmul.h"
#include "graph/domains.h"
#include "ops/nn/matmul.h"

namespace twinfer::cpu::onednn {
namespace {

class OnednnMatMul final : public Kernel {
 public:
  explicit OnednnMatMul(const KernelBuildInfo& info) {
    nn::MatMulGeom g = nn::matmul_geom(info);
    has_bias_ = g.has_bias;
    if (shape_numel(g.y) == 0) return;
    MatmulDesc d;
    if (shape_numel(g.b_batch) == 1) {
      const int64_t rows = shape_numel(g.a_batch) * g.M;
      d.a = {rows, g.K};
      d.b = {g.K, g.N};
      d.y = {rows, g.N};
    } else {
      d.a = g.a_batch;
      d.a.insert(d.a.end(), {g.M, g.K});
      d.b = g.b_batch;
      d.b.insert(d.b.end(), {g.K, g.N});
      d.y = g.y_batch;
      d.y.insert(d.y.end(), {g.M, g.N});
    }
    const Tensor* bc = info.input_constant(1);
    b_const_ = bc != nullptr;
    d.b_const = bc ? bc->data() : nullptr;
    if (bc) d.b_owner = bc->storage();
    if (g.has_bias) {
      d.bias = Shape(d.y.size(), 1);
      d.bias.back() = g.N;
      const Tensor* biasc = info.input_constant(2);
      d.bias_const = biasc ? biasc->data() : nullptr;
    }
    has_residual_ = g.has_residual;
    if (g.has_residual) d.add = d.y;  // the whole output, read at run time
    d.act = g.act;
    core_ = std::make_unique<MatmulCore>(std::move(d), info.node().name, info.node().op_type);
  }

  size_t scratch_bytes() const override { return core_ ? core_->scratch_bytes() : 0; }
  const char* impl_name() const override { return "onednn matmul"; }

  void run(KernelContext& ctx) const override {
    if (!core_) return;
    core_->run(ctx, ctx.inputs[0].data, b_const_ ? nullptr : ctx.inputs[1].data,
               has_bias_ ? ctx.inputs[2].data : nullptr, has_residual_ ? ctx.inputs[3].data : nullptr,
               ctx.outputs[0].data);
  }

 private:
  bool has_bias_ = false, has_residual_ = false, b_const_ = false;
  std::unique_ptr<MatmulCore> core_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      *why = std::string("oneDNN MatMul supports float32 only, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  Shape a = info.input_shape(0), b = info.input_shape(1);
  if (a.empty() || a.back() == 0) {
    *why = "oneDNN MatMul needs K > 0";
    return false;
  }
  if (std::max(a.size(), b.size()) > 12) {
    *why = "oneDNN MatMul supports rank <= 12";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("MatMul", Backend::kCPU, 10, supports, make_kernel<OnednnMatMul>);
TWINFER_REGISTER_KERNEL("MatMul", Backend::kCPU, 10, supports, make_kernel<OnednnMatMul>, kTwinferDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
