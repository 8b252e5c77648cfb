// NonZero on CUDA: the coordinates of x's nonzero elements, [rank, K] in
// row-major order, K known only once counted. A dynamic-output kernel, run
// alone between plans (runtime/staged_tail.h): a first pass counts each
// block's chunk, the counts come back to the host (the one wait) for the
// offsets and K, a second pass writes each chunk's coordinates from its
// offset, in order (a scan of the threads' counts inside the block).
// Compress runs the same passes over its condition for the selected
// indices, then gathers those slices of x.
#include <vector>

#include "backends/cuda/count_offsets.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/gather_slices.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/compress_geom.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

constexpr int kNzThreads = 256;
constexpr int kNzPerThread = 16;
constexpr int64_t kNzChunk = int64_t(kNzThreads) * kNzPerThread;  // elements a block
constexpr int kNzMaxRank = 8;

struct NzStrides {
  int64_t s[kNzMaxRank];
};

template <typename T>
__device__ __forceinline__ bool nz(const T& v) {
  const auto c = twinfer::ew::load(v);
  return c != decltype(c)(0);
}

// The nonzeros of thread t's run of the chunk.
template <typename T>
__device__ __forceinline__ int nz_thread_count(const T* x, int64_t n, int64_t from) {
  int k = 0;
  for (int64_t i = from; i < from + kNzPerThread && i < n; ++i) k += nz(x[i]);
  return k;
}

template <typename T>
__global__ void __launch_bounds__(kNzThreads) nonzero_count(const T* __restrict__ x, int64_t n, int32_t* counts) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  const int64_t from = blockIdx.x * kNzChunk + int64_t(threadIdx.x) * kNzPerThread;
  atomicAdd(&total, nz_thread_count(x, n, from));
  __syncthreads();
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

template <typename T>
__global__ void __launch_bounds__(kNzThreads)
    nonzero_write(const T* __restrict__ x, int64_t n, int rank, NzStrides strides, const int64_t* __restrict__ offsets,
                  int64_t k, int64_t* __restrict__ y) {
  __shared__ int scan[kNzThreads];
  const int64_t from = blockIdx.x * kNzChunk + int64_t(threadIdx.x) * kNzPerThread;
  const int mine = nz_thread_count(x, n, from);
  scan[threadIdx.x] = mine;
  __syncthreads();
  for (int d = 1; d < kNzThreads; d <<= 1) {  // inclusive scan of the threads' counts
    const int add = threadIdx.x >= d ? scan[threadIdx.x - d] : 0;
    __syncthreads();
    scan[threadIdx.x] += add;
    __syncthreads();
  }
  int64_t at = offsets[blockIdx.x] + scan[threadIdx.x] - mine;
  for (int64_t i = from; i < from + kNzPerThread && i < n; ++i) {
    if (!nz(x[i])) continue;
    int64_t rem = i;
    for (int d = 0; d < rank; ++d) {
      y[d * k + at] = rem / strides.s[d];
      rem %= strides.s[d];
    }
    ++at;
  }
}

// Trues of cond[from, to): the condition past Compress's axis must hold none.
__global__ void count_true(const bool* __restrict__ cond, int64_t from, int64_t to, int32_t* out) {
  int k = 0;
  for (int64_t i = from + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < to; i += int64_t(gridDim.x) * blockDim.x)
    k += cond[i];
  if (k) atomicAdd(out, k);
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

// The coordinates' second pass (offsets from the host) into `y` [rank, k].
template <typename T>
void write_coordinates(const T* x, const Shape& shape, const PartOffsets& parts, Device dev,
                       const std::shared_ptr<Stream>& stream, cudaStream_t s, int64_t* y, const char* what) {
  const int rank = static_cast<int>(shape.size());
  const int64_t n = shape_numel(shape), blocks = (n + twinfer_gpu::kNzChunk - 1) / twinfer_gpu::kNzChunk;
  const Tensor dev_offsets = upload_part_starts(parts, dev, stream, s, what);
  twinfer_gpu::NzStrides strides{};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides.s[d] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  twinfer_gpu::nonzero_write<T><<<static_cast<uint32_t>(blocks), twinfer_gpu::kNzThreads, 0, s>>>(
      x, n, rank, strides, dev_offsets.data_as<int64_t>(), parts.total, y);
  check_launch(what);
}

bool nonzero_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, ew::kAllTypes, why)) return false;
  if (!runs_only_alone(info, "NonZero", why)) return false;
  if (info.input_shape(0).size() > static_cast<size_t>(twinfer_gpu::kNzMaxRank)) {
    if (why) *why = "NonZero of more than 8 dims runs on the CPU";
    return false;
  }
  return true;
}

