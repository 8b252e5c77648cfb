// Ops whose output size depends on the input values: NonZero, Compress and
// Unique. Their shape rules compute the exact output shape when the inputs
// they need are constants (the engine evaluates such graphs eagerly with the
// input values as constants) and leave the counted dims unknown otherwise.
// The counting code is shared by the rule and the kernel, so both agree.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/compress_geom.h"
#include "ops/tensor/tensor_util.h"
#include "ops/tensor/unique_order.h"

namespace twinfer::tensor {
namespace {

template <typename T>
bool is_nonzero(T v) {
  return ew::load(v) != decltype(ew::load(v))(0);
}

int64_t count_nonzero(const TensorView& x) {
  int64_t n = 0;
  ew::dispatch_typeset<ew::kAllTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.as<const T>();
    const int64_t m = x.numel();
    for (int64_t i = 0; i < m; ++i) n += is_nonzero(p[i]);
  });
  return n;
}

// ---- NonZero -------------------------------------------------------------------

void nonzero_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kAllTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("NonZero does not support dtype ") + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output(0, DType::kInt64, unknown_dims(2));
  const Dim rank(static_cast<int64_t>(c.input_shape(0).size()));
  const Tensor* x = c.input_constant(0);
  c.set_output(0, DType::kInt64, SymShape{rank, x ? Dim(count_nonzero(x->view())) : Dim()});
}

class NonZeroKernel final : public Kernel {
 public:
  explicit NonZeroKernel(const KernelBuildInfo&) {}
  // Sizes its own output where a device runs it alone (runtime/staged_tail.h;
  // the simulated device runs this kernel for CUDA's).
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    Tensor y = Tensor::empty(DType::kInt64, {static_cast<int64_t>(x.rank()), count_nonzero(x)});
    write(x, y.view());
    return {y};
  }
  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    if (count_nonzero(x) != y.shape[1])
      throw Error(ErrorKind::kInvalidArgument, "NonZero count differs from the planned output", "", "NonZero");
    write(x, y);
  }

 private:
  static void write(const TensorView& x, const TensorView& y) {
    const int64_t nnz = y.shape[1], r = static_cast<int64_t>(x.rank());
    int64_t* out = y.as<int64_t>();
    const Shape strides = contiguous_strides(x.shape);
    ew::dispatch_typeset<ew::kAllTypes>(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.as<const T>();
      const int64_t m = x.numel();
      int64_t j = 0;
      for (int64_t i = 0; i < m; ++i) {
        if (!is_nonzero(p[i])) continue;
        int64_t rem = i;
        for (int64_t d = 0; d < r; ++d) {
          out[d * nnz + j] = rem / strides[d];
          rem %= strides[d];
        }
        ++j;
      }
    });
  }
};

// ---- Compress ------------------------------------------------------------------

// Number of selected slices; fails when a true condition lies beyond `n`.
template <typename Ctx>
int64_t compress_count(const Ctx& c, const TensorView& cond, int64_t n) {
  const bool* p = cond.as<const bool>();
  int64_t k = 0;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!p[i]) continue;
    if (i >= n)
      c.fail(ErrorKind::kInvalidArgument, "condition is true at " + std::to_string(i) +
                                               ", beyond the axis length " + std::to_string(n));
    ++k;
  }
  return k;
}

void compress_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(tensor::is_movable_dtype(dt) || dt == DType::kString))
    c.fail(ErrorKind::kDType, std::string("Compress does not support ") + dtype_name(dt));
  if (!(c.input_dtype(1) == DType::kBool)) c.fail(ErrorKind::kDType, "condition must be bool");
  if (c.input_has_shape(1)) if (!(c.input_shape(1).size() == 1)) c.fail(ErrorKind::kShape, "condition must be 1-D");
  const bool has_axis = c.node().has_attr("axis");
  if (!c.input_has_shape(0)) {
    if (has_axis) return c.set_output_rank_unknown(0, dt);
    return c.set_output(0, dt, unknown_dims(1));
  }
  SymShape s = c.input_shape(0);
  int64_t axis = 0;
  Dim n;
  if (has_axis) {
    if (!(!s.empty())) c.fail(ErrorKind::kShape, "input must have rank >= 1 when axis is given");
    axis = normalize_axis(c, c.node().attr_int("axis", 0), static_cast<int64_t>(s.size()));
    n = s[axis];
  } else {
    n = dim_product(s);
  }
  Dim k;
  const Tensor* cond = c.input_constant(1);
  if (cond && n.known()) k = Dim(compress_count(c, cond->view(), n.value));
  if (has_axis) {
    s[axis] = k;
    c.set_output(0, dt, s);
  } else {
    c.set_output(0, dt, SymShape{k});
  }
}

class CompressKernel final : public Kernel {
 public:
  explicit CompressKernel(const KernelBuildInfo& info)
      : info_node_(info.node().name), g_(info), dtype_(info.input_dtype(0)),
        row_(static_cast<size_t>(g_.inner) * dtype_size(dtype_)) {}

