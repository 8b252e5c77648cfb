// Scatter ops: ScatterElements (and its old name Scatter, opsets 9-10),
// ScatterND and TensorScatter (the KV-cache update of opset 24). The output
// starts as a copy of data and the updates are written (or combined with
// `reduction`: add/mul since opset 16, max/min since 18) in index order, so
// with duplicate indices and reduction "none" the last update wins, like the
// reference. Indices are validated before anything is written.
#include <algorithm>
#include <cstring>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/scatter_reduce.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

using Reduction = ScatterReduction;

template <typename Ctx>
Reduction reduction_of(const Ctx& c) {
  return scatter_reduction_of(c);
}

// dst = reduce(dst, src) for one element of storage type T (shared with CUDA).
template <typename T>
inline void combine(T& dst, const T& src, Reduction r) {
  scatter_combine(dst, src, r);
}

[[noreturn]] void bad_index(int64_t v, int64_t n, const std::string& node, const std::string& op) {
  throw Error(ErrorKind::kInvalidArgument,
              "index " + std::to_string(v) + " is out of range [" + std::to_string(-n) + ", " + std::to_string(n) + ")",
              node, op);
}

bool scatter_dtypes(const KernelBuildInfo& info, std::string* why) {
  if (!check_movable(info, 0, why)) return false;
  if (!ew::check_same_dtype(info, {0, 2}, why)) return false;
  return check_index_dtype(info, 1, why);
}

void check_update_dtype(InferContext& c, size_t upd) {
  if (!(c.input_dtype(upd) == c.input_dtype(0)))
    c.fail(ErrorKind::kDType,
           std::string("updates dtype ") + dtype_name(c.input_dtype(upd)) + " differs from data dtype " +
               dtype_name(c.input_dtype(0)));
}

// ---- ScatterElements / Scatter ------------------------------------------------

void scatter_elements_infer(InferContext& c) {
  reduction_of(c);
  check_update_dtype(c, 2);
  const DType it = c.input_dtype(1);
  if (!(it == DType::kInt32 || it == DType::kInt64)) c.fail(ErrorKind::kDType, "indices must be int32/int64");
  if (c.input_has_shape(0) && c.input_has_shape(1) && c.input_has_shape(2)) {
    const SymShape &d = c.input_shape(0), &i = c.input_shape(1), &u = c.input_shape(2);
    if (!(d.size() == i.size() && i.size() == u.size() && !d.empty()))
      c.fail(ErrorKind::kShape,
             "data " + sym_shape_str(d) + ", indices " + sym_shape_str(i) + " and updates " + sym_shape_str(u) +
                 " must have one rank >= 1");
    normalize_axis(c, c.node().attr_int("axis", 0), static_cast<int64_t>(d.size()));
    for (size_t k = 0; k < i.size(); ++k)
      if (!(!(i[k].known() && u[k].known()) || i[k].value == u[k].value))
        c.fail(ErrorKind::kShape,
               "indices " + sym_shape_str(i) + " and updates " + sym_shape_str(u) + " must have one shape");
  }
  infer_same_as_input0(c);
}

class ScatterElementsKernel final : public Kernel {
 public:
  explicit ScatterElementsKernel(const KernelBuildInfo& info)
      : red_(reduction_of(info)), node_(info.node().name), op_(info.node().op_type),
        data_(info.input_shape(0)), ind_(info.input_shape(1)) {
    axis_ = info.node().attr_int("axis", 0);
    if (axis_ < 0) axis_ += static_cast<int64_t>(data_.size());
    if (info.input_shape(2) != ind_)
      info.fail(ErrorKind::kShape, "indices " + shape_str(ind_) + " and updates " + shape_str(info.input_shape(2)) +
                                       " must have one shape");
    for (size_t d = 0; d < data_.size(); ++d)
      if (static_cast<int64_t>(d) != axis_ && ind_[d] > data_[d])
        info.fail(ErrorKind::kShape, "indices " + shape_str(ind_) + " exceed data " + shape_str(data_));
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    copy_bytes(ctx.outputs[0].data, x.data, x.bytes(), ctx.num_threads);
    const std::vector<int64_t> ind = view_ints(ctx.inputs[1]);
    const int64_t n = data_[axis_];
    for (int64_t v : ind)
      if (v < -n || v >= n) bad_index(v, n, node_, op_);
    if (red_ == Reduction::kNone) {
      dispatch_bytes(x.dtype, [&](auto tag) { go<typename decltype(tag)::type>(ctx, ind); });
    } else {
      ew::dispatch_typeset<ew::kAllTypes>(x.dtype, [&](auto tag) { go<typename decltype(tag)::type>(ctx, ind); });
    }
  }

