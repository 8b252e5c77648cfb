// SequenceAt (one item, by a position that may count from the back) and
// SequenceLength (an int64 scalar).
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

void at_infer(InferContext& c) { set_output_typed(c, 0, input_elem_type(c, 0, DType::kSequence)); }

class AtKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorList& seq = sequence_input(ctx, 0);
    const int64_t n = static_cast<int64_t>(seq.items.size());
    int64_t pos = read_index(ctx.inputs[1], node_, op_, "position");
    if (pos < -n || pos >= n)
      fail(ErrorKind::kInvalidArgument, "position " + std::to_string(pos) + " is out of range for a sequence of " +
                                            std::to_string(n));
    if (pos < 0) pos += n;
    return {seq.items[pos]};  // shared: items are never written
  }
};

void length_infer(InferContext& c) {
  input_elem_type(c, 0, DType::kSequence);  // checks it is a sequence
  c.set_output(0, DType::kInt64, {});
}

class LengthKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    Tensor out = Tensor::empty(DType::kInt64, {});
    *out.data_as<int64_t>() = static_cast<int64_t>(sequence_input(ctx, 0).items.size());
    return {out};
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("SequenceAt", at_infer);
TWINFER_REGISTER_KERNEL("SequenceAt", Backend::kCPU, 0, nullptr, make_kernel<AtKernel>);
TWINFER_REGISTER_SCHEMA("SequenceLength", length_infer);
TWINFER_REGISTER_KERNEL("SequenceLength", Backend::kCPU, 0, nullptr, make_kernel<LengthKernel>);

}  // namespace twinfer::sequence
