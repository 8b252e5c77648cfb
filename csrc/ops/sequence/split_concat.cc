// SplitToSequence (a tensor cut along an axis into a sequence of parts) and
// ConcatFromSequence (the items joined along an existing axis, or stacked
// along a new one). Both see an array as [outer, axis, inner] and move rows
// of bytes.
#include <cstring>
#include <numeric>

#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d) p *= s[d];
  return p;
}

void split_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(!dtype_is_container(t))) c.fail(ErrorKind::kDType, "input must be a tensor");
  c.set_output_container(0, DType::kSequence, t == DType::kUndefined ? std::vector<DType>{} : std::vector<DType>{t});
}

class SplitKernel final : public SequenceKernel {
 public:
  explicit SplitKernel(const KernelBuildInfo& info)
      : SequenceKernel(info), axis_(info.node().attr_int("axis", 0)), keepdims_(info.node().attr_int("keepdims", 1)) {}
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    if (dtype_is_container(x.dtype) || x.dtype == DType::kString)
      fail(ErrorKind::kDType, std::string("cannot split a ") + dtype_name(x.dtype) + " value");
    const int64_t r = static_cast<int64_t>(x.rank());
    if (axis_ < -r || axis_ >= r)
      fail(ErrorKind::kShape, "axis " + std::to_string(axis_) + " is out of range for rank " + std::to_string(r));
    const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + r : axis_);
    const int64_t len = x.shape[axis];
    std::vector<int64_t> sizes;
    bool squeeze = false;
    const TensorView* split = ctx.inputs.size() > 1 && ctx.inputs[1].data ? &ctx.inputs[1] : nullptr;
    if (!split) {
      sizes.assign(static_cast<size_t>(len), 1);
      squeeze = keepdims_ == 0;
    } else if (split->rank() == 0) {
      const int64_t s = read_index(*split, node_, op_, "split");
      if (s <= 0) fail(ErrorKind::kInvalidArgument, "split must be positive, got " + std::to_string(s));
      for (int64_t at = 0; at < len; at += s) sizes.push_back(std::min(s, len - at));
    } else {
      if (split->rank() != 1 || (split->dtype != DType::kInt64 && split->dtype != DType::kInt32))
        fail(ErrorKind::kInvalidArgument, "split must be an int32/int64 scalar or 1-D tensor");
      for (int64_t k = 0; k < split->numel(); ++k) {
        const int64_t s = split->dtype == DType::kInt32 ? split->as<const int32_t>()[k] : split->as<const int64_t>()[k];
        if (s < 0) fail(ErrorKind::kInvalidArgument, "split sizes must not be negative");
        sizes.push_back(s);
      }
      if (std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != len)
        fail(ErrorKind::kShape, "split sizes sum to " +
                                    std::to_string(std::accumulate(sizes.begin(), sizes.end(), int64_t(0))) +
                                    " but axis " + std::to_string(axis) + " has length " + std::to_string(len));
    }
    const int64_t outer = product(x.shape, 0, axis);
    const size_t after = static_cast<size_t>(product(x.shape, axis + 1, x.rank())) * dtype_size(x.dtype);
    const size_t row = static_cast<size_t>(len) * after;
    std::vector<Tensor> items;
    int64_t start = 0;
    for (int64_t s : sizes) {
      Shape shape = x.shape;
      shape[axis] = s;
      if (squeeze) shape.erase(shape.begin() + axis);
      Tensor part = Tensor::empty(x.dtype, shape);
      const size_t bytes = static_cast<size_t>(s) * after;
      const char* src = static_cast<const char*>(x.data) + static_cast<size_t>(start) * after;
      char* dst = static_cast<char*>(part.data());
      if (bytes)
        for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * bytes, src + o * row, bytes);
      items.push_back(std::move(part));
      start += s;
    }
    return {Tensor::container(DType::kSequence, {x.dtype}, std::move(items))};
  }

 private:
  int64_t axis_, keepdims_;
};

