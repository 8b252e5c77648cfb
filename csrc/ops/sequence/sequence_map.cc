// SequenceMap: runs `body` once per item of the input sequence; additional
// inputs that are sequences give the body their item at the same position,
// tensors are given whole. Each body output becomes a sequence.
#include "graph/subgraph.h"
#include "ops/control/control_util.h"
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

control::ValueType type_of(const std::vector<DType>& t) {
  control::ValueType v;
  if (t.empty()) return v;
  v.dtype = t[0];
  v.elem_type.assign(t.begin() + 1, t.end());
  return v;
}

void map_infer(InferContext& c) {
  const auto& body = c.node().required_attr("body");
  if (!(body.g != nullptr)) c.fail(ErrorKind::kModelFormat, "body must be a graph");
  const size_t n = graph::explicit_input_count(c.node());
  if (!(body.g->inputs.size() == n))
    c.fail(ErrorKind::kModelFormat,
           "body takes " + std::to_string(body.g->inputs.size()) + " inputs; the node has " + std::to_string(n));
  if (!(body.g->outputs.size() == c.num_outputs()))
    c.fail(ErrorKind::kModelFormat, "body must have as many outputs as the node");
  std::vector<control::ValueType> in;
  for (size_t i = 0; i < n; ++i) {
    const auto& v = c.input(i);
    if (i == 0 || v.dtype == DType::kSequence) in.push_back(type_of(input_elem_type(c, i, DType::kSequence)));
    else in.push_back(control::input_type(c, i));
  }
  const auto out = control::infer_subgraph(c, *body.g, in);
  for (size_t k = 0; k < out.size(); ++k) {
    const std::vector<DType> t = full_type(out[k].dtype, out[k].elem_type);
    c.set_output_container(k, DType::kSequence, t[0] == DType::kUndefined ? std::vector<DType>{} : t);
  }
}

class MapKernel final : public SequenceKernel {
 public:
  explicit MapKernel(const KernelBuildInfo& info)
      : SequenceKernel(info), body_(info, "body"), explicit_(graph::explicit_input_count(info.node())) {
    for (size_t k = 0; k < info.num_outputs(); ++k)
      out_types_.push_back(info.has_output(k) ? info.output(k).elem_type : std::vector<DType>{});
  }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const size_t n = sequence_input(ctx, 0).items.size();
    for (size_t i = 1; i < explicit_; ++i)
      if (ctx.inputs[i].dtype == DType::kSequence && ctx.inputs[i].list().items.size() != n)
        fail(ErrorKind::kShape, "input " + std::to_string(i) + " is a sequence of " +
                                    std::to_string(ctx.inputs[i].list().items.size()) + " items but input 0 has " +
                                    std::to_string(n));
    std::vector<Tensor> whole(explicit_);  // tensors given to every iteration, kept once
    for (size_t i = 1; i < explicit_; ++i)
      if (ctx.inputs[i].dtype != DType::kSequence) whole[i] = keep(ctx.inputs[i]);
    std::vector<std::vector<Tensor>> parts(out_types_.size());
    for (size_t it = 0; it < n; ++it) {
      std::vector<Tensor> in;
      for (size_t i = 0; i < explicit_; ++i)
        in.push_back(i == 0 || ctx.inputs[i].dtype == DType::kSequence ? ctx.inputs[i].list().items[it] : whole[i]);
      std::vector<Tensor> out = body_.run(in, ctx);
      for (size_t k = 0; k < parts.size() && k < out.size(); ++k) parts[k].push_back(std::move(out[k]));
    }
    std::vector<Tensor> result;
    for (size_t k = 0; k < parts.size(); ++k) {
      std::vector<DType> t = out_types_[k];
      if (!parts[k].empty()) t = full_type(parts[k][0]);
      for (size_t it = 0; it < parts[k].size(); ++it)
        if (full_type(parts[k][it]) != t)
          fail(ErrorKind::kDType, "body output " + std::to_string(k) + " is a " + parts[k][it].type_name() +
                                      " at item " + std::to_string(it) + " but a " + full_type_str(t) + " before");
      result.push_back(Tensor::container(DType::kSequence, std::move(t), std::move(parts[k])));
    }
    return result;
  }

 private:
  control::Body body_;
  size_t explicit_;
  std::vector<std::vector<DType>> out_types_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("SequenceMap", map_infer);
TWINFER_REGISTER_KERNEL("SequenceMap", Backend::kCPU, 0, nullptr, make_kernel<MapKernel>);

}  // namespace twinfer::sequence