class CudaNonZero final : public Kernel {
 public:
  explicit CudaNonZero(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)), shape_(info.input_shape(0)) {}
  const char* impl_name() const override { return "cuda nonzero (count read back)"; }
  bool dynamic_outputs() const override { return true; }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "NonZero on CUDA ran without its stream");
    return run_both_halves(*this, ctx, "NonZero");
  }

  // A count per block of x: its nonzeros.
  int64_t count_slots() const override { return std::max<int64_t>(blocks(), 1); }

  std::shared_ptr<void> count(KernelContext& ctx, int32_t* counts) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "NonZero on CUDA ran without its stream");
    const cudaStream_t s = stream_of(ctx);
    if (blocks() == 0) {
      check(cudaMemsetAsync(counts, 0, sizeof(int32_t), s), "cudaMemsetAsync (NonZero)");
      return nullptr;
    }
    ew::dispatch_typeset<ew::kAllTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::nonzero_count<T><<<static_cast<uint32_t>(blocks()), twinfer_gpu::kNzThreads, 0, s>>>(
          ctx.inputs[0].as<const T>(), shape_numel(shape_), counts);
    });
    check_launch("NonZero count launch");
    return nullptr;
  }

  std::vector<Tensor> finish(KernelContext& ctx, const int32_t* host_counts,
                             const std::shared_ptr<void>&) const override {
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    const int rank = static_cast<int>(shape_.size());
    const PartOffsets parts = part_offsets(host_counts, blocks());
    const int64_t k = parts.total;
    Tensor y = Tensor::empty_on(DType::kInt64, {rank, k}, dev, ctx.stream_ref);
    if (k == 0 || rank == 0) return {y};
    ew::dispatch_typeset<ew::kAllTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      write_coordinates(ctx.inputs[0].as<const T>(), shape_, parts, dev, ctx.stream_ref, s, y.data_as<int64_t>(),
                        "NonZero");
    });
    return {y};
  }

  // Never in a plan (nonzero_supports): only run alone.
  void run(KernelContext&) const override {
    throw Error(ErrorKind::kRuntime, "NonZero on CUDA runs only alone (its count read back)");
  }

 private:
  int64_t blocks() const { return (shape_numel(shape_) + twinfer_gpu::kNzChunk - 1) / twinfer_gpu::kNzChunk; }

  DType dtype_;
  Shape shape_;
};

bool compress_supports(const KernelBuildInfo& info, std::string* why) {
  if (!tensor::is_movable_dtype(info.input_dtype(0)) || info.input_dtype(1) != DType::kBool) {
    if (why) *why = "Compress on CUDA takes numeric or bool data and a bool condition";
    return false;
  }
  if (!runs_only_alone(info, "Compress", why)) return false;
  if (info.input_shape(1).size() != 1) {
    if (why) *why = "Compress's condition must be 1-D";
    return false;
  }
  return true;
}

// Compress(x, condition[, axis]): the slices of x along `axis` (the
// elements of flattened x without one) whose condition is true; a true past
// the axis's length is the CPU kernel's error.
class CudaCompress final : public Kernel {
 public:
  explicit CudaCompress(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), node_(info.node().name), g_(info), len_(info.input_shape(1)[0]),
        used_(std::min(len_, g_.n)) {}
  const char* impl_name() const override { return "cuda compress (count read back)"; }
  bool dynamic_outputs() const override { return true; }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "Compress on CUDA ran without its stream");
    return run_both_halves(*this, ctx, "Compress");
  }

  // The condition's block counts over the axis, then its trues past it.
  int64_t count_slots() const override { return blocks() + 1; }

  std::shared_ptr<void> count(KernelContext& ctx, int32_t* counts) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "Compress on CUDA ran without its stream");
    const cudaStream_t s = stream_of(ctx);
    check(cudaMemsetAsync(counts, 0, count_slots() * sizeof(int32_t), s), "cudaMemsetAsync (Compress)");
    const bool* cond = ctx.inputs[1].as<const bool>();
    if (blocks() > 0)
      twinfer_gpu::nonzero_count<bool><<<static_cast<uint32_t>(blocks()), twinfer_gpu::kNzThreads, 0, s>>>(
          cond, used_, counts);
    if (len_ > used_)
      twinfer_gpu::count_true<<<static_cast<uint32_t>(std::min<int64_t>((len_ - used_ + 255) / 256, 1024)), 256, 0,
                                s>>>(cond, used_, len_, counts + blocks());
    check_launch("Compress count launch");
    return nullptr;
  }

  std::vector<Tensor> finish(KernelContext& ctx, const int32_t* host_counts,
                             const std::shared_ptr<void>&) const override {
    if (host_counts[blocks()] > 0)
      throw Error(ErrorKind::kInvalidArgument, "condition is true beyond the axis length", node_, "Compress");
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    const PartOffsets parts = part_offsets(host_counts, blocks());
    const int64_t k = parts.total;
    Tensor y = Tensor::empty_on(dtype_, g_.output(k), dev, ctx.stream_ref);
    if (k == 0 || y.numel() == 0) return {y};
    Tensor idx = Tensor::empty_on(DType::kInt64, {k}, dev, ctx.stream_ref);
    write_coordinates(ctx.inputs[1].as<const bool>(), Shape{used_}, parts, dev, ctx.stream_ref, s,
                      idx.data_as<int64_t>(), "Compress");
    const int64_t total = g_.outer * k * g_.inner;
    const uint32_t grid = twinfer_gpu::gather_slices_grid(total);
    dispatch_width(dtype_size(dtype_), [&](auto u) {
      using U = decltype(u);
      twinfer_gpu::gather_slices<U><<<grid, 256, 0, s>>>(static_cast<const U*>(ctx.inputs[0].data), g_.outer, g_.n,
                                                          k, g_.inner, idx.data_as<int64_t>(), y.data_as<U>());
    }, "Compress");
    check_launch("Compress gather launch");
    return {y};
  }

  void run(KernelContext&) const override {
    throw Error(ErrorKind::kRuntime, "Compress on CUDA runs only alone (its count read back)");
  }

 private:
  int64_t blocks() const { return (used_ + twinfer_gpu::kNzChunk - 1) / twinfer_gpu::kNzChunk; }

  DType dtype_;
  std::string node_;
  tensor::CompressGeom g_;
  int64_t len_ = 0;   // the condition's length
  int64_t used_ = 0;  // of it, what lies along the axis
};

}  // namespace

TWINFER_REGISTER_KERNEL("NonZero", Backend::kCUDA, 0, nonzero_supports, make_kernel<CudaNonZero>);
TWINFER_REGISTER_KERNEL("Compress", Backend::kCUDA, 0, compress_supports, make_kernel<CudaCompress>);

}  // namespace twinfer::cuda
