// NonMaxSuppression on CUDA, for the detector heads whose boxes a plan has
// just computed on the device (runtime/staged_tail.h runs it alone, between
// the plan before it and the one after). Its output's length depends on the
// boxes, so it is a dynamic-output kernel: run_dynamic selects on the
// device, reads the count of each (batch, class) back (the one wait), and
// writes [K, 3] into a tensor of that length ordered with the run's stream.
//
// A block per (batch, class): the candidates (score above the threshold)
// ranked in the CPU kernel's order by counting the candidates before each
// (ops/tensor/nms_math.h: higher score first, ties by the lower index, NaN
// first), then taken one at a time in that order, each tested against the
// boxes kept so far by the whole block (the same decisions as the CPU's
// sequential loop: whether any kept box suppresses a candidate does not
// depend on the order of the tests), until max_output_boxes_per_class are
// kept. Up to 4096 boxes a class (the scores in shared memory, the ranking
// n^2 / 256 comparisons a thread); more run on the CPU.
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/nms_math.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

constexpr int kNmsThreads = 256;
constexpr int64_t kNmsMaxBoxes = 4096;

template <typename T>
__global__ void __launch_bounds__(kNmsThreads)
    nms_select(int64_t nc, int64_t n, const T* __restrict__ boxes, const T* __restrict__ scores, bool center,
               bool has_score, double score_thr, double iou_thr, int64_t cap, int32_t* order, int32_t* kept,
               int32_t* __restrict__ counts) {
  // order and kept are written and read back by other threads of the block
  // (after a barrier): plain pointers, never the read-only cache.
  using C = twinfer::ew::compute_t<T>;
  using twinfer::tensor::NmsBox;
  __shared__ C s[kNmsMaxBoxes];
  __shared__ int n_cand, n_kept;
  const int64_t seg = blockIdx.x, b = seg / nc;
  const T* sc = scores + seg * n;  // scores [B, C, N]: (b * nc + c) * n
  const T* bx = boxes + b * n * 4;
  int32_t* ord = order + seg * n;
  int32_t* kp = kept + seg * cap;
  if (threadIdx.x == 0) n_cand = n_kept = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s[i] = twinfer::ew::load(sc[i]);
  __syncthreads();
  // Each candidate's place in the order: the candidates that come before it.
  int mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const C si = s[i];
    if (!twinfer::tensor::nms_candidate(si, has_score, score_thr)) continue;
    int rank = 0;
    for (int64_t j = 0; j < n; ++j)
      rank += twinfer::tensor::nms_candidate(s[j], has_score, score_thr) &&
              twinfer::tensor::nms_before(s[j], j, si, i);
    ord[rank] = static_cast<int32_t>(i);
    ++mine;
  }
  atomicAdd(&n_cand, mine);
  __syncthreads();
  auto box_of = [&](int64_t i) {
    C v[4];
    for (int j = 0; j < 4; ++j) v[j] = twinfer::ew::load(bx[i * 4 + j]);
    return twinfer::tensor::nms_corners(v, center);
  };
  const int cand = n_cand;
  for (int r = 0; r < cand; ++r) {
    const int have = n_kept;  // read after the last barrier: the same in every thread
    if (have >= cap) break;
    const int32_t i = ord[r];
    const NmsBox<C> bi = box_of(i);
    bool hit = false;
    for (int t = threadIdx.x; t < have && !hit; t += blockDim.x) hit = twinfer::tensor::nms_suppresses(bi, box_of(kp[t]), iou_thr);
    hit = __syncthreads_or(hit);
    if (!hit && threadIdx.x == 0) {
      kp[have] = i;
      n_kept = have + 1;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[seg] = n_kept;
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
  const Shape b = info.input_shape(0), s = info.input_shape(1);
  if (b.size() != 3 || s.size() != 3 || b[2] != 4 || b[0] != s[0] || b[1] != s[2]) {
    if (why) *why = "NonMaxSuppression takes boxes [B, N, 4] and scores [B, C, N]";
    return false;
  }
  if (b[1] > twinfer_gpu::kNmsMaxBoxes) {
    if (why) *why = "NonMaxSuppression over more than 4096 boxes runs on the CPU";
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
  const char* impl_name() const override { return "cuda nms (block per class; its count read back)"; }
  bool dynamic_outputs() const override { return true; }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (!ctx.stream_ref) throw Error(ErrorKind::kRuntime, "NonMaxSuppression on CUDA ran without its stream");
    const cudaStream_t s = stream_of(ctx);
    const Device dev = ctx.stream->device();
    NmsScalars p = scalars_;
    read_fed_scalars(ctx, s, &p);
    const int64_t segs = nb_ * nc_, cap = std::min(p.max_out, n_);
    if (segs == 0 || cap == 0 || n_ == 0) return {Tensor::empty_on(DType::kInt64, {0, 3}, dev, ctx.stream_ref)};
    // Scratch in the stream's order: freed there after the kernels that use it.
    Tensor order = Tensor::empty_on(DType::kInt32, {segs, n_}, dev, ctx.stream_ref);
    Tensor kept = Tensor::empty_on(DType::kInt32, {segs, cap}, dev, ctx.stream_ref);
    Tensor counts = Tensor::empty_on(DType::kInt32, {segs}, dev, ctx.stream_ref);
    ew::dispatch_typeset<kNmsTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::nms_select<T><<<static_cast<uint32_t>(segs), twinfer_gpu::kNmsThreads, 0, s>>>(
          nc_, n_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), center_, p.has_score, p.score, p.iou,
          cap, order.data_as<int32_t>(), kept.data_as<int32_t>(), counts.data_as<int32_t>());
    });
    check_launch("NonMaxSuppression launch");
    std::vector<int32_t> host_counts(static_cast<size_t>(segs));
    check(cudaMemcpyAsync(host_counts.data(), counts.data(), segs * sizeof(int32_t), cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync (NonMaxSuppression counts)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (NonMaxSuppression counts)");
    std::vector<int64_t> offsets(static_cast<size_t>(segs));
    int64_t total = 0;
    for (int64_t g = 0; g < segs; ++g) {
      offsets[static_cast<size_t>(g)] = total;
      total += host_counts[static_cast<size_t>(g)];
    }
    Tensor y = Tensor::empty_on(DType::kInt64, {total, 3}, dev, ctx.stream_ref);
    if (total == 0) return {y};
    Tensor dev_offsets = Tensor::empty_on(DType::kInt64, {segs}, dev, ctx.stream_ref);
    // From pageable memory: returns once `offsets` has been read.
    check(cudaMemcpyAsync(dev_offsets.data(), offsets.data(), segs * sizeof(int64_t), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync (NonMaxSuppression offsets)");
    twinfer_gpu::nms_write<<<static_cast<uint32_t>(std::min<int64_t>(segs, 1 << 16)), 128, 0, s>>>(
        segs, nc_, cap, kept.data_as<int32_t>(), counts.data_as<int32_t>(), dev_offsets.data_as<int64_t>(),
        y.data_as<int64_t>());
    check_launch("NonMaxSuppression output launch");
    return {y};
  }

  // A plan that knows K (constant inputs fold at load; this is for a plan
  // that planned the selection's length anyway): the same selection into y.
  void run(KernelContext& ctx) const override {
    std::vector<Tensor> got = run_dynamic(ctx);
    const TensorView& y = ctx.outputs[0];
    if (got[0].shape()[0] != y.shape[0])
      throw Error(ErrorKind::kInvalidArgument, "selection differs from the planned output");
    check(cudaMemcpyAsync(y.data, got[0].data(), got[0].bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)),
          "cudaMemcpyAsync (NonMaxSuppression output)");
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

  DType dtype_;
  bool center_;
  int64_t nb_ = 0, n_ = 0, nc_ = 0;
  NmsScalars scalars_;           // the constant ones
  bool fed_[3] = {false, false, false};  // max_output_boxes_per_class, iou_threshold, score_threshold
};

}  // namespace

TWINFER_REGISTER_KERNEL("NonMaxSuppression", Backend::kCUDA, 0, nms_supports, make_kernel<CudaNms>);

}  // namespace twinfer::cuda
