// NonMaxSuppression on CUDA, for the detector heads whose boxes a plan has
// just computed on the device (runtime/staged_tail.h runs it alone, between
// the plan before it and the one after). Its output's length depends on the
// boxes, so it is a dynamic-output kernel: run_dynamic selects on the
// device, reads the count of each (batch, class) back (the one wait), and
// writes [K, 3] into a tensor of that length ordered with the run's stream.
//
// Per (batch, class), in three kernels (torchvision's CUDA NMS has the same
// plan for its last two):
//   1. rank: each candidate (score above the threshold) finds its place in
//      the CPU kernel's order by counting the candidates before it
//      (ops/tensor/nms_math.h: higher score first, ties by the lower index,
//      NaN first), the scores read in tiles through shared memory; n^2
//      comparisons spread over the grid.
//   2. mask: for each candidate in that order, a bit per later candidate it
//      suppresses (IoU above the threshold), 64 by 64 a block.
//   3. keep: one block walks the candidates in order with the suppressed
//      ones as a bitset in shared memory; a kept box ORs its row in (a
//      barrier per kept box, none per candidate), until
//      max_output_boxes_per_class are kept. The same decisions as the CPU's
//      loop, which tests each candidate against the boxes kept before it.
// Up to 65536 boxes a class and a 1 GiB mask; more run on the CPU.
#include <vector>

#include "backends/cuda/count_offsets.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/nms_math.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

constexpr int kNmsThreads = 256;
constexpr int64_t kNmsMaxBoxes = 65536;
constexpr int kNmsWords = int(kNmsMaxBoxes / 64);  // the keep kernel's bitset

template <typename T>
__device__ __forceinline__ twinfer::tensor::NmsBox<twinfer::ew::compute_t<T>> nms_box(const T* bx, int64_t i,
                                                                                      bool center) {
  twinfer::ew::compute_t<T> v[4];
  for (int j = 0; j < 4; ++j) v[j] = twinfer::ew::load(bx[i * 4 + j]);
  return twinfer::tensor::nms_corners(v, center);
}

// Grid (ceil(n / 256), segments). order[seg][rank] = box; cand[seg] counts.
template <typename T>
__global__ void __launch_bounds__(kNmsThreads)
    nms_rank(int64_t n, const T* __restrict__ scores, bool has_score, double score_thr, int32_t* __restrict__ order,
             int32_t* __restrict__ cand) {
  using C = twinfer::ew::compute_t<T>;
  __shared__ C tile[kNmsThreads];
  const int64_t seg = blockIdx.y;
  const T* sc = scores + seg * n;  // scores [B, C, N]: (b * nc + c) * n
  const int64_t i = int64_t(blockIdx.x) * kNmsThreads + threadIdx.x;
  const C si = i < n ? twinfer::ew::load(sc[i]) : C(0);
  const bool mine = i < n && twinfer::tensor::nms_candidate(si, has_score, score_thr);
  int rank = 0;
  for (int64_t from = 0; from < n; from += kNmsThreads) {
    const int64_t j = from + threadIdx.x;
    if (j < n) tile[threadIdx.x] = twinfer::ew::load(sc[j]);
    __syncthreads();
    const int64_t m = n - from < kNmsThreads ? n - from : kNmsThreads;
    if (mine)
      for (int64_t t = 0; t < m; ++t)
        rank += twinfer::tensor::nms_candidate(tile[t], has_score, score_thr) &&
                twinfer::tensor::nms_before(tile[t], from + t, si, i);
    __syncthreads();
  }
  if (mine) {
    order[seg * n + rank] = static_cast<int32_t>(i);
    atomicAdd(&cand[seg], 1);
  }
}

