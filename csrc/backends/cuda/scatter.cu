// Scatter ops on CUDA: ScatterElements (and its old name Scatter), ScatterND
// and TensorScatter. The output starts as a device copy of data; the updates
// are then folded in with the CPU kernel's rule (ops/tensor/scatter_reduce.h,
// shared) and in the CPU kernel's order wherever two updates can meet, so
// every reduction, duplicates included, gives the CPU's result bit for bit:
//
// - ScatterElements: two updates can meet only when they share every
//   coordinate but the axis, so a thread per such lane walks the indices'
//   axis in order (the CPU walks the updates row-major, which is that order
//   within a lane). No atomics.
// - ScatterND: any two index rows can meet, so a thread per element of the
//   update slice (data.shape[k:]) walks all index rows in order. Parallel over
//   the slice only: ScatterND with k == rank and many rows runs on few threads
//   (correct first; a sort by destination would be the fast path).
// - TensorScatter: the written positions of one batch entry are distinct
//   (update length <= cache length), so a thread per update element.
//
// An index out of range sets the kernel error flag (error_flag.h) and its
// row is skipped: nothing is read or written out of bounds.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/offset_calc.h"
#include "ops/tensor/scatter_reduce.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

using twinfer::tensor::ScatterReduction;

// ScatterElements: lane t (its offsets into indices/updates and into data
// from `lane`, the axis dim left out) walks `steps` positions of the axis.
template <typename T, typename I>
__global__ void scatter_elements(int64_t lanes, twinfer::ew::OffsetCalc<2> lane, int64_t steps, int64_t ind_step,
                                 int64_t A, int64_t data_step, ScatterReduction red, const I* __restrict__ idx,
                                 const T* __restrict__ upd, T* __restrict__ y, int* error) {
  for (int64_t t = first_index(); t < lanes; t += grid_stride()) {
    int64_t o[2];
    lane.get(static_cast<uint64_t>(t), o);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t at = o[0] + s * ind_step;
      int64_t k = static_cast<int64_t>(idx[at]);
      if (k < 0) k += A;
      if (k < 0 || k >= A) {
        *error = twinfer::cuda::kIndexOutOfRange;
        continue;
      }
      twinfer::tensor::scatter_combine(y[o[1] + k * data_step], upd[at], red);
    }
  }
}

struct ScatterNDGeom {
  int64_t k = 0, rows = 0, slice = 1;
  int64_t dims[8] = {}, strides[8] = {};  // the k indexed dims of data
};

// ScatterND: thread j of the slice walks every index row in order.
template <typename T, typename I>
__global__ void scatter_nd(ScatterNDGeom g, ScatterReduction red, const I* __restrict__ idx,
                           const T* __restrict__ upd, T* __restrict__ y, int* error) {
  for (int64_t j = first_index(); j < g.slice; j += grid_stride()) {
    for (int64_t t = 0; t < g.rows; ++t) {
      const I* row = idx + t * g.k;
      int64_t off = 0;
      bool bad = false;
      for (int q = 0; q < g.k; ++q) {
        int64_t v = static_cast<int64_t>(row[q]);
        if (v < 0) v += g.dims[q];
        bad = bad || v < 0 || v >= g.dims[q];
        off += v * g.strides[q];
      }
      if (bad) {
        *error = twinfer::cuda::kIndexOutOfRange;
        continue;
      }
      twinfer::tensor::scatter_combine(y[off + j], upd[t * g.slice + j], red);
    }
  }
}

