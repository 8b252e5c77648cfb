// SequenceInsert and SequenceErase: a new sequence with one item more or
// less (the input's items are shared, not copied). Positions may count from
// the back; an insert position may be the length (append), the default.
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

void insert_infer(InferContext& c) {
  std::vector<DType> elem = input_elem_type(c, 0, DType::kSequence);
  const std::vector<DType> t = full_type(c.input_dtype(1), c.input(1).elem_type);
  if (!elem.empty() && t[0] != DType::kUndefined && elem != t)
    c.fail(ErrorKind::kDType, "cannot insert a " + full_type_str(t) + " value into a sequence of " + full_type_str(elem));
  c.set_output_container(0, DType::kSequence, elem.empty() && t[0] != DType::kUndefined ? t : elem);
}

class InsertKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorList& seq = sequence_input(ctx, 0);
    Tensor value = keep(ctx.inputs[1]);
    const std::vector<DType> t = full_type(value);
    if (!seq.elem_type.empty() && seq.elem_type != t)
      fail(ErrorKind::kDType, "cannot insert a " + full_type_str(t) + " value into a sequence of " +
                                  full_type_str(seq.elem_type));
    const int64_t n = static_cast<int64_t>(seq.items.size());
    int64_t pos = n;
    if (ctx.inputs.size() > 2 && ctx.inputs[2].data) {
      pos = read_index(ctx.inputs[2], node_, op_, "position");
      if (pos < -n || pos > n)
        fail(ErrorKind::kInvalidArgument, "position " + std::to_string(pos) + " is out of range for a sequence of " +
                                              std::to_string(n) + " (allowed: " + std::to_string(-n) + " to " +
                                              std::to_string(n) + ")");
      if (pos < 0) pos += n;
    }
    std::vector<Tensor> items = seq.items;
    items.insert(items.begin() + pos, std::move(value));
    return {Tensor::container(DType::kSequence, t, std::move(items))};
  }
};

void erase_infer(InferContext& c) {
  c.set_output_container(0, DType::kSequence, input_elem_type(c, 0, DType::kSequence));
}

class EraseKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorList& seq = sequence_input(ctx, 0);
    const int64_t n = static_cast<int64_t>(seq.items.size());
    int64_t pos = -1;  // the last item by default
    if (ctx.inputs.size() > 1 && ctx.inputs[1].data) pos = read_index(ctx.inputs[1], node_, op_, "position");
    if (pos < -n || pos >= n)
      fail(ErrorKind::kInvalidArgument, "position " + std::to_string(pos) + " is out of range for a sequence of " +
                                            std::to_string(n));
    if (pos < 0) pos += n;
    std::vector<Tensor> items = seq.items;
    items.erase(items.begin() + pos);
    return {Tensor::container(DType::kSequence, seq.elem_type, std::move(items))};
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("SequenceInsert", insert_infer);
TWINFER_REGISTER_KERNEL("SequenceInsert", Backend::kCPU, 0, nullptr, make_kernel<InsertKernel>);
TWINFER_REGISTER_SCHEMA("SequenceErase", erase_infer);
TWINFER_REGISTER_KERNEL("SequenceErase", Backend::kCPU, 0, nullptr, make_kernel<EraseKernel>);

}  // namespace twinfer::sequence