// Grid (ceil(n / 64) column blocks, ceil(n / 64) row blocks, segments), 64
// threads: row r's bits for columns c > r of this block of 64.
template <typename T>
__global__ void __launch_bounds__(64)
    nms_mask(int64_t nc, int64_t n, int64_t words, const T* __restrict__ boxes, bool center, double iou_thr,
             const int32_t* __restrict__ order, const int32_t* __restrict__ cand, uint64_t* __restrict__ mask) {
  using C = twinfer::ew::compute_t<T>;
  __shared__ twinfer::tensor::NmsBox<C> cols[64];
  const int64_t seg = blockIdx.z, count = cand[seg];
  const int64_t row0 = int64_t(blockIdx.y) * 64, col0 = int64_t(blockIdx.x) * 64;
  if (row0 >= count || col0 >= count || col0 + 63 < row0) return;  // the whole block: no barrier is skipped alone
  const T* bx = boxes + (seg / nc) * n * 4;
  const int32_t* ord = order + seg * n;
  if (col0 + threadIdx.x < count) cols[threadIdx.x] = nms_box(bx, ord[col0 + threadIdx.x], center);
  __syncthreads();
  const int64_t r = row0 + threadIdx.x;
  if (r >= count) return;
  const twinfer::tensor::NmsBox<C> mine = nms_box(bx, ord[r], center);
  uint64_t bits = 0;
  for (int c = 0; c < 64 && col0 + c < count; ++c)
    if (col0 + c > r && twinfer::tensor::nms_suppresses(cols[c], mine, iou_thr)) bits |= uint64_t(1) << c;
  mask[(seg * n + r) * words + blockIdx.x] = bits;
}

// One block a segment: the candidates in order, a kept one's row ORed into
// the suppressed set.
__global__ void __launch_bounds__(kNmsThreads)
    nms_keep(int64_t n, int64_t words, int64_t cap, const int32_t* __restrict__ order,
             const int32_t* __restrict__ cand, const uint64_t* __restrict__ mask, int32_t* __restrict__ kept,
             int32_t* __restrict__ counts) {
  __shared__ uint64_t removed[kNmsWords];
  const int64_t seg = blockIdx.x, count = cand[seg];
  const int64_t used = (count + 63) / 64;  // the mask kernel wrote no words past the candidates
  for (int64_t w = threadIdx.x; w < used; w += blockDim.x) removed[w] = 0;
  __syncthreads();
  int64_t have = 0;  // the same in every thread
  for (int64_t i = 0; i < count && have < cap; ++i) {
    const uint64_t word = removed[i >> 6];
    if (word & (uint64_t(1) << (i & 63))) continue;  // suppressed: no barrier
    __syncthreads();  // every thread has read the word before any ORs into it
    if (threadIdx.x == 0) kept[seg * cap + have] = order[seg * n + i];
    ++have;
    const uint64_t* row = mask + (seg * n + i) * words;
    for (int64_t w = (i >> 6) + threadIdx.x; w < used; w += blockDim.x) removed[w] |= row[w];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[seg] = static_cast<int32_t>(have);
}

// Row (offset[seg] + t) of y is (batch, class, kept box t) of segment seg.
__global__ void nms_write(int64_t segs, int64_t nc, int64_t cap, const int32_t* __restrict__ kept,
                          const int32_t* __restrict__ counts, const int64_t* __restrict__ offsets,
                          int64_t* __restrict__ y) {
  for (int64_t seg = blockIdx.x; seg < segs; seg += gridDim.x)
    for (int t = threadIdx.x; t < counts[seg]; t += blockDim.x) {
      int64_t* row = y + (offsets[seg] + t) * 3;
      row[0] = seg / nc;
      row[1] = seg % nc;
      row[2] = kept[seg * cap + t];
    }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kNmsTypes = ew::kF32 | ew::kF64 | ew::kF16 | ew::kBF16;

double scalar_as_double(const Tensor& t) {
  double v = 0;
  ew::dispatch_typeset<ew::kFloatTypes>(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(ew::load(*t.data_as<const T>()));
  });
  return v;
}

struct NmsScalars {
  int64_t max_out = 0;  // absent: none kept (the spec's default)
  double iou = 0, score = 0;
  bool has_score = false;
};

bool nms_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kNmsTypes, why) || !ew::check_same_dtype(info, {0, 1}, why)) return false;
  if (!runs_only_alone(info, "NonMaxSuppression", why)) return false;
  const Shape b = info.input_shape(0), s = info.input_shape(1);
  if (b.size() != 3 || s.size() != 3 || b[2] != 4 || b[0] != s[0] || b[1] != s[2]) {
    if (why) *why = "NonMaxSuppression takes boxes [B, N, 4] and scores [B, C, N]";
    return false;
  }
  const int64_t segs = b[0] * s[1], words = (b[1] + 63) / 64;
  if (b[1] > twinfer_gpu::kNmsMaxBoxes || segs > 65535 || segs * b[1] * words * 8 > (int64_t(1) << 30)) {
    if (why)
      *why = "NonMaxSuppression over more than 65536 boxes, 65535 (batch, class) pairs or a 1 GiB mask runs on the CPU";
    return false;
  }
  return true;
}