 private:
  template <typename T>
  void go(KernelContext& ctx, const std::vector<int64_t>& ind) const {
    const T* u = ctx.inputs[2].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    const Shape ds = contiguous_strides(data_);
    const size_t r = ind_.size();
    const int64_t total = static_cast<int64_t>(ind.size()), n = data_[axis_];
    std::vector<int64_t> coord(r, 0);
    for (int64_t t = 0; t < total; ++t) {
      int64_t off = 0;
      for (size_t d = 0; d < r; ++d) {
        int64_t i = coord[d];
        if (static_cast<int64_t>(d) == axis_) {
          i = ind[t];
          if (i < 0) i += n;
        }
        off += i * ds[d];
      }
      combine(y[off], u[t], red_);
      for (size_t d = r; d-- > 0;) {
        if (++coord[d] < ind_[d]) break;
        coord[d] = 0;
      }
    }
  }

  Reduction red_;
  std::string node_, op_;
  Shape data_, ind_;
  int64_t axis_ = 0;
};

// ---- ScatterND -----------------------------------------------------------------

void scatter_nd_infer(InferContext& c) {
  reduction_of(c);
  check_update_dtype(c, 2);
  if (!(c.input_dtype(1) == DType::kInt64 || c.input_dtype(1) == DType::kInt32))
    c.fail(ErrorKind::kDType, "indices must be int64");
  if (c.input_has_shape(0) && c.input_has_shape(1) && c.input_has_shape(2)) {
    const SymShape &d = c.input_shape(0), &i = c.input_shape(1), &u = c.input_shape(2);
    if (!(!d.empty() && !i.empty())) c.fail(ErrorKind::kShape, "data and indices must have rank >= 1");
    if (i.back().known()) {
      const int64_t k = i.back().value;
      if (!(k <= static_cast<int64_t>(d.size())))
        c.fail(ErrorKind::kShape,
               "indices " + sym_shape_str(i) + " index more dims than data " + sym_shape_str(d) + " has");
      const size_t want = i.size() - 1 + d.size() - k;
      bool ok = u.size() == want;
      for (size_t t = 0; ok && t < want; ++t) {
        const Dim& e = t < i.size() - 1 ? i[t] : d[k + t - (i.size() - 1)];
        ok = !(e.known() && u[t].known()) || e.value == u[t].value;
      }
      if (!(ok))
        c.fail(ErrorKind::kShape,
               "updates " + sym_shape_str(u) + " must be indices.shape[:-1] + data.shape[k:] for data " +
                   sym_shape_str(d) + " and indices " + sym_shape_str(i));
    }
  }
  infer_same_as_input0(c);
}

class ScatterNDKernel final : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelBuildInfo& info)
      : red_(reduction_of(info)), node_(info.node().name), data_(info.input_shape(0)) {
    const Shape ind = info.input_shape(1);
    k_ = ind.back();
    if (k_ > static_cast<int64_t>(data_.size())) info.fail(ErrorKind::kShape, "indices index too many dims");
    n_ = shape_numel(ind) / std::max<int64_t>(1, k_);
    if (k_ == 0) n_ = shape_numel(Shape(ind.begin(), ind.end() - 1));
    for (size_t d = k_; d < data_.size(); ++d) slice_ *= data_[d];
    if (shape_numel(info.input_shape(2)) != n_ * slice_)
      info.fail(ErrorKind::kShape, "updates " + shape_str(info.input_shape(2)) + " do not match indices " +
                                       shape_str(ind) + " and data " + shape_str(data_));
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    copy_bytes(ctx.outputs[0].data, x.data, x.bytes(), ctx.num_threads);
    const std::vector<int64_t> ind = view_ints(ctx.inputs[1]);
    const Shape ds = contiguous_strides(data_);
    std::vector<int64_t> offs(static_cast<size_t>(n_));
    for (int64_t t = 0; t < n_; ++t) {
      int64_t off = 0;
      for (int64_t d = 0; d < k_; ++d) {
        int64_t v = ind[t * k_ + d];
        if (v < -data_[d] || v >= data_[d]) bad_index(v, data_[d], node_, "ScatterND");
        if (v < 0) v += data_[d];
        off += v * ds[d];
      }
      offs[t] = off;
    }
    if (red_ == Reduction::kNone) {
      const size_t row = static_cast<size_t>(slice_) * dtype_size(x.dtype);
      char* y = static_cast<char*>(ctx.outputs[0].data);
      const char* u = static_cast<const char*>(ctx.inputs[2].data);
      for (int64_t t = 0; t < n_; ++t)
        std::memcpy(y + offs[t] * dtype_size(x.dtype), u + t * row, row);
      return;
    }
    ew::dispatch_typeset<ew::kAllTypes>(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = ctx.outputs[0].as<T>();
      const T* u = ctx.inputs[2].as<const T>();
      for (int64_t t = 0; t < n_; ++t)
        for (int64_t j = 0; j < slice_; ++j) combine(y[offs[t] + j], u[t * slice_ + j], red_);
    });
  }

 private:
  Reduction red_;
  std::string node_;
  Shape data_;
  int64_t k_ = 0, n_ = 0, slice_ = 1;
};

// ---- TensorScatter -------------------------------------------------------------