// TensorScatter: update [batch, mid, seq, inner] into cache [batch, mid,
// max_seq, inner] at write_indices[b] (0 without them), wrapping when circular.
template <typename U>
__global__ void tensor_scatter(int64_t n, twinfer::ew::FastDivmod inner, twinfer::ew::FastDivmod seq,
                               twinfer::ew::FastDivmod mid, int64_t max_seq, bool circular,
                               const int64_t* __restrict__ wi, const U* __restrict__ upd, U* __restrict__ y,
                               int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t q, r, s, m, b;
    inner.divmod(static_cast<uint64_t>(i), q, r);
    seq.divmod(q, q, s);
    mid.divmod(q, b, m);
    const int64_t w = wi ? wi[b] : 0;
    const int64_t len = static_cast<int64_t>(seq.divisor);
    // w > max_seq - len, not w + len > max_seq: an index near 2^63 from the
    // data must not wrap into range (len <= max_seq, checked on the host).
    if (w < 0 || (!circular && w > max_seq - len)) {
      *error = twinfer::cuda::kIndexOutOfRange;
      continue;
    }
    const int64_t cs = circular ? (w % max_seq + static_cast<int64_t>(s)) % max_seq : w + static_cast<int64_t>(s);
    const int64_t bm = static_cast<int64_t>(b * mid.divisor + m);
    y[(bm * max_seq + cs) * static_cast<int64_t>(inner.divisor) + static_cast<int64_t>(r)] = upd[i];
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using tensor::ScatterReduction;

void copy_data(const KernelContext& ctx, cudaStream_t s) {
  const TensorView& x = ctx.inputs[0];
  if (x.bytes() && x.data != ctx.outputs[0].data)
    check(cudaMemcpyAsync(ctx.outputs[0].data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, s),
          "cudaMemcpyAsync (scatter data)");
}

// Storage types the combining kernels are built for: any dtype by its width
// with reduction none (a copy), the numeric types and bool otherwise.
template <typename F>
void dispatch_scatter(DType dt, ScatterReduction red, F&& f) {
  if (red == ScatterReduction::kNone) {
    switch (dtype_size(dt)) {
      case 1: f(uint8_t{}); return;
      case 2: f(uint16_t{}); return;
      case 4: f(uint32_t{}); return;
      default: f(uint64_t{}); return;
    }
  }
  ew::dispatch_typeset<ew::kAllTypes>(dt, [&](auto tag) { f(typename decltype(tag)::type{}); });
}

bool scatter_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  const DType it = info.input_dtype(1);
  if (it != DType::kInt32 && it != DType::kInt64) {
    if (why) *why = std::string("scatter indices of ") + dtype_name(it) + " have no CUDA kernel";
    return false;
  }
  if (!ew::check_same_dtype(info, {0, 2}, why)) return false;
  const std::string r = info.node().attr_string("reduction", "none");
  const size_t w = dtype_size(dt);
  const bool ok = dt != DType::kString &&
                  (r == "none" ? (w == 1 || w == 2 || w == 4 || w == 8) : ew::in_typeset(ew::kAllTypes, dt));
  if (!ok) {
    if (why) *why = std::string("scatter of ") + dtype_name(dt) + " with reduction " + r + " has no CUDA kernel";
    return false;
  }
  return true;
}

// ---- ScatterElements / Scatter ------------------------------------------------

