// Unique on CUDA: the distinct slices of x along `axis` (its elements when
// there is none), sorted or in order of first occurrence, with each one's
// first index, each slice's unique index (inverse) and the counts. A
// dynamic-output kernel, run alone between plans (runtime/staged_tail.h):
//   count:  the slice indices sorted by value (CUB's stable merge sort with
//           unique_order.h's comparison, shared with the CPU kernel: NaN
//           after every number and equal to NaN), a flag where a run of
//           equal slices starts, their inclusive sum (each sorted position's
//           run number), and the last of those, the unique count, as the
//           count read back;
//   finish: each run's start, first index (stability puts the smallest
//           first) and length; for sorted=0 the runs ordered by first index
//           (CUB's radix sort); then the outputs, the slices gathered.
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <memory>
#include <vector>

#include "backends/cuda/count_offsets.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/gather_slices.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/unique_order.h"

namespace twinfer_gpu {

// Slice a of x [outer, n, inner], element t (over outer, then inner), in
// the compute type (float for the 16-bit floats; bytes for bool).
template <typename T>
struct SliceLess {
  const T* x;
  int64_t n, inner, m;  // m = outer * inner: elements a slice
  __device__ auto at(int64_t slice, int64_t t) const {
    const int64_t o = t / inner, j = t % inner;
    return twinfer::ew::load(x[(o * n + slice) * inner + j]);
  }
  __device__ bool operator()(const int64_t& a, const int64_t& b) const {
    using C = decltype(at(0, 0));
    return twinfer::tensor::unique_slice_less<C>(a, b, m, [this](int64_t s, int64_t t) { return at(s, t); });
  }
};

// flag[k]: sorted position k starts a run (its slice differs from the one before).
template <typename T>
__global__ void mark_runs(SliceLess<T> less, const int64_t* __restrict__ order, int64_t n, int64_t* __restrict__ flag) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    flag[k] = k == 0 || less(order[k - 1], order[k]);
}

// The unique count (the last run number) into the count slot.
__global__ void last_run(const int64_t* __restrict__ run, int64_t n, int32_t* __restrict__ count) {
  *count = n > 0 ? static_cast<int32_t>(run[n - 1]) : 0;
}

// Per run r: where it starts among the sorted positions.
__global__ void run_starts(const int64_t* __restrict__ run, int64_t n, int64_t* __restrict__ start) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    if (k == 0 || run[k] != run[k - 1]) start[run[k] - 1] = k;
}

// Per run r: its first index (the smallest: the sort is stable), its length,
// and r itself (the values the radix sort carries for sorted=0).
__global__ void run_facts(const int64_t* __restrict__ order, const int64_t* __restrict__ start, int64_t u, int64_t n,
                          int64_t* __restrict__ first, int64_t* __restrict__ length, int64_t* __restrict__ ids) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < u; r += int64_t(gridDim.x) * blockDim.x) {
    first[r] = order[start[r]];
    length[r] = (r + 1 < u ? start[r + 1] : n) - start[r];
    ids[r] = r;
  }
}

// Output position j holds run by_pos[j] (rank is its inverse).
__global__ void unique_outputs(const int64_t* __restrict__ by_pos, const int64_t* __restrict__ first,
                               const int64_t* __restrict__ length, int64_t u, int64_t* __restrict__ rank,
                               int64_t* __restrict__ indices, int64_t* __restrict__ counts) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < u; j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = by_pos[j];
    rank[r] = j;
    indices[j] = first[r];
    counts[j] = length[r];
  }
}

// inverse[slice] = the output position of its run.
__global__ void unique_inverse(const int64_t* __restrict__ order, const int64_t* __restrict__ run,
                               const int64_t* __restrict__ rank, int64_t n, int64_t* __restrict__ inverse) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    inverse[order[k]] = rank[run[k] - 1];
}

__global__ void iota64(int64_t* __restrict__ v, int64_t n) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) v[k] = k;
}

inline uint32_t grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<uint32_t>(b < 1 ? 1 : b < 4096 ? b : 4096);
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

