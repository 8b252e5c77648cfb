// CPU kernels of the channels-last ops (com.twinfer.nhwc Conv, MaxPool and
// AveragePool; graph/passes/channels_last.h), for every dtype the NCHW op's
// CPU kernels take: that kernel, run between two transposes. A Conv's
// constant KRSC weights are permuted back to [M, C/group, k...] once, when
// the kernel is built. The simulated device runs these, and so does a device
// plan whose node is sent back to the host. oneDNN's float32 Conv reads and
// writes NHWC (and KRSC) itself and wins where it applies
// (backends/cpu/onednn_conv.cc, higher priority).
#include <memory>
#include <string>

#include "core/error.h"
#include "graph/domains.h"
#include "graph/ir.h"
#include "ops/kernel.h"
#include "ops/nn/channels_last.h"

namespace twinfer::nn {
namespace {

constexpr size_t kAlign = 64;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

bool is_activation_slot(const graph::Node& n, size_t slot) { return slot == 0 || (n.op_type == "Conv" && slot == 3); }
bool is_weights_slot(const graph::Node& n, size_t slot) { return n.op_type == "Conv" && slot == 1; }

// A Conv's constant KRSC weights as [M, C/group, k...] (none for a pool or
// for weights computed at run time).
Tensor nchw_weights(const KernelBuildInfo& info) {
  const Tensor* w = is_weights_slot(info.node(), 1) ? info.input_constant(1) : nullptr;
  return w ? to_channels_first(*w) : Tensor();
}

// The node as its NCHW op (the fused com.twinfer Conv, or ONNX's pool) in a
// one-node graph of its own. A Conv's weights there are `weights`
// (nchw_weights) or, when that is empty, a run-time input: supports() asks
// about shapes and dtypes only, and permuting the weights for it would copy
// them on every question.
struct NchwTwin {
  graph::Graph g;
  NchwTwin(const KernelBuildInfo& info, const Tensor& weights) {
    graph::Node n = info.node();
    n.domain = n.op_type == "Conv" ? kTwinferDomain : "";
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] < 0) continue;
      graph::Value v = info.input(k);
      v.producer = -1;
      if (is_activation_slot(n, k) || is_weights_slot(n, k)) v.shape = channels_first_shape(v.shape);
      if (is_weights_slot(n, k)) v.constant = weights;
      g.values.push_back(std::move(v));
      n.inputs[k] = static_cast<int>(g.values.size()) - 1;
    }
    graph::Value y = info.output(0);
    y.shape = channels_first_shape(y.shape);
    y.producer = 0;
    g.values.push_back(std::move(y));
    n.outputs = {static_cast<int>(g.values.size()) - 1};
    g.nodes.push_back(std::move(n));
  }
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_shape(0).size() < 3) {
    *why = "a channels-last op needs an [N, spatial..., C] input";
    return false;
  }
  NchwTwin twin(info, Tensor());
  return select_kernel(KernelBuildInfo(twin.g, twin.g.nodes[0], info.opset(), Backend::kCPU, info.precision()), why) !=
         nullptr;
}

class ChannelsLastOnCpu final : public Kernel {
 public:
  explicit ChannelsLastOnCpu(const KernelBuildInfo& info) : w_(nchw_weights(info)), twin_(info, w_) {
    const graph::Node& n = twin_.g.nodes[0];
    KernelBuildInfo inner_info(twin_.g, n, info.opset(), Backend::kCPU, info.precision());
    std::string why;
    const KernelDef* def = select_kernel(inner_info, &why);
    if (!def) info.fail(ErrorKind::kUnsupportedOp, "no CPU kernel for the NCHW form: " + why);
    inner_ = def->create(inner_info);
    name_ = std::string(inner_->impl_name()) + " between NHWC transposes";
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0 && (is_activation_slot(n, k) || (is_weights_slot(n, k) && !w_.defined())))
        slots_.push_back(k);
    offset_ = aligned(inner_->scratch_bytes());
    size_t at = offset_;
    for (size_t k : slots_) {
      in_at_.push_back(at);
      at += aligned(info.input(k).has_shape ? shape_numel(info.input_shape(k)) * dtype_size(info.input_dtype(k)) : 0);
    }
    y_at_ = at;
    total_ = y_at_ + aligned(shape_numel(info.output_shape(0)) * dtype_size(info.output(0).dtype));
  }

  size_t scratch_bytes() const override { return total_; }
  const char* impl_name() const override { return name_.c_str(); }

  void run(KernelContext& ctx) const override {
    char* scratch = static_cast<char*>(ctx.scratch);
    KernelContext inner = ctx;
    inner.scratch = offset_ ? scratch : nullptr;
    if (w_.defined()) inner.inputs[1] = w_.view();
    for (size_t i = 0; i < slots_.size(); ++i) {
      const TensorView& v = ctx.inputs[slots_[i]];
      TensorView& t = inner.inputs[slots_[i]];
      t.shape = channels_first_shape(v.shape);
      t.data = scratch + in_at_[i];
      const int64_t s = spatial(v.shape);
      copy_to_channels_first(v.data, t.data, v.shape[0], v.shape.back(), s, dtype_size(v.dtype), ctx.num_threads);
    }
    const TensorView& y = ctx.outputs[0];
    inner.outputs.resize(1);
    inner.outputs[0].shape = channels_first_shape(y.shape);
    inner.outputs[0].data = scratch + y_at_;
    inner_->run(inner);
    copy_to_channels_last(inner.outputs[0].data, y.data, y.shape[0], y.shape.back(), spatial(y.shape),
                          dtype_size(y.dtype), ctx.num_threads);
  }

 private:
  static int64_t spatial(const Shape& s) {
    int64_t p = 1;
    for (size_t i = 1; i + 1 < s.size(); ++i) p *= s[i];
    return p;
  }

  Tensor w_;       // a Conv's constant weights for the inner kernel (nchw_weights)
  NchwTwin twin_;  // the inner kernel was built from it
  std::unique_ptr<Kernel> inner_;
  std::string name_;
  std::vector<size_t> slots_;   // inputs permuted each run (x, the residual, run-time KRSC weights)
  std::vector<size_t> in_at_;   // their NCHW copies' scratch offsets
  size_t offset_ = 0, y_at_ = 0, total_ = 0;
};

TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 0, supports, make_kernel<ChannelsLastOnCpu>, kChannelsLastDomain);
TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCPU, 0, supports, make_kernel<ChannelsLastOnCpu>, kChannelsLastDomain);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCPU, 0, supports, make_kernel<ChannelsLastOnCpu>,
                        kChannelsLastDomain);

}  // namespace
}  // namespace twinfer::nn
