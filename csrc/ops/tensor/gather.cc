// Gather and GatherElements (int32/int64 indices, negative ones counted from
// the end). Indices are checked before the copy starts, so a bad index gives
// a twinfer::Error naming the node instead of a read out of bounds.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

template <typename I>
void check_indices(const I* ind, int64_t n, int64_t limit, const std::string& node, const std::string& op) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = static_cast<int64_t>(ind[k]);
    if (v < -limit || v >= limit)
      throw Error(ErrorKind::kInvalidArgument,
                  "index " + std::to_string(v) + " is out of range [" + std::to_string(-limit) + ", " +
                      std::to_string(limit) + ")",
                  node, op);
  }
}

template <typename F>
void dispatch_index(DType dt, F&& f) {
  if (dt == DType::kInt32)
    f(TypeTag<int32_t>{});
  else
    f(TypeTag<int64_t>{});
}

bool gather_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

// ---- Gather ------------------------------------------------------------------

void gather_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const DType it = c.input_dtype(1);
  if (!(it == DType::kInt32 || it == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("indices must be int32/int64, got ") + dtype_name(it));
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& data = c.input_shape(0);
  const SymShape& ind = c.input_shape(1);
  if (!(!data.empty())) c.fail(ErrorKind::kShape, "data must have rank >= 1");
  const int64_t axis = normalize_axis(c, c.node().attr_int("axis", 0), static_cast<int64_t>(data.size()));
  SymShape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), ind.begin(), ind.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  c.set_output(0, dt, out);
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    const Shape data = info.input_shape(0);
    int64_t axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.size());
    for (int64_t d = 0; d < axis; ++d) outer_ *= data[d];
    n_ = data[axis];
    int64_t inner = 1;
    for (size_t d = axis + 1; d < data.size(); ++d) inner *= data[d];
    row_ = static_cast<size_t>(inner) * dtype_size(info.input_dtype(0));
  }

  void run(KernelContext& ctx) const override {
    dispatch_index(ctx.inputs[1].dtype, [&](auto tag) { go<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename I>
  void go(KernelContext& ctx) const {
    const I* ind = ctx.inputs[1].as<const I>();
    const int64_t k = ctx.inputs[1].numel();
    check_indices(ind, k, n_, node_, op_);
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const int64_t n = n_;
    auto rows = [&](auto tag) {
      using T = typename decltype(tag)::type;  // a row of one element of T, or bytes
      const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(1, row_));
      parallel_for(outer_ * k, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / k;
          int64_t i = static_cast<int64_t>(ind[t - o * k]);
          if (i < 0) i += n;
          const char* src = x + (o * n + i) * row_;
          if constexpr (std::is_same_v<T, char>)
            std::memcpy(y + t * row_, src, row_);
          else
            reinterpret_cast<T*>(y)[t] = *reinterpret_cast<const T*>(src);
        }
      });
    };
    switch (row_) {
      case 0: return;
      case 1: return rows(TypeTag<uint8_t>{});
      case 2: return rows(TypeTag<uint16_t>{});
      case 4: return rows(TypeTag<uint32_t>{});
      case 8: return rows(TypeTag<uint64_t>{});
      default: return rows(TypeTag<char>{});
    }
  }

  std::string node_, op_;
  int64_t outer_ = 1, n_ = 0;
  size_t row_ = 0;  // bytes of one gathered slice
};

// ---- GatherElements -------------------------------------------------------------

void gather_elements_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const DType it = c.input_dtype(1);
  if (!(it == DType::kInt32 || it == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("indices must be int32/int64, got ") + dtype_name(it));
  if (!c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& ind = c.input_shape(1);
  if (c.input_has_shape(0)) {
    const SymShape& data = c.input_shape(0);
    if (!(data.size() == ind.size() && !data.empty()))
      c.fail(ErrorKind::kShape,
             "data " + sym_shape_str(data) + " and indices " + sym_shape_str(ind) + " must have one rank >= 1");
    const int64_t axis = normalize_axis(c, c.node().attr_int("axis", 0), static_cast<int64_t>(data.size()));
    for (size_t d = 0; d < data.size(); ++d)
      if (static_cast<int64_t>(d) != axis && data[d].known() && ind[d].known())
        if (!(ind[d].value <= data[d].value))
          c.fail(ErrorKind::kShape,
                 "indices " + sym_shape_str(ind) + " exceed data " + sym_shape_str(data) + " outside the axis");
  }
  c.set_output(0, dt, ind);
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelBuildInfo& info)
      : node_(info.node().name), op_(info.node().op_type), ind_(info.input_shape(1)) {
    const Shape data = info.input_shape(0);
    axis_ = info.node().attr_int("axis", 0);
    if (axis_ < 0) axis_ += static_cast<int64_t>(data.size());
    for (size_t d = 0; d < data.size(); ++d)
      if (static_cast<int64_t>(d) != axis_ && ind_[d] > data[d])
        info.fail(ErrorKind::kShape, "indices " + shape_str(ind_) + " exceed data " + shape_str(data));
    dstrides_ = contiguous_strides(data);
    n_ = data[axis_];
  }

  void run(KernelContext& ctx) const override {
    dispatch_index(ctx.inputs[1].dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      dispatch_bytes(ctx.inputs[0].dtype, [&](auto tag) { go<typename decltype(tag)::type, I>(ctx); });
    });
  }

 private:
  template <typename T, typename I>
  void go(KernelContext& ctx) const {
    const I* ind = ctx.inputs[1].as<const I>();
    const int64_t total = ctx.inputs[1].numel();
    if (total == 0) return;
    check_indices(ind, total, n_, node_, op_);
    const T* x = ctx.inputs[0].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    const size_t r = ind_.size();
    const int64_t last = ind_[r - 1];
    const int64_t rows = total / last;
    const int64_t ls = dstrides_[r - 1], as = dstrides_[axis_], n = n_;
    const bool axis_last = axis_ == static_cast<int64_t>(r) - 1;
    parallel_for(rows, ctx.num_threads, std::max<int64_t>(1, kCopyGrain / last), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        // Data offset of the row's first element, the axis coordinate left out.
        int64_t rem = row, base = 0;
        for (size_t d = r - 1; d-- > 0;) {
          const int64_t i = rem % ind_[d];
          rem /= ind_[d];
          if (static_cast<int64_t>(d) != axis_) base += i * dstrides_[d];
        }
        const I* ip = ind + row * last;
        T* yp = y + row * last;
        for (int64_t j = 0; j < last; ++j) {
          int64_t v = static_cast<int64_t>(ip[j]);
          if (v < 0) v += n;
          yp[j] = axis_last ? x[base + v] : x[base + j * ls + v * as];
        }
      }
    });
  }

  std::string node_, op_;
  Shape ind_;
  Shape dstrides_;
  int64_t axis_ = 0, n_ = 0;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Gather", gather_infer);
TWINFER_REGISTER_KERNEL("Gather", Backend::kCPU, 0, gather_supports, make_kernel<GatherKernel>);
TWINFER_REGISTER_SCHEMA("GatherElements", gather_elements_infer);
TWINFER_REGISTER_KERNEL("GatherElements", Backend::kCPU, 0, gather_supports, make_kernel<GatherElementsKernel>);

}  // namespace twinfer::tensor