void tensor_scatter_infer(InferContext& c) {
  check_update_dtype(c, 1);
  const std::string mode = c.node().attr_string("mode", "linear");
  if (!(mode == "linear" || mode == "circular"))
    c.fail(ErrorKind::kInvalidArgument, "mode must be linear or circular");
  if (c.has_input(2))
    if (!(c.input_dtype(2) == DType::kInt64)) c.fail(ErrorKind::kDType, "write_indices must be int64");
  if (c.input_has_shape(0) && c.input_has_shape(1)) {
    const SymShape &p = c.input_shape(0), &u = c.input_shape(1);
    if (!(p.size() == u.size() && p.size() >= 2))
      c.fail(ErrorKind::kShape,
             "past_cache " + sym_shape_str(p) + " and update " + sym_shape_str(u) + " must have one rank >= 2");
    const int64_t axis = normalize_axis(c, c.node().attr_int("axis", -2), static_cast<int64_t>(p.size()));
    if (!(axis != 0)) c.fail(ErrorKind::kShape, "axis must not be the batch axis");
    for (size_t d = 0; d < p.size(); ++d) {
      if (!p[d].known() || !u[d].known()) continue;
      if (static_cast<int64_t>(d) == axis) {
        if (u[d].value > p[d].value)
          c.fail(ErrorKind::kShape, "update " + sym_shape_str(u) + " is longer than the cache " + sym_shape_str(p));
      } else if (u[d].value != p[d].value) {
        c.fail(ErrorKind::kShape, "update " + sym_shape_str(u) + " and cache " + sym_shape_str(p) +
            " differ outside the axis");
      }
    }
  }
  infer_same_as_input0(c);
}

class TensorScatterKernel final : public Kernel {
 public:
  explicit TensorScatterKernel(const KernelBuildInfo& info)
      : circular_(info.node().attr_string("mode", "linear") == "circular"), node_(info.node().name) {
    const Shape p = info.input_shape(0), u = info.input_shape(1);
    int64_t axis = info.node().attr_int("axis", -2);
    if (axis < 0) axis += static_cast<int64_t>(p.size());
    batch_ = p[0];
    for (int64_t d = 1; d < axis; ++d) mid_ *= p[d];
    for (size_t d = axis + 1; d < p.size(); ++d) inner_ *= p[d];
    max_seq_ = p[axis];
    seq_ = u[axis];
    if (info.has_input(2) && shape_numel(info.input_shape(2)) != batch_)
      info.fail(ErrorKind::kShape, "write_indices " + shape_str(info.input_shape(2)) + " must hold one index per batch");
  }

  void run(KernelContext& ctx) const override {
    const TensorView& past = ctx.inputs[0];
    copy_bytes(ctx.outputs[0].data, past.data, past.bytes(), ctx.num_threads);
    const size_t es = dtype_size(past.dtype), row = static_cast<size_t>(inner_) * es;
    const int64_t* wi = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const int64_t>() : nullptr;
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const char* u = static_cast<const char*>(ctx.inputs[1].data);
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t w = wi ? wi[b] : 0;
      if (w < 0 || (!circular_ && w + seq_ > max_seq_))
        throw Error(ErrorKind::kInvalidArgument,
                    "write index " + std::to_string(w) + " + update length " + std::to_string(seq_) +
                        " does not fit the cache length " + std::to_string(max_seq_),
                    node_, "TensorScatter");
      for (int64_t m = 0; m < mid_; ++m)
        for (int64_t s = 0; s < seq_; ++s) {
          const int64_t cs = circular_ ? (w + s) % max_seq_ : w + s;
          std::memcpy(y + ((b * mid_ + m) * max_seq_ + cs) * row, u + ((b * mid_ + m) * seq_ + s) * row, row);
        }
    }
  }

 private:
  bool circular_;
  std::string node_;
  int64_t batch_ = 1, mid_ = 1, inner_ = 1, max_seq_ = 0, seq_ = 0;
};

bool tensor_scatter_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && ew::check_same_dtype(info, {0, 1}, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("ScatterElements", scatter_elements_infer);
TWINFER_REGISTER_KERNEL("ScatterElements", Backend::kCPU, 0, scatter_dtypes, make_kernel<ScatterElementsKernel>);
TWINFER_REGISTER_SCHEMA("Scatter", scatter_elements_infer);
TWINFER_REGISTER_KERNEL("Scatter", Backend::kCPU, 0, scatter_dtypes, make_kernel<ScatterElementsKernel>);
TWINFER_REGISTER_SCHEMA("ScatterND", scatter_nd_infer);
TWINFER_REGISTER_KERNEL("ScatterND", Backend::kCPU, 0, scatter_dtypes, make_kernel<ScatterNDKernel>);
TWINFER_REGISTER_SCHEMA("TensorScatter", tensor_scatter_infer);
TWINFER_REGISTER_KERNEL("TensorScatter", Backend::kCPU, 0, tensor_scatter_supports, make_kernel<TensorScatterKernel>);

}  // namespace twinfer::tensor