class CudaNms final : public Kernel {
 public:
  explicit CudaNms(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), center_(info.node().attr_int("center_point_box", 0) != 0) {
    const Shape b = info.input_shape(0), s = info.input_shape(1);
    nb_ = b[0], n_ = b[1], nc_ = s[1];
    // The scalars: constants (torch's exports) read now, inputs at each run.
    for (size_t i = 2; i < 5; ++i) {
      if (!info.has_input(i)) continue;
      if (const Tensor* t = info.input_constant(i)) set_scalar(i, *t);
      else fed_[i - 2] = true;
    }
  }
  const char* impl_name() const override { return "cuda nms (rank, mask, keep; its count read back)"; }
  bool dynamic_outputs() const override { return true; }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "NonMaxSuppression on CUDA ran without its stream");
    return run_both_halves(*this, ctx, "NonMaxSuppression");
  }

  // A count per (batch, class): the boxes it keeps.
  int64_t count_slots() const override { return std::max<int64_t>(nb_ * nc_, 1); }

  std::shared_ptr<void> count(KernelContext& ctx, int32_t* counts) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "NonMaxSuppression on CUDA ran without its stream");
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    auto st = std::make_shared<State>();
    st->counts = counts;
    NmsScalars p = scalars_;
    read_fed_scalars(ctx, s, &p);
    const int64_t segs = nb_ * nc_;
    st->cap = std::min(p.max_out, n_);
    check(cudaMemsetAsync(counts, 0, count_slots() * sizeof(int32_t), s), "cudaMemsetAsync (NonMaxSuppression)");
    if (segs == 0 || st->cap == 0 || n_ == 0) return st;  // nothing kept: every count 0
    // Scratch in the stream's order: freed there after the kernels that use it.
    const int64_t words = (n_ + 63) / 64;
    Tensor order = Tensor::empty_on(DType::kInt32, {segs, n_}, dev, ctx.stream_ref);
    Tensor cand = Tensor::empty_on(DType::kInt32, {segs}, dev, ctx.stream_ref);
    Tensor mask = Tensor::empty_on(DType::kUInt64, {segs, n_, words}, dev, ctx.stream_ref);
    st->kept = Tensor::empty_on(DType::kInt32, {segs, st->cap}, dev, ctx.stream_ref);
    check(cudaMemsetAsync(cand.data(), 0, cand.bytes(), s), "cudaMemsetAsync (NonMaxSuppression)");
    const auto* boxes_p = ctx.inputs[0].data;
    const auto* scores_p = ctx.inputs[1].data;
    ew::dispatch_typeset<kNmsTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const dim3 rank_grid(static_cast<uint32_t>((n_ + twinfer_gpu::kNmsThreads - 1) / twinfer_gpu::kNmsThreads),
                           static_cast<uint32_t>(segs));
      twinfer_gpu::nms_rank<T><<<rank_grid, twinfer_gpu::kNmsThreads, 0, s>>>(
          n_, static_cast<const T*>(scores_p), p.has_score, p.score, order.data_as<int32_t>(), cand.data_as<int32_t>());
      const dim3 mask_grid(static_cast<uint32_t>(words), static_cast<uint32_t>(words), static_cast<uint32_t>(segs));
      twinfer_gpu::nms_mask<T><<<mask_grid, 64, 0, s>>>(nc_, n_, words, static_cast<const T*>(boxes_p), center_, p.iou,
                                                        order.data_as<int32_t>(), cand.data_as<int32_t>(),
                                                        mask.data_as<uint64_t>());
    });
    twinfer_gpu::nms_keep<<<static_cast<uint32_t>(segs), twinfer_gpu::kNmsThreads, 0, s>>>(
        n_, words, st->cap, order.data_as<int32_t>(), cand.data_as<int32_t>(), mask.data_as<uint64_t>(),
        st->kept.data_as<int32_t>(), counts);
    check_launch("NonMaxSuppression launch");
    return st;
  }

  std::vector<Tensor> finish(KernelContext& ctx, const int32_t* host_counts,
                             const std::shared_ptr<void>& state) const override {
    const auto& st = *static_cast<const State*>(state.get());
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    const int64_t segs = nb_ * nc_;
    const PartOffsets parts = part_offsets(host_counts, segs);
    Tensor y = Tensor::empty_on(DType::kInt64, {parts.total, 3}, dev, ctx.stream_ref);
    if (parts.total == 0) return {y};
    const Tensor dev_offsets = upload_part_starts(parts, dev, ctx.stream_ref, s, "NonMaxSuppression");
    twinfer_gpu::nms_write<<<static_cast<uint32_t>(std::min<int64_t>(segs, 1 << 16)), 128, 0, s>>>(
        segs, nc_, st.cap, st.kept.data_as<int32_t>(), st.counts, dev_offsets.data_as<int64_t>(),
        y.data_as<int64_t>());
    check_launch("NonMaxSuppression output launch");
    return {y};
  }

  // Never in a plan (nms_supports): only run alone.
  void run(KernelContext&) const override {
    throw Error(ErrorKind::kRuntime, "NonMaxSuppression on CUDA runs only alone (its count read back)");
  }

 private:
  void set_scalar(size_t i, const Tensor& t) { set_scalar(i, t, &scalars_); }
  static void set_scalar(size_t i, const Tensor& t, NmsScalars* p) {
    if (t.numel() == 0) return;
    if (i == 2) {
      p->max_out = std::max<int64_t>(0, tensor::view_scalar_int(t.view()));
    } else if (i == 3) {
      p->iou = scalar_as_double(t);
    } else {
      p->has_score = true;
      p->score = scalar_as_double(t);
    }
  }
  // The scalars fed as inputs (the ONNX tests feed them), read back in one wait.
  void read_fed_scalars(const KernelContext& ctx, cudaStream_t s, NmsScalars* p) const {
    Tensor host[3];
    bool any = false;
    for (size_t i = 2; i < 5; ++i) {
      if (!fed_[i - 2] || ctx.inputs.size() <= i || !ctx.inputs[i].data || ctx.inputs[i].numel() == 0) continue;
      const TensorView& v = ctx.inputs[i];
      host[i - 2] = Tensor::empty(v.dtype, {});
      check(cudaMemcpyAsync(host[i - 2].data(), v.data, dtype_size(v.dtype), cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync (NonMaxSuppression scalar)");
      any = true;
    }
    if (!any) return;
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (NonMaxSuppression scalars)");
    for (size_t i = 2; i < 5; ++i)
      if (host[i - 2].defined()) set_scalar(i, host[i - 2], p);
  }

  struct State {  // from count to finish
    int32_t* counts = nullptr;  // the caller's, on the device
    int64_t cap = 0;            // boxes kept at most per (batch, class)
    Tensor kept;                // [segs, cap] box indices
  };

  DType dtype_;
  bool center_;
  int64_t nb_ = 0, n_ = 0, nc_ = 0;
  NmsScalars scalars_;           // the constant ones
  bool fed_[3] = {false, false, false};  // max_output_boxes_per_class, iou_threshold, score_threshold
};

}  // namespace

TWINFER_REGISTER_KERNEL("NonMaxSuppression", Backend::kCUDA, 0, nms_supports, make_kernel<CudaNms>);

}  // namespace twinfer::cuda
