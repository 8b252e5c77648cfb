// Einsum on CUDA as the plain contraction its equation states: a thread per
// output element sums, over every value of the labels the output does not
// keep, the product of the operands' elements (ops/tensor/einsum.h parses the
// equation as the CPU kernel does; a label repeated in one operand adds its
// strides, which walks the diagonal; a size-1 dim broadcasts with stride 0).
// Accumulation in the CPU kernel's compute type (float for float32 and the
// 16-bit floats, double for float64, int64 for integers). No GEMM: this is
// the coverage path for the equations models rarely put on a hot path (the
// CPU plans batched GEMMs; MatMul-shaped einsums are usually exported as
// MatMul).
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/einsum.h"

namespace twinfer_gpu {

constexpr int kEinsumMaxOps = 4, kEinsumMaxLabels = 12;

struct EinsumGeom {
  int nops = 0, nout = 0, nsum = 0;
  int64_t sum_total = 1;
  int64_t out_dim[kEinsumMaxLabels] = {}, sum_dim[kEinsumMaxLabels] = {};
  int64_t out_stride[kEinsumMaxOps][kEinsumMaxLabels] = {}, sum_stride[kEinsumMaxOps][kEinsumMaxLabels] = {};
};

template <typename T>
struct EinsumOperands {
  const T* p[kEinsumMaxOps];
};

template <typename T, typename Acc>
__global__ void einsum_naive(int64_t n, EinsumGeom g, EinsumOperands<T> x, T* __restrict__ y) {
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    int64_t base[kEinsumMaxOps] = {};
    int64_t rem = t;
    for (int d = g.nout - 1; d >= 0; --d) {
      const int64_t v = rem % g.out_dim[d];
      rem /= g.out_dim[d];
      for (int k = 0; k < g.nops; ++k) base[k] += v * g.out_stride[k][d];
    }
    Acc acc = Acc(0);
    for (int64_t u = 0; u < g.sum_total; ++u) {
      int64_t off[kEinsumMaxOps];
      for (int k = 0; k < g.nops; ++k) off[k] = base[k];
      int64_t r = u;
      for (int d = g.nsum - 1; d >= 0; --d) {
        const int64_t v = r % g.sum_dim[d];
        r /= g.sum_dim[d];
        for (int k = 0; k < g.nops; ++k) off[k] += v * g.sum_stride[k][d];
      }
      Acc prod = Acc(1);
      for (int k = 0; k < g.nops; ++k) prod *= static_cast<Acc>(twinfer::ew::load(x.p[k][off[k]]));
      acc += prod;
    }
    if constexpr (std::is_integral<Acc>::value) y[t] = static_cast<T>(acc);
    else y[t] = twinfer::ew::store<T>(acc);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using twinfer_gpu::kEinsumMaxLabels;
using twinfer_gpu::kEinsumMaxOps;

constexpr unsigned kEinsumCudaTypes = tensor::kEinsumTypes & kCudaElementwiseTypes;

std::vector<Shape> operand_shapes(const KernelBuildInfo& info) {
  std::vector<Shape> s;
  for (size_t i = 0; i < info.num_inputs(); ++i) s.push_back(info.input_shape(i));
  return s;
}

// The geometry, or false with *why: too many operands or labels for the
// kernel's fixed arrays, or label dims that disagree.
bool einsum_geom(const KernelBuildInfo& info, twinfer_gpu::EinsumGeom* g, std::string* why) {
  const std::vector<Shape> shapes = operand_shapes(info);
  if (shapes.size() > static_cast<size_t>(kEinsumMaxOps)) {
    if (why) *why = "Einsum of more than " + std::to_string(kEinsumMaxOps) + " operands has no CUDA kernel";
    return false;
  }
  std::vector<size_t> ranks;
  for (const Shape& s : shapes) ranks.push_back(s.size());
  const tensor::EinsumSpec s = tensor::parse_einsum(info, tensor::einsum_equation(info), ranks);
  std::vector<int64_t> dim(s.num_labels, 1);
  std::vector<char> used(s.num_labels, 0);
  for (size_t k = 0; k < shapes.size(); ++k)
    for (size_t a = 0; a < shapes[k].size(); ++a) {
      const int l = s.in[k][a];
      used[l] = 1;
      const int64_t v = shapes[k][a];
      if (dim[l] != 1 && v != 1 && dim[l] != v) {
        if (why) *why = "Einsum label dims " + std::to_string(dim[l]) + " and " + std::to_string(v) + " differ";
        return false;
      }
      if (v != 1) dim[l] = v;
    }
  std::vector<int> sum_labels;
  for (int l = 0; l < s.num_labels; ++l)
    if (used[l] && std::find(s.out.begin(), s.out.end(), l) == s.out.end()) sum_labels.push_back(l);
  if (s.out.size() > static_cast<size_t>(kEinsumMaxLabels) || sum_labels.size() > static_cast<size_t>(kEinsumMaxLabels)) {
    if (why) *why = "Einsum with more than " + std::to_string(kEinsumMaxLabels) + " labels has no CUDA kernel";
    return false;
  }
  g->nops = static_cast<int>(shapes.size());
  g->nout = static_cast<int>(s.out.size());
  g->nsum = static_cast<int>(sum_labels.size());
  for (int d = 0; d < g->nout; ++d) g->out_dim[d] = dim[s.out[d]];
  for (int d = 0; d < g->nsum; ++d) {
    g->sum_dim[d] = dim[sum_labels[d]];
    g->sum_total *= g->sum_dim[d];
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape st = contiguous_strides(shapes[k]);
    std::vector<int64_t> lstride(s.num_labels, 0);
    for (size_t a = 0; a < shapes[k].size(); ++a)
      if (shapes[k][a] != 1) lstride[s.in[k][a]] += st[a];
    for (int d = 0; d < g->nout; ++d) g->out_stride[k][d] = lstride[s.out[d]];
    for (int d = 0; d < g->nsum; ++d) g->sum_stride[k][d] = lstride[sum_labels[d]];
  }
  return true;
}

bool einsum_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kEinsumCudaTypes, why)) return false;
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (!ew::check_same_dtype(info, {0, i}, why)) return false;
  twinfer_gpu::EinsumGeom g;
  try {
    return einsum_geom(info, &g, why);
  } catch (const Error& e) {  // an equation the shape rule let through but the kernel cannot read
    if (why) *why = e.what();
    return false;
  }
}

class CudaEinsum final : public Kernel {
 public:
  explicit CudaEinsum(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)), n_(shape_numel(info.output_shape(0))) {
    std::string why;
    if (!einsum_geom(info, &g_, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kEinsumCudaTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ew::compute_t<T>;
      using Acc = std::conditional_t<std::is_integral<C>::value, int64_t, C>;
      twinfer_gpu::EinsumOperands<T> x{};
      for (int k = 0; k < g_.nops; ++k) x.p[k] = ctx.inputs[k].as<const T>();
      twinfer_gpu::einsum_naive<T, Acc><<<lc.blocks, lc.threads, 0, s>>>(n_, g_, x, ctx.outputs[0].as<T>());
    });
    check_launch("Einsum launch");
  }
  const char* impl_name() const override { return "cuda einsum (direct contraction)"; }

 private:
  DType dtype_;
  int64_t n_;
  twinfer_gpu::EinsumGeom g_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Einsum", Backend::kCUDA, 0, einsum_supports, make_kernel<CudaEinsum>);

}  // namespace twinfer::cuda