void concat_infer(InferContext& c) {
  c.node().required_attr("axis");
  const std::vector<DType> elem = input_elem_type(c, 0, DType::kSequence);
  if (!(elem.size() <= 1)) c.fail(ErrorKind::kDType, "the items must be tensors, not " + full_type_str(elem));
  c.set_output_rank_unknown(0, elem.empty() ? DType::kUndefined : elem[0]);
}

class ConcatKernel final : public SequenceKernel {
 public:
  explicit ConcatKernel(const KernelBuildInfo& info)
      : SequenceKernel(info),
        axis_(info.node().required_attr("axis").i),
        new_axis_(info.node().attr_int("new_axis", 0) != 0) {}
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorList& seq = sequence_input(ctx, 0);
    if (seq.items.empty()) fail(ErrorKind::kInvalidArgument, "cannot concatenate an empty sequence");
    const Tensor& first = seq.items[0];
    if (dtype_is_container(first.dtype()) || first.dtype() == DType::kString)
      fail(ErrorKind::kDType, "cannot concatenate items of type " + first.type_name());
    const int64_t r = static_cast<int64_t>(first.shape().size()) + (new_axis_ ? 1 : 0);
    if (axis_ < -r || axis_ >= r)
      fail(ErrorKind::kShape, "axis " + std::to_string(axis_) + " is out of range for items of rank " +
                                  std::to_string(first.shape().size()) + (new_axis_ ? " (new_axis=1)" : ""));
    const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + r : axis_);
    // Each item as [outer, len, inner]: stacking gives every item len 1.
    std::vector<Shape> shapes;
    for (const Tensor& t : seq.items) {
      Shape s = t.shape();
      if (new_axis_) s.insert(s.begin() + axis, 1);
      shapes.push_back(std::move(s));
    }
    Shape out_shape = shapes[0];
    out_shape[axis] = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Tensor& t = seq.items[k];
      bool fits = t.dtype() == first.dtype() && shapes[k].size() == shapes[0].size();
      for (size_t d = 0; fits && d < shapes[k].size(); ++d) fits = d == axis || shapes[k][d] == shapes[0][d];
      if (!fits)
        fail(ErrorKind::kShape, "item " + std::to_string(k) + " (" + dtype_name(t.dtype()) + shape_str(t.shape()) +
                                    ") does not fit item 0 (" + dtype_name(first.dtype()) + shape_str(first.shape()) +
                                    ") for " + (new_axis_ ? "stacking" : "concatenation") + " on axis " +
                                    std::to_string(axis));
      out_shape[axis] += shapes[k][axis];
    }
    Tensor out = Tensor::empty(first.dtype(), out_shape);
    const int64_t outer = product(out_shape, 0, axis);
    const size_t after = static_cast<size_t>(product(out_shape, axis + 1, out_shape.size())) * dtype_size(first.dtype());
    const size_t row = static_cast<size_t>(out_shape[axis]) * after;
    size_t offset = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const size_t bytes = static_cast<size_t>(shapes[k][axis]) * after;
      const char* src = static_cast<const char*>(seq.items[k].data());
      char* dst = static_cast<char*>(out.data()) + offset;
      if (bytes)
        for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * row, src + o * bytes, bytes);
      offset += bytes;
    }
    return {out};
  }

 private:
  int64_t axis_;
  bool new_axis_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("SplitToSequence", split_infer);
TWINFER_REGISTER_KERNEL("SplitToSequence", Backend::kCPU, 0, nullptr, make_kernel<SplitKernel>);
TWINFER_REGISTER_SCHEMA("ConcatFromSequence", concat_infer);
TWINFER_REGISTER_KERNEL("ConcatFromSequence", Backend::kCPU, 0, nullptr, make_kernel<ConcatKernel>);

}  // namespace twinfer::sequence
