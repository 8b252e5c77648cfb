// GatherND (opset 11/12/13, with batch_dims): each row of the indices' last
// axis addresses one slice of data. Indices are checked before copying, so a
// bad one raises a twinfer::Error naming the node.
#include <cstring>

#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

void gather_nd_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(c.input_dtype(1) == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("indices must be int64, got ") + dtype_name(c.input_dtype(1)));
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& data = c.input_shape(0);
  const SymShape& ind = c.input_shape(1);
  const int64_t b = c.node().attr_int("batch_dims", 0);
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(ind.size());
  if (!(r >= 1 && q >= 1)) c.fail(ErrorKind::kShape, "data and indices must have rank >= 1");
  if (!(b >= 0 && b < std::min(r, q)))
    c.fail(ErrorKind::kShape, "batch_dims " + std::to_string(b) + " must be below both ranks");
  if (!ind.back().known()) return c.set_output_rank_unknown(0, dt);
  const int64_t k = ind.back().value;
  if (!(k >= 1 && k <= r - b))
    c.fail(ErrorKind::kShape,
           "the indices' last dim " + std::to_string(k) + " must be in [1, " + std::to_string(r - b) + "]");
  SymShape out(data.begin(), data.begin() + b);
  out.insert(out.end(), ind.begin() + b, ind.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  c.set_output(0, dt, out);
}

bool gather_nd_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

class GatherNDKernel final : public Kernel {
 public:
  explicit GatherNDKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    const Shape data = info.input_shape(0), ind = info.input_shape(1);
    const size_t b = static_cast<size_t>(info.node().attr_int("batch_dims", 0));
    for (size_t d = 0; d < b; ++d) {
      if (data[d] != ind[d])
        info.fail(ErrorKind::kShape, "batch dims of data " + shape_str(data) + " and indices " +
                                         shape_str(ind) + " differ");
      batches_ *= data[d];
    }
    k_ = ind.back();
    for (size_t d = b; d + 1 < ind.size(); ++d) tuples_ *= ind[d];
    int64_t slice = 1;
    for (size_t d = b + k_; d < data.size(); ++d) slice *= data[d];
    // Element strides of the k addressed dims, in data.
    for (int64_t j = k_; j-- > 0;) {
      dims_.insert(dims_.begin(), data[b + j]);
      strides_.insert(strides_.begin(), j + 1 == k_ ? slice : strides_.front() * data[b + j + 1]);
    }
    batch_elems_ = strides_.front() * dims_.front();
    elem_ = dtype_size(info.input_dtype(0));
    slice_bytes_ = static_cast<size_t>(slice) * elem_;
  }

  void run(KernelContext& ctx) const override {
    std::vector<int64_t> ind = view_ints(ctx.inputs[1]);
    // Resolve each tuple to a data element offset first (checking bounds).
    const int64_t n = batches_ * tuples_;
    std::vector<int64_t> offs(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      int64_t off = (t / tuples_) * batch_elems_;
      for (int64_t j = 0; j < k_; ++j) {
        int64_t v = ind[t * k_ + j];
        if (v < -dims_[j] || v >= dims_[j])
          throw Error(ErrorKind::kInvalidArgument,
                      "index " + std::to_string(v) + " is out of range [" + std::to_string(-dims_[j]) + ", " +
                          std::to_string(dims_[j]) + ")",
                      node_, op_);
        off += (v < 0 ? v + dims_[j] : v) * strides_[j];
      }
      offs[t] = off;
    }
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<size_t>(1, slice_bytes_));
    parallel_for(n, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) std::memcpy(y + t * slice_bytes_, x + offs[t] * elem_, slice_bytes_);
    });
  }

 private:
  std::string node_, op_;
  int64_t batches_ = 1, tuples_ = 1, k_ = 1, batch_elems_ = 1;
  std::vector<int64_t> dims_, strides_;
  size_t elem_ = 1, slice_bytes_ = 0;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("GatherND", gather_nd_infer);
TWINFER_REGISTER_KERNEL("GatherND", Backend::kCPU, 0, gather_nd_supports, make_kernel<GatherNDKernel>);

}  // namespace twinfer::tensor
