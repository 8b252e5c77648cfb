// SequenceEmpty and SequenceConstruct: new sequences, from nothing (of the
// `dtype` attribute) or from tensors of one dtype.
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

DType empty_dtype(const graph::Node& n) {
  const int64_t code = n.attr_int("dtype", 1);  // float by default
  const DType t = dtype_from_onnx(static_cast<int32_t>(code));
  if (t == DType::kUndefined || t == DType::kString)
    throw Error(ErrorKind::kUnsupportedOp, "dtype " + std::to_string(code) + " is not supported in a sequence",
                n.name, n.op_type);
  return t;
}

void empty_infer(InferContext& c) { c.set_output_container(0, DType::kSequence, {empty_dtype(c.node())}); }

class EmptyKernel final : public SequenceKernel {
 public:
  explicit EmptyKernel(const KernelBuildInfo& info) : SequenceKernel(info), dtype_(empty_dtype(info.node())) {}
  std::vector<Tensor> run_dynamic(KernelContext&) const override {
    return {Tensor::container(DType::kSequence, {dtype_}, {})};
  }

 private:
  DType dtype_;
};

void construct_infer(InferContext& c) {
  if (!(c.num_inputs() >= 1)) c.fail(ErrorKind::kModelFormat, "needs at least one input");
  const DType t = c.input_dtype(0);
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const DType ti = c.input_dtype(i);
    if (!(!dtype_is_container(ti)))
      c.fail(ErrorKind::kDType,
             "input " + std::to_string(i) + " must be a tensor, got " + type_str(ti, c.input(i).elem_type));
    if (!(ti == t || ti == DType::kUndefined || t == DType::kUndefined))
      c.fail(ErrorKind::kDType,
             std::string("all inputs must have one dtype; input 0 is ") + dtype_name(t) + ", input " +
                 std::to_string(i) + " is " + dtype_name(ti));
  }
  c.set_output_container(0, DType::kSequence, t == DType::kUndefined ? std::vector<DType>{} : std::vector<DType>{t});
}

class ConstructKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    std::vector<Tensor> items;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i].dtype != ctx.inputs[0].dtype)
        fail(ErrorKind::kDType, std::string("all inputs must have one dtype; input 0 is ") +
                                    dtype_name(ctx.inputs[0].dtype) + ", input " + std::to_string(i) + " is " +
                                    dtype_name(ctx.inputs[i].dtype));
      items.push_back(keep(ctx.inputs[i]));
    }
    return {Tensor::container(DType::kSequence, {ctx.inputs[0].dtype}, std::move(items))};
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("SequenceEmpty", empty_infer);
TWINFER_REGISTER_KERNEL("SequenceEmpty", Backend::kCPU, 0, nullptr, make_kernel<EmptyKernel>);
TWINFER_REGISTER_SCHEMA("SequenceConstruct", construct_infer);
TWINFER_REGISTER_KERNEL("SequenceConstruct", Backend::kCPU, 0, nullptr, make_kernel<ConstructKernel>);

}  // namespace twinfer::sequence
