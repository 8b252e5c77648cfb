// Data movement on CUDA: one strided copy for every op the CPU runs as a
// strided plan (Transpose, Expand, Tile, Slice with constant arguments,
// DepthToSpace, SpaceToDepth: the plan is taken from the CPU kernel, so each
// op's index arithmetic exists once), Concat and Split as strided copies per
// operand, and Gather with its indices checked on the device (an index out of
// range sets the kernel error flag, error_flag.h).
#include <memory>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_gather.cuh"
#include "ops/elementwise/offset_calc.h"
#include "ops/tensor/split_sizes.h"
#include "ops/tensor/strided_copy.h"

namespace twinfer_gpu {

// out[i] = in[base + src(i)] is gather_copy (strided_gather.cuh).
// out[dst(i)] = in[i]: the input walked in order, the output strided.
template <typename U>
__global__ void scatter_copy(int64_t n, twinfer::ew::OffsetCalc<1> dst, const U* __restrict__ in,
                             U* __restrict__ out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t o[1];
    dst.get(static_cast<uint64_t>(i), o);
    out[o[0]] = in[i];
  }
}

// Gather along an axis: output [outer, J, inner] from data [outer, A, inner].
template <typename U, typename I>
__global__ void gather_rows(int64_t n, twinfer::ew::FastDivmod inner, twinfer::ew::FastDivmod count, int64_t A,
                            const U* __restrict__ data, const I* __restrict__ idx, U* __restrict__ out, int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t t, r, o, j;
    inner.divmod(static_cast<uint64_t>(i), t, r);
    count.divmod(t, o, j);
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += A;
    if (k < 0 || k >= A) {
      *error = twinfer::cuda::kIndexOutOfRange;
      out[i] = U{};
      continue;
    }
    out[i] = data[(static_cast<int64_t>(o) * A + k) * static_cast<int64_t>(inner.divisor) + static_cast<int64_t>(r)];
  }
}

// GatherElements: out[i] = data[base(i) + idx[i] * axis_stride], base(i) the
// data offset of output element i's coordinates with the axis left out.
template <typename U, typename I>
__global__ void gather_elements(int64_t n, twinfer::ew::OffsetCalc<1> base, int64_t A, int64_t axis_stride,
                                const U* __restrict__ data, const I* __restrict__ idx, U* __restrict__ out,
                                int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t o[1];
    base.get(static_cast<uint64_t>(i), o);
    int64_t k = static_cast<int64_t>(idx[i]);
    if (k < 0) k += A;
    if (k < 0 || k >= A) {
      *error = twinfer::cuda::kIndexOutOfRange;
      out[i] = U{};
      continue;
    }
    out[i] = data[o[0] + k * axis_stride];
  }
}

// GatherND: each of `rows` index rows (k int64 entries) picks a block of
// `inner` elements; rows are grouped `per_batch` to a batch of `batch_stride`.
struct GatherNDGeom {
  int64_t k = 0, inner = 1, per_batch = 1, batch_stride = 0;
  int64_t dims[8] = {}, strides[8] = {};  // the k indexed dims of data
};

