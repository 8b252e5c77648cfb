// If: runs then_branch or else_branch. With a constant condition the shape
// rule types only the branch taken; otherwise the branches' types merge, and
// dims on which they disagree make the plan evaluate eagerly.
#include "ops/control/control_util.h"

namespace twinfer::control {
namespace {

bool read_cond(const TensorView& c, const std::string& node) {
  if (c.numel() != 1)
    throw Error(ErrorKind::kShape, "cond must hold one element, got " + shape_str(c.shape), node, "If");
  return *static_cast<const bool*>(c.data);
}

void if_infer(InferContext& c) {
  c.check(c.input_dtype(0) == DType::kBool, ErrorKind::kDType,
          std::string("cond must be bool, got ") + dtype_name(c.input_dtype(0)));
  const auto& then_g = c.node().required_attr("then_branch");
  const auto& else_g = c.node().required_attr("else_branch");
  c.check(then_g.g && else_g.g, ErrorKind::kModelFormat, "then_branch and else_branch must be graphs");
  c.check(then_g.g->outputs.size() == c.num_outputs() && else_g.g->outputs.size() == c.num_outputs(),
          ErrorKind::kModelFormat, "each branch must have as many outputs as the node");
  if (const Tensor* cond = c.input_constant(0)) {
    const bool take_then = *cond->data_as<bool>();
    auto types = infer_subgraph(c, take_then ? *then_g.g : *else_g.g, {});
    for (size_t i = 0; i < types.size(); ++i) set_output_type(c, i, types[i]);
    return;
  }
  auto a = infer_subgraph(c, *then_g.g, {});
  auto b = infer_subgraph(c, *else_g.g, {});
  for (size_t i = 0; i < a.size(); ++i) set_output_type(c, i, merge_types(c, a[i], b[i], i));
}

class IfKernel final : public Kernel {
 public:
  explicit IfKernel(const KernelBuildInfo& info)
      : node_(info.node().name), then_(info, "then_branch"), else_(info, "else_branch") {}
  void run(KernelContext& ctx) const override { copy_to_outputs(run_dynamic(ctx), ctx, node_, "If"); }
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    return (read_cond(ctx.inputs[0], node_) ? then_ : else_).run({}, ctx);
  }
  const char* impl_name() const override { return "subgraph"; }

 private:
  std::string node_;
  Body then_, else_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("If", if_infer);
TWINFER_REGISTER_KERNEL("If", Backend::kCPU, 0, nullptr, make_kernel<IfKernel>);

}  // namespace twinfer::control