// What count leaves for finish: the sorted slice indices and each sorted
// position's run number (1-based), on the kernel's stream.
struct UniqueState {
  Tensor order, run;
};

bool unique_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, ew::kAllTypes, why)) return false;
  return runs_only_alone(info, "Unique", why);
}

class CudaUnique final : public Kernel {
 public:
  explicit CudaUnique(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), shape_(info.input_shape(0)), sorted_(info.node().attr_int("sorted", 1) != 0) {
    if (info.node().has_attr("axis")) {
      const int64_t r = static_cast<int64_t>(shape_.size());
      axis_ = info.node().attr_int("axis", 0);
      if (axis_ < 0) axis_ += r;
    }
    n_ = axis_ >= 0 ? shape_[static_cast<size_t>(axis_)] : shape_numel(shape_);
    if (axis_ >= 0) {
      for (int64_t d = 0; d < axis_; ++d) outer_ *= shape_[static_cast<size_t>(d)];
      for (size_t d = static_cast<size_t>(axis_) + 1; d < shape_.size(); ++d) inner_ *= shape_[d];
    }
  }
  const char* impl_name() const override { return "cuda unique (CUB merge sort, count read back)"; }
  bool dynamic_outputs() const override { return true; }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "Unique on CUDA ran without its stream");
    return run_both_halves(*this, ctx, "Unique");
  }

  int64_t count_slots() const override { return 1; }

  std::shared_ptr<void> count(KernelContext& ctx, int32_t* counts) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "Unique on CUDA ran without its stream");
    if (n_ > INT32_MAX) throw Error(ErrorKind::kInvalidArgument, "Unique on CUDA takes at most 2^31 - 1 slices");
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    auto state = std::make_shared<UniqueState>();
    state->order = Tensor::empty_on(DType::kInt64, {n_}, dev, ctx.stream_ref);
    state->run = Tensor::empty_on(DType::kInt64, {n_}, dev, ctx.stream_ref);
    if (n_ == 0 || outer_ * inner_ == 0) {
      // No slices, or empty ones (all equal): the CPU's count.
      const int32_t u = n_ == 0 ? 0 : 1;
      check(cudaMemcpyAsync(counts, &u, sizeof(u), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (Unique)");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize (Unique)");  // &u is on this stack
      return state;
    }
    int64_t* order = state->order.data_as<int64_t>();
    int64_t* run = state->run.data_as<int64_t>();
    ew::dispatch_typeset<ew::kAllTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const twinfer_gpu::SliceLess<T> less{ctx.inputs[0].as<const T>(), n_, inner_, outer_ * inner_};
      twinfer_gpu::iota64<<<twinfer_gpu::grid_for(n_), 256, 0, s>>>(order, n_);
      size_t sort_bytes = 0, scan_bytes = 0;
      check(cub::DeviceMergeSort::StableSortKeys(nullptr, sort_bytes, order, n_, less, s), "CUB merge sort size");
      // The run flags go into `run`, then their inclusive sum over them.
      check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, run, run, n_, s), "CUB scan size");
      Tensor temp = Tensor::empty_on(DType::kUInt8, {static_cast<int64_t>(std::max(sort_bytes, scan_bytes))}, dev,
                                     ctx.stream_ref);
      check(cub::DeviceMergeSort::StableSortKeys(temp.data(), sort_bytes, order, n_, less, s), "CUB merge sort");
      twinfer_gpu::mark_runs<T><<<twinfer_gpu::grid_for(n_), 256, 0, s>>>(less, order, n_, run);
      check(cub::DeviceScan::InclusiveSum(temp.data(), scan_bytes, run, run, n_, s), "CUB scan");
    });
    twinfer_gpu::last_run<<<1, 1, 0, s>>>(run, n_, counts);
    check_launch("Unique count launch");
    return state;
  }

  std::vector<Tensor> finish(KernelContext& ctx, const int32_t* host_counts,
                             const std::shared_ptr<void>& opaque) const override {
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    const auto& state = *static_cast<const UniqueState*>(opaque.get());
    const int64_t u = host_counts[0];
    Shape ys{u};
    if (axis_ >= 0) {
      ys = shape_;
      ys[static_cast<size_t>(axis_)] = u;
    }
    auto make = [&](DType t, Shape shape) { return Tensor::empty_on(t, std::move(shape), dev, ctx.stream_ref); };
    std::vector<Tensor> out{make(dtype_, ys), make(DType::kInt64, {u}), make(DType::kInt64, {n_}),
                            make(DType::kInt64, {u})};
    if (u == 0) return out;
    int64_t* indices = out[1].data_as<int64_t>();
    int64_t* inverse = out[2].data_as<int64_t>();
    int64_t* counts = out[3].data_as<int64_t>();
    if (outer_ * inner_ == 0) {  // empty slices, all equal: one run from slice 0
      const std::vector<int64_t> first{0}, length{n_};
      check(cudaMemcpyAsync(indices, first.data(), sizeof(int64_t), cudaMemcpyHostToDevice, s), "Unique");
      check(cudaMemcpyAsync(counts, length.data(), sizeof(int64_t), cudaMemcpyHostToDevice, s), "Unique");
      check(cudaMemsetAsync(inverse, 0, n_ * sizeof(int64_t), s), "Unique");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize (Unique)");  // the vectors are on this stack
      return out;
    }
    const int64_t* order = state.order.data_as<int64_t>();
    const int64_t* run = state.run.data_as<int64_t>();
    // start, first, length, ids, rank; for sorted=0 also the sorted keys and ids.
    Tensor scratch = make(DType::kInt64, {u * (sorted_ ? 5 : 7)});
    int64_t* start = scratch.data_as<int64_t>();
    int64_t *first = start + u, *length = first + u, *ids = length + u, *rank = ids + u;
    const uint32_t g = twinfer_gpu::grid_for(std::max(n_, u));
    twinfer_gpu::run_starts<<<g, 256, 0, s>>>(run, n_, start);
    twinfer_gpu::run_facts<<<g, 256, 0, s>>>(order, start, u, n_, first, length, ids);
    const int64_t* by_pos = ids;  // sorted: output j is run j
    if (!sorted_) {
      // Runs by first occurrence: the first indices are distinct, so any sort.
      int64_t *keys_out = rank + u, *ids_out = keys_out + u;
      int bits = 1;
      while (bits < 63 && (int64_t(1) << bits) < n_) ++bits;
      size_t bytes = 0;
      check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, first, keys_out, ids, ids_out, u, 0, bits, s),
            "CUB radix sort size");
      Tensor temp = make(DType::kUInt8, {static_cast<int64_t>(bytes)});
      check(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, first, keys_out, ids, ids_out, u, 0, bits, s),
            "CUB radix sort");
      by_pos = ids_out;
    }
    twinfer_gpu::unique_outputs<<<g, 256, 0, s>>>(by_pos, first, length, u, rank, indices, counts);
    twinfer_gpu::unique_inverse<<<g, 256, 0, s>>>(order, run, rank, n_, inverse);
    const int64_t total = outer_ * u * inner_;
    dispatch_width(dtype_size(dtype_), [&](auto w) {
      using U = decltype(w);
      twinfer_gpu::gather_slices<U><<<twinfer_gpu::gather_slices_grid(total), 256, 0, s>>>(
          static_cast<const U*>(ctx.inputs[0].data), outer_, n_, u, inner_, indices, out[0].data_as<U>());
    }, "Unique");
    check_launch("Unique finish launch");
    return out;
  }

  void run(KernelContext&) const override {
    throw Error(ErrorKind::kRuntime, "Unique on CUDA runs only alone (its count read back)");
  }

 private:
  DType dtype_;
  Shape shape_;
  bool sorted_;
  int64_t axis_ = -1;
  int64_t n_ = 0, outer_ = 1, inner_ = 1;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Unique", Backend::kCUDA, 0, unique_supports, make_kernel<CudaUnique>);

}  // namespace twinfer::cuda