template <typename U>
__global__ void gather_nd(int64_t n, GatherNDGeom g, twinfer::ew::FastDivmod inner, const U* __restrict__ data,
                          const int64_t* __restrict__ idx, U* __restrict__ out, int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t t, r;
    inner.divmod(static_cast<uint64_t>(i), t, r);
    const int64_t* row = idx + static_cast<int64_t>(t) * g.k;
    int64_t off = (static_cast<int64_t>(t) / g.per_batch) * g.batch_stride + static_cast<int64_t>(r);
    bool bad = false;
    for (int q = 0; q < g.k; ++q) {
      int64_t v = row[q];
      if (v < 0) v += g.dims[q];
      bad = bad || v < 0 || v >= g.dims[q];
      off += v * g.strides[q];
    }
    if (bad) {
      *error = twinfer::cuda::kIndexOutOfRange;
      out[i] = U{};
    } else {
      out[i] = data[off];
    }
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using ew::OffsetCalc;
using ew::offsets_for;

bool width_ok(size_t bytes) { return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8; }

// ---- strided copies planned by the CPU kernel --------------------------------

bool strided_supports(const KernelBuildInfo& info, std::string* why) {
  auto k = cpu_plan_kernel<tensor::StridedCopyKernel>(info, why);
  if (!k) return false;
  if (!k->fixed_plan()) {
    if (why) *why = "arguments computed at run time (the CUDA copy needs constants)";
    return false;
  }
  if (!width_ok(k->elem_size()) || k->plan().dims.size() > static_cast<size_t>(ew::kMaxOffsetDims)) {
    if (why) *why = "a copy of this element size or rank has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaStridedCopy final : public Kernel {
 public:
  explicit CudaStridedCopy(const KernelBuildInfo& info) {
    std::string why;
    auto k = cpu_plan_kernel<tensor::StridedCopyKernel>(info, &why);
    if (!k) info.fail(ErrorKind::kUnsupportedOp, why);
    const tensor::StridedPlan& p = k->plan();
    n_ = p.numel;
    base_ = p.in_offset;
    elem_ = k->elem_size();
    offsets_for(p.dims, p.in_strides, &src_);
    widen(p);
  }
  void run(KernelContext& ctx) const override {
    // The wide copy when both operands are aligned for it (a view may not be).
    const bool wide = wide_ && reinterpret_cast<uintptr_t>(ctx.inputs[0].data) % wide_ == 0 &&
                      reinterpret_cast<uintptr_t>(ctx.outputs[0].data) % wide_ == 0;
    const int64_t n = wide ? wide_n_ : n_;
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    dispatch_width<true>(wide ? wide_ : elem_, [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::gather_copy<<<lc.blocks, lc.threads, 0, s>>>(n, wide ? wide_src_ : src_, wide ? wide_base_ : base_,
                                                                ctx.inputs[0].as<const U>(), ctx.outputs[0].as<U>());
    });
    check_launch("strided copy launch");
  }
  const char* impl_name() const override { return "cuda strided copy"; }

 private:
  // A plan whose innermost dim is contiguous in the input copies runs of
  // elements: as 16-, 8- or 4-byte units where the run's bytes, the offset and
  // every stride divide by the unit (a transpose keeping the last axis, as
  // attention's [B, S, H, D] -> [B, H, S, D]: a unit index computation per
  // 8 fp16 elements instead of one each).
  void widen(const tensor::StridedPlan& p) {
    if (p.dims.empty() || p.in_strides.back() != 1) return;
    const int64_t e = static_cast<int64_t>(elem_), run = p.dims.back() * e;  // strides may be negative
    for (int64_t w : {16, 8, 4}) {
      if (w <= e || run % w || (p.in_offset * e) % w) continue;
      bool ok = true;
      for (size_t d = 0; d + 1 < p.dims.size(); ++d) ok = ok && (p.in_strides[d] * e) % w == 0;
      if (!ok) continue;
      Shape dims = p.dims;
      std::vector<int64_t> strides(p.in_strides.size());
      for (size_t d = 0; d + 1 < dims.size(); ++d) strides[d] = p.in_strides[d] * e / w;
      dims.back() = run / w;
      strides.back() = 1;
      if (!offsets_for(dims, strides, &wide_src_)) return;
      wide_ = static_cast<size_t>(w);
      wide_n_ = p.numel * e / w;
      wide_base_ = p.in_offset * e / w;
      return;
    }
  }

  int64_t n_ = 0, base_ = 0;
  size_t elem_ = 4;
  OffsetCalc<1> src_;
  size_t wide_ = 0;  // 0: no wide copy
  int64_t wide_n_ = 0, wide_base_ = 0;
  OffsetCalc<1> wide_src_;
};

// ---- Concat / Split: one strided copy per operand ----------------------------

struct AxisView {
  int64_t outer = 1, inner = 1, total = 0;  // total: the axis' size in the concatenated tensor
};

AxisView axis_view(const Shape& whole, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d) v.outer *= whole[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < whole.size(); ++d) v.inner *= whole[d];
  v.total = whole[axis];
  return v;
}

int64_t concat_axis(const KernelBuildInfo& info, const Shape& shape) {
  int64_t a = info.node().attr_int("axis", info.node().op_type == "Split" ? 0 : 0);
  const int64_t r = static_cast<int64_t>(shape.size());
  if (a < 0) a += r;
  if (a < 0 || a >= r) info.fail(ErrorKind::kShape, "axis out of range");
  return a;
}

bool concat_supports(const KernelBuildInfo& info, std::string* why) {
  if (!width_ok(dtype_size(info.output(0).dtype)) || info.output(0).dtype == DType::kString) {
    if (why) *why = "a concatenation of this dtype has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaConcat final : public Kernel {
 public:
  explicit CudaConcat(const KernelBuildInfo& info) : elem_(dtype_size(info.output(0).dtype)) {
    const Shape out = info.output_shape(0);
    const int64_t axis = concat_axis(info, out);
    const AxisView v = axis_view(out, axis);
    int64_t at = 0;
    for (size_t i = 0; i < info.num_inputs(); ++i) {
      const int64_t a = info.has_input(i) ? info.input_shape(i)[axis] : 0;
      Part p;
      p.n = v.outer * a * v.inner;
      p.dst_base = at * v.inner;
      // Input rows of a*inner contiguous elements land every total*inner.
      offsets_for(Shape{v.outer, a * v.inner}, {v.total * v.inner, 1}, &p.dst);
      parts_.push_back(p);
      at += a;
    }
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    dispatch_width<true>(elem_, [&](auto tag) {
      using U = decltype(tag);
      for (size_t i = 0; i < parts_.size(); ++i) {
        const ew::LaunchConfig lc = ew::elementwise_launch(parts_[i].n);
        if (!lc.blocks) continue;
        twinfer_gpu::scatter_copy<<<lc.blocks, lc.threads, 0, s>>>(
            parts_[i].n, parts_[i].dst, ctx.inputs[i].as<const U>(), ctx.outputs[0].as<U>() + parts_[i].dst_base);
      }
    });
    check_launch("Concat copy launch");
  }
  const char* impl_name() const override { return "cuda strided copy"; }

 private:
  struct Part {
    int64_t n = 0, dst_base = 0;
    OffsetCalc<1> dst;
  };
  size_t elem_;
  std::vector<Part> parts_;
};

class CudaSplit final : public Kernel {
 public:
  explicit CudaSplit(const KernelBuildInfo& info) : elem_(dtype_size(info.input_dtype(0))) {
    const Shape in = info.input_shape(0);
    const int64_t axis = concat_axis(info, in);
    const AxisView v = axis_view(in, axis);
    // The CPU kernel's sizes: a missing output still takes its share of the axis.
    bool known = true;
    const std::vector<int64_t> sizes = tensor::split_chunk_sizes(info, in[axis], &known);
    int64_t at = 0;
    for (size_t o = 0; o < info.num_outputs(); ++o) {
      // Sizes from a run-time split: a missing output's share is unknown, so
      // output_shape fails for it as the CPU kernel does (taking 0 would shift
      // every later output's window).
      const int64_t a = known ? sizes[o] : info.output_shape(o)[axis];
      Part p;
      p.n = info.has_output(o) ? v.outer * a * v.inner : 0;
      p.src_base = at * v.inner;
      offsets_for(Shape{v.outer, a * v.inner}, {v.total * v.inner, 1}, &p.src);
      parts_.push_back(p);
      at += a;
    }
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    dispatch_width<true>(elem_, [&](auto tag) {
      using U = decltype(tag);
      for (size_t o = 0; o < parts_.size(); ++o) {
        const ew::LaunchConfig lc = ew::elementwise_launch(parts_[o].n);
        if (!lc.blocks || !ctx.outputs[o].data) continue;
        twinfer_gpu::gather_copy<<<lc.blocks, lc.threads, 0, s>>>(parts_[o].n, parts_[o].src, parts_[o].src_base,
                                                                  ctx.inputs[0].as<const U>(), ctx.outputs[o].as<U>());
      }
    });
    check_launch("Split copy launch");
  }
  const char* impl_name() const override { return "cuda strided copy"; }

 private:
  struct Part {
    int64_t n = 0, src_base = 0;
    OffsetCalc<1> src;
  };
  size_t elem_;
  std::vector<Part> parts_;
};

bool split_supports(const KernelBuildInfo& info, std::string* why) {
  if (!width_ok(dtype_size(info.input_dtype(0))) || info.input_dtype(0) == DType::kString) {
    if (why) *why = "a split of this dtype has no CUDA kernel";
    return false;
  }
  for (size_t o = 0; o < info.num_outputs(); ++o)
    if (info.has_output(o)) info.output_shape(o);  // throws when not concrete
  return true;
}

// ---- Gather ------------------------------------------------------------------

bool gather_supports(const KernelBuildInfo& info, std::string* why) {
  const DType it = info.input_dtype(1);
  if (it != DType::kInt32 && it != DType::kInt64) {
    if (why) *why = std::string("Gather indices of ") + dtype_name(it) + " have no CUDA kernel";
    return false;
  }
  if (!width_ok(dtype_size(info.input_dtype(0))) || info.input_dtype(0) == DType::kString) {
    if (why) *why = "Gather of this dtype has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaGather final : public Kernel {
 public:
  explicit CudaGather(const KernelBuildInfo& info)
      : elem_(dtype_size(info.input_dtype(0))), index_(info.input_dtype(1)) {
    const Shape data = info.input_shape(0);
    int64_t axis = info.node().attr_int("axis", 0);
    const int64_t r = static_cast<int64_t>(data.size());
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) info.fail(ErrorKind::kShape, "Gather axis out of range for rank " + std::to_string(r));
    const AxisView v = axis_view(data, axis);
    A_ = v.total;
    J_ = shape_numel(info.input_shape(1));
    inner_ = v.inner;
    n_ = v.outer * J_ * v.inner;
  }
  void run(KernelContext& ctx) const override {
    // Rows of inner elements move as 16-, 8- or 4-byte units where their
    // bytes and both operands allow (an embedding table's rows: a unit per
    // 8 fp16 values instead of an index computation each).
    size_t unit = elem_;
    for (size_t w : {size_t(16), size_t(8), size_t(4)})
      if (w > elem_ && (static_cast<size_t>(inner_) * elem_) % w == 0 &&
          reinterpret_cast<uintptr_t>(ctx.inputs[0].data) % w == 0 && reinterpret_cast<uintptr_t>(ctx.outputs[0].data) % w == 0) {
        unit = w;
        break;
      }
    const int64_t inner_units = static_cast<int64_t>(static_cast<size_t>(inner_) * elem_ / unit);
    const int64_t n = n_ / (inner_ ? inner_ : 1) * inner_units;
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    const ew::FastDivmod inner(static_cast<uint64_t>(inner_units)), count(static_cast<uint64_t>(J_));
    dispatch_width<true>(unit, [&](auto tag) {
      using U = decltype(tag);
      if (index_ == DType::kInt64)
        twinfer_gpu::gather_rows<<<lc.blocks, lc.threads, 0, s>>>(n, inner, count, A_, ctx.inputs[0].as<const U>(),
                                                                  ctx.inputs[1].as<const int64_t>(),
                                                                  ctx.outputs[0].as<U>(), error);
      else
        twinfer_gpu::gather_rows<<<lc.blocks, lc.threads, 0, s>>>(n, inner, count, A_, ctx.inputs[0].as<const U>(),
                                                                  ctx.inputs[1].as<const int32_t>(),
                                                                  ctx.outputs[0].as<U>(), error);
    });
    check_launch("Gather launch");
  }
  const char* impl_name() const override { return "cuda gather"; }

 private:
  size_t elem_;
  DType index_;
  int64_t A_ = 0, J_ = 0, inner_ = 1, n_ = 0;
};

// ---- GatherElements -----------------------------------------------------------

bool gather_elements_supports(const KernelBuildInfo& info, std::string* why) {
  if (!gather_supports(info, why)) return false;
  if (info.input_shape(1).size() > static_cast<size_t>(ew::kMaxOffsetDims)) {
    if (why) *why = "GatherElements of rank > 8 has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaGatherElements final : public Kernel {
 public:
  explicit CudaGatherElements(const KernelBuildInfo& info)
      : elem_(dtype_size(info.input_dtype(0))), index_(info.input_dtype(1)) {
    const Shape data = info.input_shape(0), ind = info.input_shape(1);
    int64_t axis = info.node().attr_int("axis", 0);
    const int64_t r = static_cast<int64_t>(data.size());
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || static_cast<int64_t>(ind.size()) != r)
      info.fail(ErrorKind::kShape, "GatherElements needs indices of the data's rank and an axis in range");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && ind[d] > data[d])
        info.fail(ErrorKind::kShape, "indices " + shape_str(ind) + " exceed data " + shape_str(data));
    std::vector<int64_t> strides = contiguous_strides(data);
    axis_len_ = data[axis];
    axis_stride_ = strides[axis];
    strides[axis] = 0;  // the index supplies the axis coordinate
    offsets_for(ind, strides, &base_);
    n_ = shape_numel(ind);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    dispatch_width<true>(elem_, [&](auto tag) {
      using U = decltype(tag);
      if (index_ == DType::kInt64)
        twinfer_gpu::gather_elements<<<lc.blocks, lc.threads, 0, s>>>(n_, base_, axis_len_, axis_stride_,
                                                                      ctx.inputs[0].as<const U>(),
                                                                      ctx.inputs[1].as<const int64_t>(),
                                                                      ctx.outputs[0].as<U>(), error);
      else
        twinfer_gpu::gather_elements<<<lc.blocks, lc.threads, 0, s>>>(n_, base_, axis_len_, axis_stride_,
                                                                      ctx.inputs[0].as<const U>(),
                                                                      ctx.inputs[1].as<const int32_t>(),
                                                                      ctx.outputs[0].as<U>(), error);
    });
    check_launch("GatherElements launch");
  }
  const char* impl_name() const override { return "cuda gather elements"; }

 private:
  size_t elem_;
  DType index_;
  int64_t n_ = 0, axis_len_ = 0, axis_stride_ = 0;
  OffsetCalc<1> base_;
};

// ---- GatherND ----------------------------------------------------------------

bool gather_nd_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(1) != DType::kInt64) {
    if (why) *why = "GatherND indices must be int64";
    return false;
  }
  if (!width_ok(dtype_size(info.input_dtype(0))) || info.input_dtype(0) == DType::kString) {
    if (why) *why = "GatherND of this dtype has no CUDA kernel";
    return false;
  }
  const Shape ind = info.input_shape(1);
  if (ind.empty() || ind.back() > 8) {
    if (why) *why = "GatherND with more than 8 indexed dims has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaGatherND final : public Kernel {
 public:
  explicit CudaGatherND(const KernelBuildInfo& info) : elem_(dtype_size(info.input_dtype(0))) {
    const Shape data = info.input_shape(0), ind = info.input_shape(1);
    const size_t b = static_cast<size_t>(info.node().attr_int("batch_dims", 0));
    g_.k = ind.back();
    if (b + static_cast<size_t>(g_.k) > data.size()) info.fail(ErrorKind::kShape, "GatherND indexes past data's rank");
    const Shape st = contiguous_strides(data);
    for (int64_t q = 0; q < g_.k; ++q) {
      g_.dims[q] = data[b + q];
      g_.strides[q] = st[b + q];
    }
    for (size_t d = b + g_.k; d < data.size(); ++d) g_.inner *= data[d];
    g_.per_batch = 1;
    for (size_t d = b; d + 1 < ind.size(); ++d) g_.per_batch *= ind[d];
    g_.batch_stride = 1;
    for (size_t d = b; d < data.size(); ++d) g_.batch_stride *= data[d];
    if (g_.per_batch == 0) g_.per_batch = 1;
    n_ = shape_numel(info.output_shape(0));
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    const ew::FastDivmod inner(static_cast<uint64_t>(g_.inner > 0 ? g_.inner : 1));
    dispatch_width<true>(elem_, [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::gather_nd<<<lc.blocks, lc.threads, 0, s>>>(n_, g_, inner, ctx.inputs[0].as<const U>(),
                                                              ctx.inputs[1].as<const int64_t>(), ctx.outputs[0].as<U>(),
                                                              error);
    });
    check_launch("GatherND launch");
  }
  const char* impl_name() const override { return "cuda gather"; }

 private:
  size_t elem_;
  twinfer_gpu::GatherNDGeom g_;
  int64_t n_ = 0;
};

}  // namespace