  // Sizes its own output where a device runs it alone (runtime/staged_tail.h;
  // the simulated device runs this kernel for CUDA's).
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const std::vector<int64_t> sel = selected(ctx.inputs[1]);
    Tensor out = Tensor::empty(dtype_, g_.output(static_cast<int64_t>(sel.size())));
    write(ctx.inputs[0], sel, out.view());
    return {out};
  }

  void run(KernelContext& ctx) const override {
    const std::vector<int64_t> sel = selected(ctx.inputs[1]);
    const int64_t k = static_cast<int64_t>(sel.size());
    if (k * g_.outer * static_cast<int64_t>(row_) != static_cast<int64_t>(ctx.outputs[0].bytes()))
      throw Error(ErrorKind::kInvalidArgument, "condition differs from the planned output", info_node_, "Compress");
    write(ctx.inputs[0], sel, ctx.outputs[0]);
  }

 private:
  std::vector<int64_t> selected(const TensorView& cond) const {
    const bool* p = cond.as<const bool>();
    std::vector<int64_t> sel;
    for (int64_t i = 0; i < cond.numel(); ++i) {
      if (!p[i]) continue;
      if (i >= g_.n)
        throw Error(ErrorKind::kInvalidArgument, "condition is true beyond the axis length", info_node_, "Compress");
      sel.push_back(i);
    }
    return sel;
  }
  void write(const TensorView& xv, const std::vector<int64_t>& sel, const TensorView& yv) const {
    const int64_t k = static_cast<int64_t>(sel.size());
    const char* x = static_cast<const char*>(xv.data);
    char* y = static_cast<char*>(yv.data);
    for (int64_t o = 0; o < g_.outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(y + (o * k + j) * row_, x + (o * g_.n + sel[j]) * row_, row_);
  }

  std::string info_node_;
  CompressGeom g_;
  DType dtype_;
  size_t row_ = 0;
};

// ---- Unique --------------------------------------------------------------------

// Unique over the slices x[..., i, ...] along `axis` (or over the flattened
// elements when axis < 0). Results in output order.
struct UniqueResult {
  std::vector<int64_t> first;    // index of each unique slice's first occurrence
  std::vector<int64_t> inverse;  // per input slice: its unique slice
  std::vector<int64_t> counts;
};

UniqueResult unique_compute(const TensorView& x, int64_t axis, bool sorted) {
  int64_t outer = 1, inner = 1, n = x.numel();
  if (axis >= 0) {
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (size_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape[d];
    n = x.shape[axis];
  }
  UniqueResult r;
  ew::dispatch_typeset<ew::kAllTypes>(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, bool>, uint8_t, ew::compute_t<T>>;  // no vector<bool>
    const T* p = x.as<const T>();
    const int64_t m = outer * inner;  // elements per slice
    std::vector<C> s(static_cast<size_t>(n * m));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j) s[i * m + o * inner + j] = static_cast<C>(ew::load(p[(o * n + i) * inner + j]));
    // NaN after every number and equal to NaN (unique_order.h).
    auto at = [&](int64_t slice, int64_t t) { return s[slice * m + t]; };
    auto less = [&](int64_t a, int64_t b) { return unique_slice_less<C>(a, b, m, at); };
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);
    // Groups of equal slices in sorted order.
    std::vector<int64_t> group_of(static_cast<size_t>(n));
    std::vector<int64_t> gfirst, gcount;
    for (int64_t t = 0; t < n; ++t) {
      if (t == 0 || less(order[t - 1], order[t])) {
        gfirst.push_back(order[t]);
        gcount.push_back(0);
      }
      group_of[order[t]] = static_cast<int64_t>(gfirst.size()) - 1;
      ++gcount.back();
    }
    const int64_t u = static_cast<int64_t>(gfirst.size());
    std::vector<int64_t> rank(static_cast<size_t>(u));  // group -> output position
    std::vector<int64_t> gorder(static_cast<size_t>(u));
    std::iota(gorder.begin(), gorder.end(), 0);
    if (!sorted) std::sort(gorder.begin(), gorder.end(), [&](int64_t a, int64_t b) { return gfirst[a] < gfirst[b]; });
    for (int64_t g = 0; g < u; ++g) rank[gorder[g]] = g;
    r.first.resize(u);
    r.counts.resize(u);
    for (int64_t g = 0; g < u; ++g) {
      r.first[rank[g]] = gfirst[g];
      r.counts[rank[g]] = gcount[g];
    }
    r.inverse.resize(n);
    for (int64_t i = 0; i < n; ++i) r.inverse[i] = rank[group_of[i]];
  });
  return r;
}

