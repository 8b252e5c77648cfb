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
  if (!(c.input_dtype(0) == DType::kBool))
    c.fail(ErrorKind::kDType, std::string("cond must be bool, got ") + dtype_name(c.input_dtype(0)));
  const auto& then_g = c.node().required_attr("then_branch");
  const auto& else_g = c.node().required_attr("else_branch");
  if (!(then_g.g && else_g.g)) c.fail(ErrorKind::kModelFormat, "then_branch and else_branch must be graphs");
  if (!(then_g.g->outputs.size() == c.num_outputs() && else_g.g->outputs.size() == c.num_outputs()))
    c.fail(ErrorKind::kModelFormat, "each branch must have as many outputs as the node");
  if (const Tensor* cond = c.input_constant(0)) {
    const bool take_then = *cond->data_as<bool>();
    auto types = infer_subgraph(c, take_then ? *then_g.g : *else_g.g, {});
    for (size_t i = 0; i < types.size(); ++i) set_output_type(c, i, types[i]);
    return;
  }
  // A branch whose shapes do not work out for these inputs is not the one
  // that will run: runtimes check only the branch they take, and exporters
  // emit branches meant for other inputs (silero VAD's 8 kHz path cannot take
  // a 16 kHz frame). The other branch then types the outputs; only when both
  // fail is the node in error (and the run would fail on either path).
  // (Only shape and dtype errors: an unsupported op stays an error at load.)
  auto infer_branch = [&](const graph::Graph& branch, std::string* error) {
    try {
      return infer_subgraph(c, branch, {});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kShape && e.kind() != ErrorKind::kDType) throw;
      *error = e.what();
      return std::vector<ValueType>{};
    }
  };
  std::string then_error, else_error;
  const std::vector<ValueType> a = infer_branch(*then_g.g, &then_error);
  const std::vector<ValueType> b = infer_branch(*else_g.g, &else_error);
  if (!then_error.empty() && !else_error.empty())
    c.fail(ErrorKind::kShape, "neither branch type-checks: then_branch: " + then_error + "; else_branch: " + else_error);
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    if (!then_error.empty()) set_output_type(c, i, b[i]);
    else if (!else_error.empty()) set_output_type(c, i, a[i]);
    else set_output_type(c, i, merge_types(c, a[i], b[i], i));
  }
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