#define TWINFER_CUDA_STRIDED(op) \
  TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, strided_supports, make_kernel<CudaStridedCopy>);
TWINFER_CUDA_STRIDED("Transpose")
TWINFER_CUDA_STRIDED("Expand")
TWINFER_CUDA_STRIDED("Tile")
TWINFER_CUDA_STRIDED("Slice")
TWINFER_CUDA_STRIDED("DepthToSpace")
TWINFER_CUDA_STRIDED("SpaceToDepth")
#undef TWINFER_CUDA_STRIDED
TWINFER_REGISTER_KERNEL("Concat", Backend::kCUDA, 0, concat_supports, make_kernel<CudaConcat>);
TWINFER_REGISTER_KERNEL("Split", Backend::kCUDA, 0, split_supports, make_kernel<CudaSplit>);
TWINFER_REGISTER_KERNEL("Gather", Backend::kCUDA, 0, gather_supports, make_kernel<CudaGather>);
TWINFER_REGISTER_KERNEL("GatherElements", Backend::kCUDA, 0, gather_elements_supports, make_kernel<CudaGatherElements>);
TWINFER_REGISTER_KERNEL("GatherND", Backend::kCUDA, 0, gather_nd_supports, make_kernel<CudaGatherND>);

}  // namespace twinfer::cuda