template <typename Ctx>
int64_t unique_axis(const Ctx& c, int64_t rank) {
  if (!c.node().has_attr("axis")) return -1;
  const int64_t a = c.node().attr_int("axis", 0);
  if (a < -rank || a >= rank)
    c.fail(ErrorKind::kShape, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return a < 0 ? a + rank : a;
}

void unique_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kAllTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Unique does not support dtype ") + dtype_name(dt));
  const bool has_axis = c.node().has_attr("axis");
  Dim u, n;
  SymShape ys;
  if (c.input_has_shape(0)) {
    const SymShape& s = c.input_shape(0);
    const int64_t axis = unique_axis(c, static_cast<int64_t>(s.size()));
    n = axis >= 0 ? s[axis] : dim_product(s);
    if (const Tensor* x = c.input_constant(0))
      u = Dim(static_cast<int64_t>(unique_compute(x->view(), axis, c.node().attr_int("sorted", 1) != 0).first.size()));
    if (axis >= 0) {
      ys = s;
      ys[axis] = u;
    } else {
      ys = SymShape{u};
    }
    c.set_output(0, dt, ys);
  } else if (has_axis) {
    c.set_output_rank_unknown(0, dt);
  } else {
    c.set_output(0, dt, SymShape{u});
  }
  if (c.has_output(1)) c.set_output(1, DType::kInt64, SymShape{u});
  if (c.has_output(2)) c.set_output(2, DType::kInt64, SymShape{n});
  if (c.has_output(3)) c.set_output(3, DType::kInt64, SymShape{u});
}

class UniqueKernel final : public Kernel {
 public:
  explicit UniqueKernel(const KernelBuildInfo& info)
      : sorted_(info.node().attr_int("sorted", 1) != 0), node_(info.node().name) {
    axis_ = unique_axis(info, static_cast<int64_t>(info.input_shape(0).size()));
  }

  // Sizes its own outputs where a device runs it alone (runtime/staged_tail.h;
  // the simulated device runs this kernel for CUDA's).
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const UniqueResult r = unique_compute(x, axis_, sorted_);
    const int64_t u = static_cast<int64_t>(r.first.size()), n = axis_ >= 0 ? x.shape[axis_] : x.numel();
    Shape ys{u};
    if (axis_ >= 0) {
      ys = x.shape;
      ys[axis_] = u;
    }
    // All four (the caller keeps the ones the node names).
    std::vector<Tensor> out{Tensor::empty(x.dtype, ys), Tensor::empty(DType::kInt64, {u}),
                            Tensor::empty(DType::kInt64, {n}), Tensor::empty(DType::kInt64, {u})};
    std::vector<TensorView> views;
    for (const Tensor& t : out) views.push_back(t.view());
    write(x, r, views);
    return out;
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const UniqueResult r = unique_compute(x, axis_, sorted_);
    const int64_t u = static_cast<int64_t>(r.first.size());
    const TensorView& y = ctx.outputs[0];
    if ((axis_ >= 0 ? y.shape[axis_] : y.numel()) != u)
      throw Error(ErrorKind::kInvalidArgument, "unique count differs from the planned output", node_, "Unique");
    write(x, r, ctx.outputs);
  }

 private:
  // The unique slices into outs[0], the first indices, inverse and counts
  // into outs[1..3] where given (data set).
  void write(const TensorView& x, const UniqueResult& r, const std::vector<TensorView>& outs) const {
    const int64_t u = static_cast<int64_t>(r.first.size());
    const TensorView& y = outs[0];
    int64_t outer = 1, inner = 1, n = x.numel();
    if (axis_ >= 0) {
      for (int64_t d = 0; d < axis_; ++d) outer *= x.shape[d];
      for (size_t d = axis_ + 1; d < x.rank(); ++d) inner *= x.shape[d];
      n = x.shape[axis_];
    }
    const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype);
    const char* xp = static_cast<const char*>(x.data);
    char* yp = static_cast<char*>(y.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t g = 0; g < u; ++g) std::memcpy(yp + (o * u + g) * row, xp + (o * n + r.first[g]) * row, row);
    auto put = [&](size_t i, const std::vector<int64_t>& v) {
      if (outs.size() > i && outs[i].data) std::copy(v.begin(), v.end(), outs[i].as<int64_t>());
    };
    put(1, r.first);
    put(2, r.inverse);
    put(3, r.counts);
  }

  bool sorted_;
  int64_t axis_ = -1;
  std::string node_;
};

bool all_types_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, ew::kAllTypes, why);
}

bool compress_supports(const KernelBuildInfo& info, std::string* why) { return check_movable(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("NonZero", nonzero_infer);
TWINFER_REGISTER_KERNEL("NonZero", Backend::kCPU, 0, all_types_supports, make_kernel<NonZeroKernel>);
TWINFER_REGISTER_SCHEMA("Compress", compress_infer);
TWINFER_REGISTER_KERNEL("Compress", Backend::kCPU, 0, compress_supports, make_kernel<CompressKernel>);
TWINFER_REGISTER_SCHEMA("Unique", unique_infer);
TWINFER_REGISTER_KERNEL("Unique", Backend::kCPU, 0, all_types_supports, make_kernel<UniqueKernel>);

}  // namespace twinfer::tensor
