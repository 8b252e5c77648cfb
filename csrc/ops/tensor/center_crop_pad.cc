// CenterCropPad(input, shape) (opset 18): along `axes` (default all) each dim
// becomes shape[i], cropped or zero-padded around the centre (an odd
// difference puts the extra element at the end). The output is zeros with the
// overlap of input and output copied row by row.
#include <cstring>

#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

template <typename Ctx>
std::vector<int64_t> ccp_axes(const Ctx& c, int64_t rank, size_t n) {
  std::vector<int64_t> axes = c.node().attr_ints("axes");
  if (!c.node().has_attr("axes"))
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  axes = normalize_axes(c, axes, rank);
  if (axes.size() != n)
    c.fail(ErrorKind::kShape, "shape has " + std::to_string(n) + " values for " + std::to_string(axes.size()) + " axes");
  return axes;
}

void ccp_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(is_movable_dtype(dt)))
    c.fail(ErrorKind::kDType, std::string("CenterCropPad does not support ") + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  SymShape s = c.input_shape(0);
  std::vector<int64_t> shape;
  if (!c.constant_ints(1, &shape)) {
    SymShape u(s.size());
    if (c.node().has_attr("axes")) {
      u = s;
      for (int64_t a : normalize_axes(c, c.node().attr_ints("axes"), static_cast<int64_t>(s.size()))) u[a] = Dim();
    }
    return c.set_output(0, dt, u);
  }
  const std::vector<int64_t> axes = ccp_axes(c, static_cast<int64_t>(s.size()), shape.size());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!(shape[i] >= 0)) c.fail(ErrorKind::kInvalidArgument, "shape values must be >= 0");
    s[axes[i]] = Dim(shape[i]);
  }
  c.set_output(0, dt, s);
}

class CenterCropPadKernel final : public Kernel {
 public:
  explicit CenterCropPadKernel(const KernelBuildInfo& info)
      : in_(info.input_shape(0)), out_(info.output_shape(0)), elem_(dtype_size(info.input_dtype(0))) {
    for (size_t d = 0; d < in_.size(); ++d) {
      const int64_t a = in_[d], b = out_[d];
      n_.push_back(std::min(a, b));
      src_.push_back(a > b ? (a - b) / 2 : 0);
      dst_.push_back(b > a ? (b - a) / 2 : 0);
    }
  }

  void run(KernelContext& ctx) const override {
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    std::memset(y, 0, ctx.outputs[0].bytes());
    const size_t r = in_.size();
    if (r == 0) {
      std::memcpy(y, x, elem_);
      return;
    }
    if (shape_numel(n_) == 0) return;
    const Shape is = contiguous_strides(in_), os = contiguous_strides(out_);
    const int64_t rows = shape_numel(n_) / n_[r - 1];
    const size_t row_bytes = static_cast<size_t>(n_[r - 1]) * elem_;
    for (int64_t t = 0; t < rows; ++t) {
      int64_t rem = t, io = src_[r - 1], oo = dst_[r - 1];
      for (size_t d = r - 1; d-- > 0;) {
        const int64_t i = rem % n_[d];
        rem /= n_[d];
        io += (i + src_[d]) * is[d];
        oo += (i + dst_[d]) * os[d];
      }
      std::memcpy(y + oo * elem_, x + io * elem_, row_bytes);
    }
  }

 private:
  Shape in_, out_, n_, src_, dst_;
  size_t elem_;
};

bool ccp_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("CenterCropPad", ccp_infer);
TWINFER_REGISTER_KERNEL("CenterCropPad", Backend::kCPU, 0, ccp_supports, make_kernel<CenterCropPadKernel>);

}  // namespace twinfer::tensor
