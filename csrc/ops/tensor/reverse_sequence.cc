// ReverseSequence(input, sequence_lens): for each batch entry b, the first
// sequence_lens[b] elements along time_axis are reversed, the rest copied.
// batch_axis/time_axis are 0 and 1 in either order (default batch 1, time 0).
#include <cstring>

#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

template <typename Ctx>
void reverse_axes(const Ctx& c, int64_t* batch, int64_t* time) {
  *batch = c.node().attr_int("batch_axis", 1);
  *time = c.node().attr_int("time_axis", 0);
  if (!((*batch == 0 && *time == 1) || (*batch == 1 && *time == 0)))
    c.fail(ErrorKind::kInvalidArgument, "batch_axis and time_axis must be 0 and 1 in some order");
}

void reverse_sequence_infer(InferContext& c) {
  int64_t ba, ta;
  reverse_axes(c, &ba, &ta);
  if (!(c.input_dtype(1) == DType::kInt64 || c.input_dtype(1) == DType::kInt32))
    c.fail(ErrorKind::kDType, "sequence_lens must be int64");
  if (c.input_has_shape(0)) {
    const SymShape& s = c.input_shape(0);
    if (!(s.size() >= 2)) c.fail(ErrorKind::kShape, "input " + sym_shape_str(s) + " must have rank >= 2");
    if (c.input_has_shape(1)) {
      const SymShape& l = c.input_shape(1);
      if (!(l.size() == 1)) c.fail(ErrorKind::kShape, "sequence_lens must be 1-D");
      if (!(!(l[0].known() && s[ba].known()) || l[0].value == s[ba].value))
        c.fail(ErrorKind::kShape,
               "sequence_lens " + sym_shape_str(l) + " must have one entry per batch of " + sym_shape_str(s));
    }
  }
  infer_same_as_input0(c);
}

class ReverseSequenceKernel final : public Kernel {
 public:
  explicit ReverseSequenceKernel(const KernelBuildInfo& info) : node_(info.node().name) {
    reverse_axes(info, &batch_axis_, &time_axis_);
    const Shape s = info.input_shape(0);
    batch_ = s[batch_axis_];
    time_ = s[time_axis_];
    for (size_t d = 2; d < s.size(); ++d) inner_ *= s[d];
    row_ = static_cast<size_t>(inner_) * dtype_size(info.input_dtype(0));
    if (shape_numel(info.input_shape(1)) != batch_) info.fail(ErrorKind::kShape, "sequence_lens must have batch entries");
  }

  void run(KernelContext& ctx) const override {
    const std::vector<int64_t> lens = view_ints(ctx.inputs[1]);
    for (int64_t l : lens)
      if (l < 0 || l > time_)
        throw Error(ErrorKind::kInvalidArgument,
                    "sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(time_) + "]", node_,
                    "ReverseSequence");
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < time_; ++t) {
        const int64_t src_t = t < lens[b] ? lens[b] - 1 - t : t;
        std::memcpy(y + offset(b, t), x + offset(b, src_t), row_);
      }
  }

 private:
  size_t offset(int64_t b, int64_t t) const {
    return static_cast<size_t>(batch_axis_ == 0 ? b * time_ + t : t * batch_ + b) * row_;
  }
  std::string node_;
  int64_t batch_axis_ = 1, time_axis_ = 0, batch_ = 0, time_ = 0, inner_ = 1;
  size_t row_ = 0;
};

bool reverse_sequence_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("ReverseSequence", reverse_sequence_infer);
TWINFER_REGISTER_KERNEL("ReverseSequence", Backend::kCPU, 0, reverse_sequence_supports,
                        make_kernel<ReverseSequenceKernel>);

}  // namespace twinfer::tensor
