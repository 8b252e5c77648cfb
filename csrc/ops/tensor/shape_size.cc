// Shape (with opset-15 start/end) and Size. Their kernels only read the
// input's dims; when those are concrete at load time the engine's constant
// folding replaces the nodes by constants.
#include <algorithm>

#include "ops/tensor/shape_range.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {

std::pair<int64_t, int64_t> shape_range(const graph::Node& n, int64_t opset, int64_t rank) {
  int64_t start = opset >= 15 ? n.attr_int("start", 0) : 0;
  int64_t end = opset >= 15 ? n.attr_int("end", rank) : rank;
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clamp(start);
  end = clamp(end);
  return {start, std::max(start, end)};
}

namespace {

void shape_infer(InferContext& c) {
  if (!c.input_has_shape(0)) {
    // Without start/end the length is the (unknown) rank: one unknown dim.
    return c.set_output(0, DType::kInt64, unknown_dims(1));
  }
  const int64_t rank = static_cast<int64_t>(c.input_shape(0).size());
  auto [b, e] = shape_range(c.node(), c.opset(), rank);
  c.set_output(0, DType::kInt64, SymShape{Dim(e - b)});
}

class ShapeKernel final : public Kernel {
 public:
  explicit ShapeKernel(const KernelBuildInfo& info) {
    auto r = shape_range(info.node(), info.opset(), static_cast<int64_t>(info.input_shape(0).size()));
    begin_ = r.first;
    end_ = r.second;
  }
  void run(KernelContext& ctx) const override {
    int64_t* y = ctx.outputs[0].as<int64_t>();
    for (int64_t i = begin_; i < end_; ++i) y[i - begin_] = ctx.inputs[0].shape[i];
  }

 private:
  int64_t begin_ = 0, end_ = 0;
};

void size_infer(InferContext& c) { c.set_output(0, DType::kInt64, SymShape{}); }

class SizeKernel final : public Kernel {
 public:
  explicit SizeKernel(const KernelBuildInfo&) {}
  void run(KernelContext& ctx) const override { *ctx.outputs[0].as<int64_t>() = ctx.inputs[0].numel(); }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Shape", shape_infer);
// Both read only dims, so they take string tensors too.
TWINFER_REGISTER_STRING_KERNEL("Shape", 0, nullptr, make_kernel<ShapeKernel>, "");
TWINFER_REGISTER_SCHEMA("Size", size_infer);
TWINFER_REGISTER_STRING_KERNEL("Size", 0, nullptr, make_kernel<SizeKernel>, "");

}  // namespace twinfer::tensor