bool scatter_elements_supports(const KernelBuildInfo& info, std::string* why) {
  if (!scatter_supports(info, why)) return false;
  if (info.input_shape(1).size() > static_cast<size_t>(ew::kMaxOffsetDims)) {
    if (why) *why = "ScatterElements of rank > 8 has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaScatterElements final : public Kernel {
 public:
  explicit CudaScatterElements(const KernelBuildInfo& info)
      : red_(tensor::scatter_reduction_of(info)), dtype_(info.input_dtype(0)), index_(info.input_dtype(1)) {
    const Shape data = info.input_shape(0), ind = info.input_shape(1);
    const int64_t r = static_cast<int64_t>(data.size());
    int64_t axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || static_cast<int64_t>(ind.size()) != r)
      info.fail(ErrorKind::kShape, "ScatterElements needs indices of the data's rank and an axis in range");
    if (info.input_shape(2) != ind)
      info.fail(ErrorKind::kShape, "indices " + shape_str(ind) + " and updates " + shape_str(info.input_shape(2)) +
                                       " must have one shape");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && ind[d] > data[d])
        info.fail(ErrorKind::kShape, "indices " + shape_str(ind) + " exceed data " + shape_str(data));
    const Shape is = contiguous_strides(ind), ds = contiguous_strides(data);
    A_ = data[axis];
    steps_ = ind[axis];
    ind_step_ = is[axis];
    data_step_ = ds[axis];
    lanes_ = steps_ ? shape_numel(ind) / steps_ : 0;
    // The lane's coordinates: the indices' dims with the axis as size 1.
    lane_.rank = static_cast<int>(r);
    for (int64_t d = 0; d < r; ++d) {
      const int64_t from = r - 1 - d;
      const bool ax = from == axis;
      lane_.sizes[d] = ew::FastDivmod(static_cast<uint64_t>(ax || ind[from] <= 0 ? 1 : ind[from]));
      lane_.strides[d][0] = ax ? 0 : is[from];
      lane_.strides[d][1] = ax ? 0 : ds[from];
    }
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    copy_data(ctx, s);
    const ew::LaunchConfig lc = ew::elementwise_launch(lanes_);
    if (!lc.blocks || steps_ == 0) return;
    int* error = kernel_error_flag(ctx.backend_state);
    dispatch_scatter(dtype_, red_, [&](auto tag) {
      using T = decltype(tag);
      auto go = [&](auto itag) {
        using I = decltype(itag);
        twinfer_gpu::scatter_elements<<<lc.blocks, lc.threads, 0, s>>>(
            lanes_, lane_, steps_, ind_step_, A_, data_step_, red_, ctx.inputs[1].as<const I>(),
            static_cast<const T*>(ctx.inputs[2].data), static_cast<T*>(ctx.outputs[0].data), error);
      };
      if (index_ == DType::kInt64) go(int64_t{});
      else go(int32_t{});
    });
    check_launch("ScatterElements launch");
  }
  const char* impl_name() const override { return "cuda scatter elements (a thread per lane, in order)"; }

 private:
  ScatterReduction red_;
  DType dtype_, index_;
  int64_t A_ = 0, steps_ = 0, ind_step_ = 0, data_step_ = 0, lanes_ = 0;
  ew::OffsetCalc<2> lane_;
};

// ---- ScatterND -----------------------------------------------------------------

