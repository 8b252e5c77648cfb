// TopK on CUDA for the sizes detectors and samplers use (k <= 512 of rows of
// up to 65536): a block per row picks the k best one at a time, each pick a
// block-wide reduction in TopK's order (ops/tensor/topk_order.h, the CPU
// kernel's: better value first, NaN the largest, ties by the lower index)
// over the elements not taken yet (a bitmap in shared memory). Output sorted,
// as the CPU's.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/topk_order.h"

namespace twinfer_gpu {

constexpr int kTopKThreads = 256;
constexpr int64_t kTopKMaxRow = 65536;
constexpr int64_t kTopKMaxK = 512;

// (v, i) becomes the better of itself and (ov, oi); an index of -1 is no candidate.
template <typename C>
__device__ __forceinline__ void topk_keep(C& v, int64_t& i, C ov, int64_t oi, bool largest) {
  if (oi < 0) return;
  if (i < 0 || twinfer::tensor::topk_before(ov, oi, v, i, largest)) {
    v = ov;
    i = oi;
  }
}

template <typename T>
__global__ void __launch_bounds__(kTopKThreads)
    topk_rows(int64_t rows, int64_t n, int64_t k, int64_t inner, bool largest, const T* __restrict__ x,
              T* __restrict__ y, int64_t* __restrict__ yi) {
  using C = twinfer::ew::compute_t<T>;
  __shared__ uint32_t taken[kTopKMaxRow / 32];
  __shared__ C best_v[kTopKThreads / 32];
  __shared__ int64_t best_i[kTopKThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ int64_t winner;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r / inner, j = r % inner;
    const T* xr = x + o * n * inner + j;
    for (int64_t w = threadIdx.x; w < (n + 31) / 32; w += blockDim.x) taken[w] = 0u;
    __syncthreads();
    // Each thread keeps the best untaken element of its slice; only the
    // thread whose element was picked scans its slice again (n + k n / 256
    // reads a row instead of k n).
    C mine{};
    int64_t mine_i = -1;
    auto scan = [&] {
      mine_i = -1;
      for (int64_t e = threadIdx.x; e < n; e += blockDim.x)
        if (!(taken[e >> 5] & (1u << (e & 31)))) topk_keep(mine, mine_i, twinfer::ew::load(xr[e * inner]), e, largest);
    };
    scan();
    for (int64_t pick = 0; pick < k; ++pick) {
      C v = mine;
      int64_t idx = mine_i;
      for (int off = 16; off > 0; off >>= 1) {
        const C ov = __shfl_xor_sync(0xffffffffu, v, off);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, idx, off);
        topk_keep(v, idx, ov, oi, largest);
      }
      if (lane == 0) {
        best_v[warp] = v;
        best_i[warp] = idx;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        C bv = best_v[0];
        int64_t bi = best_i[0];
        for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) topk_keep(bv, bi, best_v[w], best_i[w], largest);
        const int64_t out = o * k * inner + pick * inner + j;
        y[out] = xr[bi * inner];
        if (yi) yi[out] = bi;
        taken[bi >> 5] |= 1u << (bi & 31);
        winner = bi;
      }
      __syncthreads();
      if (mine_i == winner) scan();
    }
    __syncthreads();  // every scan of this row is done before the next row clears `taken`
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

// Types a warp shuffle moves whole (the 8- and 16-bit integers stay on the CPU).
constexpr unsigned kTopKTypes = ew::kF32 | ew::kF64 | ew::kF16 | ew::kBF16 | ew::kI32 | ew::kI64 | ew::kU32 | ew::kU64;

struct TopKGeom {
  int64_t outer = 1, inner = 1, n = 0, k = 0;
};

TopKGeom topk_geom(const KernelBuildInfo& info) {
  TopKGeom g;
  const Shape x = info.input_shape(0);
  int64_t axis = info.node().attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  for (int64_t d = 0; d < axis; ++d) g.outer *= x[d];
  for (size_t d = axis + 1; d < x.size(); ++d) g.inner *= x[d];
  g.n = x[axis];
  g.k = info.output_shape(0)[axis];
  return g;
}

bool topk_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kTopKTypes, why)) return false;
  if (info.input_shape(0).empty()) {
    if (why) *why = "TopK of a scalar runs on the CPU";
    return false;
  }
  // K must be a constant: the CPU kernel checks a fed K against the plan's,
  // which on the device would mean reading it back.
  if (info.opset() >= 10 && info.has_input(1) && !info.input_constant(1)) {
    if (why) *why = "TopK with K computed at run time runs on the CPU";
    return false;
  }
  const TopKGeom g = topk_geom(info);
  if (g.n > twinfer_gpu::kTopKMaxRow || g.k > twinfer_gpu::kTopKMaxK) {
    if (why) *why = "TopK of more than 512 of rows longer than 65536 runs on the CPU";
    return false;
  }
  return true;
}

class CudaTopK final : public Kernel {
 public:
  explicit CudaTopK(const KernelBuildInfo& info)
      : g_(topk_geom(info)), dtype_(info.input_dtype(0)),
        largest_(info.opset() < 11 || info.node().attr_int("largest", 1) != 0), node_(info.node().name) {}
  void run(KernelContext& ctx) const override {
    const int64_t rows = g_.outer * g_.inner;
    if (g_.k == 0 || rows == 0) return;
    const cudaStream_t s = stream_of(ctx);
    int64_t* yi = ctx.outputs.size() > 1 && ctx.outputs[1].data ? ctx.outputs[1].as<int64_t>() : nullptr;
    ew::dispatch_typeset<kTopKTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::topk_rows<<<static_cast<uint32_t>(std::min<int64_t>(rows, 1 << 20)), twinfer_gpu::kTopKThreads, 0, s>>>(
          rows, g_.n, g_.k, g_.inner, largest_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), yi);
    });
    check_launch("TopK launch");
  }
  const char* impl_name() const override { return "cuda topk (block per row)"; }

 private:
  TopKGeom g_;
  DType dtype_;
  bool largest_;
  std::string node_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("TopK", Backend::kCUDA, 0, topk_supports, make_kernel<CudaTopK>);

}  // namespace twinfer::cuda
