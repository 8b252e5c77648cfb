// Optional (wrap a value, or make an empty optional of the `type`
// attribute), OptionalHasElement and OptionalGetElement. Since opset 18 the
// last two also take a plain tensor or sequence (always "present") or, for
// HasElement, no input at all (never present).
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

void optional_infer(InferContext& c) {
  if (c.has_input(0)) {
    const auto& v = c.input(0);
    c.set_output_container(0, DType::kOptional, full_type(v.dtype, v.elem_type));
    return;
  }
  const graph::Attribute* type = c.node().attr("type");
  if (!(type && type->type == graph::Attribute::Type::kTypeProto))
    c.fail(ErrorKind::kModelFormat, "an Optional without an input needs the 'type' attribute");
  c.set_output_container(0, DType::kOptional, type->type_proto);
}

class OptionalKernel final : public SequenceKernel {
 public:
  explicit OptionalKernel(const KernelBuildInfo& info) : SequenceKernel(info) {
    if (const graph::Attribute* type = info.node().attr("type")) type_ = type->type_proto;
  }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (ctx.inputs.empty() || (!ctx.inputs[0].data && ctx.inputs[0].dtype == DType::kUndefined))
      return {Tensor::container(DType::kOptional, type_, {})};
    Tensor value = keep(ctx.inputs[0]);
    const std::vector<DType> t = full_type(value);
    if (!type_.empty() && type_ != t)
      fail(ErrorKind::kDType, "the value is a " + full_type_str(t) + " but the 'type' attribute says " +
                                  full_type_str(type_));
    return {Tensor::container(DType::kOptional, t, {std::move(value)})};
  }

 private:
  std::vector<DType> type_;
};

void has_element_infer(InferContext& c) { c.set_output(0, DType::kBool, {}); }

class HasElementKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    bool present = false;
    if (!ctx.inputs.empty()) {
      const TensorView& v = ctx.inputs[0];
      if (v.dtype == DType::kOptional) present = !v.list().items.empty();
      else present = v.dtype != DType::kUndefined;  // a tensor or sequence is there
    }
    Tensor out = Tensor::empty(DType::kBool, {});
    *out.data_as<bool>() = present;
    return {out};
  }
};

void get_element_infer(InferContext& c) {
  const auto& v = c.input(0);
  if (v.dtype != DType::kOptional) {  // opset 18: a plain value passes through
    set_output_typed(c, 0, full_type(v.dtype, v.elem_type));
    if (!dtype_is_container(v.dtype) && v.has_shape) c.set_output(0, v.dtype, v.shape);
    return;
  }
  set_output_typed(c, 0, input_elem_type(c, 0, DType::kOptional));
}

class GetElementKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& v = ctx.inputs[0];
    if (v.dtype != DType::kOptional) return {keep(v)};
    if (v.list().items.empty()) fail(ErrorKind::kInvalidArgument, "the optional input is empty");
    return {v.list().items[0]};
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Optional", optional_infer);
TWINFER_REGISTER_KERNEL("Optional", Backend::kCPU, 0, nullptr, make_kernel<OptionalKernel>);
TWINFER_REGISTER_SCHEMA("OptionalHasElement", has_element_infer);
TWINFER_REGISTER_KERNEL("OptionalHasElement", Backend::kCPU, 0, nullptr, make_kernel<HasElementKernel>);
TWINFER_REGISTER_SCHEMA("OptionalGetElement", get_element_infer);
TWINFER_REGISTER_KERNEL("OptionalGetElement", Backend::kCPU, 0, nullptr, make_kernel<GetElementKernel>);

}  // namespace twinfer::sequence