bool scatter_nd_supports(const KernelBuildInfo& info, std::string* why) {
  if (!scatter_supports(info, why)) return false;
  const Shape ind = info.input_shape(1);
  if (ind.empty() || ind.back() > 8) {
    if (why) *why = "ScatterND indexing more than 8 dims has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaScatterND final : public Kernel {
 public:
  explicit CudaScatterND(const KernelBuildInfo& info)
      : red_(tensor::scatter_reduction_of(info)), dtype_(info.input_dtype(0)), index_(info.input_dtype(1)) {
    const Shape data = info.input_shape(0), ind = info.input_shape(1);
    g_.k = ind.back();
    if (g_.k > static_cast<int64_t>(data.size())) info.fail(ErrorKind::kShape, "indices index too many dims");
    g_.rows = shape_numel(Shape(ind.begin(), ind.end() - 1));
    const Shape ds = contiguous_strides(data);
    for (int64_t q = 0; q < g_.k; ++q) {
      g_.dims[q] = data[q];
      g_.strides[q] = ds[q];
    }
    for (size_t d = static_cast<size_t>(g_.k); d < data.size(); ++d) g_.slice *= data[d];
    if (shape_numel(info.input_shape(2)) != g_.rows * g_.slice)
      info.fail(ErrorKind::kShape, "updates " + shape_str(info.input_shape(2)) + " do not match indices " +
                                       shape_str(ind) + " and data " + shape_str(data));
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    copy_data(ctx, s);
    const ew::LaunchConfig lc = ew::elementwise_launch(g_.slice);
    if (!lc.blocks || g_.rows == 0) return;
    int* error = kernel_error_flag(ctx.backend_state);
    dispatch_scatter(dtype_, red_, [&](auto tag) {
      using T = decltype(tag);
      auto go = [&](auto itag) {
        using I = decltype(itag);
        twinfer_gpu::scatter_nd<<<lc.blocks, lc.threads, 0, s>>>(g_, red_, ctx.inputs[1].as<const I>(),
                                                                 static_cast<const T*>(ctx.inputs[2].data),
                                                                 static_cast<T*>(ctx.outputs[0].data), error);
      };
      if (index_ == DType::kInt64) go(int64_t{});
      else go(int32_t{});
    });
    check_launch("ScatterND launch");
  }
  const char* impl_name() const override { return "cuda scatter nd (a thread per slice element, rows in order)"; }

 private:
  ScatterReduction red_;
  DType dtype_, index_;
  twinfer_gpu::ScatterNDGeom g_;
};

// ---- TensorScatter -------------------------------------------------------------

bool tensor_scatter_supports(const KernelBuildInfo& info, std::string* why) {
  const size_t w = dtype_size(info.input_dtype(0));
  if (info.input_dtype(0) == DType::kString || !(w == 1 || w == 2 || w == 4 || w == 8)) {
    if (why) *why = std::string("TensorScatter of ") + dtype_name(info.input_dtype(0)) + " has no CUDA kernel";
    return false;
  }
  return ew::check_same_dtype(info, {0, 1}, why);
}

class CudaTensorScatter final : public Kernel {
 public:
  explicit CudaTensorScatter(const KernelBuildInfo& info)
      : circular_(info.node().attr_string("mode", "linear") == "circular"), elem_(dtype_size(info.input_dtype(0))) {
    const Shape p = info.input_shape(0), u = info.input_shape(1);
    int64_t axis = info.node().attr_int("axis", -2);
    if (axis < 0) axis += static_cast<int64_t>(p.size());
    if (axis <= 0 || axis >= static_cast<int64_t>(p.size()) || u.size() != p.size())
      info.fail(ErrorKind::kShape, "TensorScatter needs an axis past the batch axis and one rank");
    batch_ = p[0];
    for (int64_t d = 1; d < axis; ++d) mid_ *= p[d];
    for (size_t d = axis + 1; d < p.size(); ++d) inner_ *= p[d];
    max_seq_ = p[axis];
    seq_ = u[axis];
    // The kernel writes each update position once: no more positions than the cache has.
    if (seq_ > max_seq_)
      info.fail(ErrorKind::kShape, "TensorScatter update of " + std::to_string(seq_) + " along the axis exceeds the cache's " +
                                       std::to_string(max_seq_));
    n_ = shape_numel(u);
    if (info.has_input(2) && shape_numel(info.input_shape(2)) != batch_)
      info.fail(ErrorKind::kShape, "write_indices " + shape_str(info.input_shape(2)) + " must hold one index per batch");
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    copy_data(ctx, s);
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks || max_seq_ == 0) return;
    int* error = kernel_error_flag(ctx.backend_state);
    const int64_t* wi = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const int64_t>() : nullptr;
    const ew::FastDivmod inner(static_cast<uint64_t>(inner_)), seq(static_cast<uint64_t>(seq_)),
        mid(static_cast<uint64_t>(mid_));
    auto go = [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::tensor_scatter<<<lc.blocks, lc.threads, 0, s>>>(n_, inner, seq, mid, max_seq_, circular_, wi,
                                                                   static_cast<const U*>(ctx.inputs[1].data),
                                                                   static_cast<U*>(ctx.outputs[0].data), error);
    };
    dispatch_width(elem_, go);
    check_launch("TensorScatter launch");
  }
  const char* impl_name() const override { return "cuda tensor scatter"; }

 private:
  bool circular_;
  size_t elem_;
  int64_t batch_ = 1, mid_ = 1, inner_ = 1, max_seq_ = 0, seq_ = 0, n_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("ScatterElements", Backend::kCUDA, 0, scatter_elements_supports,
                        make_kernel<CudaScatterElements>);
TWINFER_REGISTER_KERNEL("Scatter", Backend::kCUDA, 0, scatter_elements_supports, make_kernel<CudaScatterElements>);
TWINFER_REGISTER_KERNEL("ScatterND", Backend::kCUDA, 0, scatter_nd_supports, make_kernel<CudaScatterND>);
TWINFER_REGISTER_KERNEL("TensorScatter", Backend::kCUDA, 0, tensor_scatter_supports, make_kernel<CudaTensorScatter>);

}  // namespace twinfer::cuda
