// Data-movement ops (Reshape, Gather, Concat, Transpose, Where...) on string
// tensors. Their own kernels copy elements as bytes, which strings (owning
// std::string objects, core/tensor.h) must never be. Rather than a second,
// string-typed copy of every op's index logic, this adapter runs the op's
// own kernel on int64 stand-ins: each string input becomes a tensor of "which
// string" numbers (distinct across inputs), and each string output is then
// filled with the strings its numbers name. Anything that only moves
// elements works this way; the numeric inputs (indices, shapes, conditions)
// go to the inner kernel unchanged.
#include <algorithm>
#include <numeric>

#include "ops/kernel.h"

namespace twinfer::tensor {
namespace {

// The ops whose outputs are their data inputs' elements, moved.
const char* const kMovementOps[] = {
    "Identity", "Reshape", "Flatten",  "Squeeze",  "Unsqueeze",      "Transpose",       "Gather",
    "GatherElements", "GatherND", "Concat", "Split", "Slice", "Expand", "Tile", "Compress",
    "ReverseSequence", "Where", "ScatterElements", "ScatterND", "DepthToSpace", "SpaceToDepth",
};

class StringMovementKernel final : public Kernel {
 public:
  explicit StringMovementKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    // The node alone in a graph of its own, its string values as int64.
    graph::Graph& g = mini_;
    graph::Node n = info.node();
    auto add = [&](const graph::Value& v, bool* was_string) {
      graph::Value c = v;
      c.producer = -1;
      *was_string = c.dtype == DType::kString;
      if (*was_string) {
        c.dtype = DType::kInt64;
        c.constant = Tensor();  // its numbers are made per run
      }
      g.values.push_back(std::move(c));
      return static_cast<int>(g.values.size()) - 1;
    };
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      bool s = false;
      if (info.has_input(i)) n.inputs[i] = add(info.input(i), &s);
      string_in_.push_back(s);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      bool s = false;
      if (info.has_output(o)) n.outputs[o] = add(info.output(o), &s);
      string_out_.push_back(s);
    }
    g.nodes.push_back(std::move(n));
    KernelBuildInfo inner_info(g, g.nodes[0], info.opset(), Backend::kCPU, info.precision());
    std::string why;
    const KernelDef* def = select_kernel(inner_info, &why);
    if (!def) info.fail(ErrorKind::kUnsupportedOp, "on string tensors: " + why);
    inner_ = def->create(inner_info);
  }

  bool dynamic_outputs() const override { return inner_->dynamic_outputs(); }
  const char* impl_name() const override { return "strings (by index)"; }

  void run(KernelContext& ctx) const override {
    std::vector<Tensor> keep;
    KernelContext kc = stand_ins(ctx, &keep);
    std::vector<Tensor> outs(ctx.outputs.size());
    for (size_t o = 0; o < ctx.outputs.size(); ++o) {
      if (!string_out_[o] || !ctx.outputs[o].data) continue;
      outs[o] = Tensor::empty(DType::kInt64, ctx.outputs[o].shape);
      kc.outputs[o] = outs[o].view();
    }
    std::vector<char> scratch(inner_->scratch_bytes() + 64);
    kc.scratch = scratch.data();
    inner_->run(kc);
    for (size_t o = 0; o < ctx.outputs.size(); ++o)
      if (outs[o].defined()) fill(ctx, outs[o].view(), ctx.outputs[o].as<std::string>());
  }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    std::vector<Tensor> keep;
    KernelContext kc = stand_ins(ctx, &keep);
    std::vector<Tensor> outs = inner_->run_dynamic(kc);
    for (size_t o = 0; o < outs.size() && o < string_out_.size(); ++o) {
      if (!string_out_[o]) continue;
      Tensor s = Tensor::empty(DType::kString, outs[o].shape());
      fill(ctx, outs[o].view(), s.data_as<std::string>());
      outs[o] = s;
    }
    return outs;
  }

 private:
  // ctx with each string input replaced by its numbers: input k's element j
  // is base(k) + j, the bases counting the string inputs' elements in order.
  KernelContext stand_ins(const KernelContext& ctx, std::vector<Tensor>* keep) const {
    KernelContext kc = ctx;
    int64_t base = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (!string_in_[i] || !ctx.inputs[i].data) continue;
      if (ctx.inputs[i].dtype != DType::kString) fail("input " + std::to_string(i) + " is not a string tensor");
      Tensor t = Tensor::empty(DType::kInt64, ctx.inputs[i].shape);
      std::iota(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel(), base);
      base += t.numel();
      kc.inputs[i] = t.view();
      keep->push_back(std::move(t));
    }
    return kc;
  }

  // The strings `numbers` name (see stand_ins), written to `out`.
  void fill(const KernelContext& ctx, const TensorView& numbers, std::string* out) const {
    std::vector<std::pair<int64_t, const TensorView*>> bases;  // (first number, input)
    int64_t base = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (!string_in_[i] || !ctx.inputs[i].data) continue;
      bases.emplace_back(base, &ctx.inputs[i]);
      base += ctx.inputs[i].numel();
    }
    const int64_t* k = numbers.as<const int64_t>();
    for (int64_t j = 0; j < numbers.numel(); ++j) {
      if (k[j] < 0 || k[j] >= base) fail("an output element names no input string");
      auto it = std::upper_bound(bases.begin(), bases.end(), k[j],
                                 [](int64_t v, const auto& b) { return v < b.first; });
      --it;
      out[j] = it->second->as<const std::string>()[k[j] - it->first];
    }
  }

  [[noreturn]] void fail(const std::string& msg) const { throw Error(ErrorKind::kRuntime, msg, node_, op_); }

  std::string node_, op_;
  graph::Graph mini_;
  std::vector<bool> string_in_, string_out_;
  std::unique_ptr<Kernel> inner_;
};

bool string_movement_supports(const KernelBuildInfo& info, std::string*) { return node_has_strings(info); }

[[maybe_unused]] const bool kRegistered = [] {
  for (const char* op : kMovementOps)
    register_kernel(KernelDef{op, "", Backend::kCPU, 10, string_movement_supports,
                              make_kernel<StringMovementKernel>, /*strings=*/true});
  return true;
}();

}  // namespace
}  // namespace twinfer::tensor
