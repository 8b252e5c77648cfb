#include "ops/sequence/sequence_util.h"

#include "ops/control/control_util.h"

namespace twinfer::sequence {

std::vector<DType> full_type(DType dtype, const std::vector<DType>& elem_type) {
  std::vector<DType> t{dtype};
  if (dtype_is_container(dtype)) t.insert(t.end(), elem_type.begin(), elem_type.end());
  return t;
}

std::vector<DType> full_type(const Tensor& t) {
  return full_type(t.dtype(), dtype_is_container(t.dtype()) ? t.list().elem_type : std::vector<DType>{});
}

std::string full_type_str(const std::vector<DType>& t) {
  if (t.empty()) return "?";
  return type_str(t[0], std::vector<DType>(t.begin() + 1, t.end()));
}

std::vector<DType> input_elem_type(const InferContext& c, size_t i, DType kind) {
  const auto& v = c.input(i);
  if (v.dtype != kind)
    c.fail(ErrorKind::kDType, "input '" + v.name + "' must be a" + (kind == DType::kOptional ? "n " : " ") +
                                  dtype_name(kind) + ", got " + type_str(v.dtype, v.elem_type));
  if (const Tensor* t = c.input_constant(i)) return t->list().elem_type;
  return v.elem_type;
}

void set_output_typed(InferContext& c, size_t i, const std::vector<DType>& t) {
  if (t.empty()) c.set_output_rank_unknown(i, DType::kUndefined);
  else if (dtype_is_container(t[0])) c.set_output_container(i, t[0], std::vector<DType>(t.begin() + 1, t.end()));
  else c.set_output_rank_unknown(i, t[0]);
}

int64_t read_index(const TensorView& v, const std::string& node, const std::string& op, const char* what) {
  if (v.numel() != 1 || (v.dtype != DType::kInt64 && v.dtype != DType::kInt32))
    throw Error(ErrorKind::kInvalidArgument,
                std::string(what) + " must be one int32/int64 value, got " + dtype_name(v.dtype) + shape_str(v.shape),
                node, op);
  return v.dtype == DType::kInt32 ? *v.as<const int32_t>() : *v.as<const int64_t>();
}

Tensor keep(const TensorView& v) {
  if (dtype_is_container(v.dtype)) return Tensor::container(v.dtype, v.list().elem_type, v.list().items);
  return control::borrow_view(v).clone();
}

void SequenceKernel::run(KernelContext& ctx) const {
  control::copy_to_outputs(run_dynamic(ctx), ctx, node_, op_);
}

const TensorList& SequenceKernel::sequence_input(const KernelContext& ctx, size_t i) const {
  const TensorView& v = ctx.inputs[i];
  if (v.dtype != DType::kSequence || !v.data)
    fail(ErrorKind::kDType, "input " + std::to_string(i) + " must be a sequence, got " + dtype_name(v.dtype));
  return v.list();
}

}  // namespace twinfer::sequence
