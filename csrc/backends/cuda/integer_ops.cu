// MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and
// DynamicQuantizeLinear on the GPU: simple direct kernels (one thread per output element, int32 sums that
// wrap modulo 2^32 as the CPU's do), written to be obviously right rather
// than fast. The int8 fast paths (com.twinfer::QMatMul / QConv on cuBLASLt /
// cuDNN, gemm_qlinear.cc) are not touched: those fused ops are what
// quantized models run; these serve the plain ONNX integer ops.
//
// Arithmetic as the CPU kernels (backends/cpu/onednn_matmul_integer.cc,
// onednn_conv_integer.cc, ops/quant/quantize_linear.cc):
//   MatMulInteger: y[b, m, n] = sum_k (a - za[m]) * (b - zb[n]); zero points
//     per tensor, per row of A / per column of B; batch dims broadcast.
//   QLinearMatMul: the same sum c, then
//     mult = round(st, round(st, a_scale * b_scale) / y_scale) (st: the
//     scales' type), y = saturate(round_half_even(double(c) * mult + y_zero)).
//   ConvInteger: 1-3 spatial dims, groups, pads, strides, dilations; x's zero
//     point per tensor, w's per tensor or per output channel; padding adds 0.
//   QLinearConv: the same sum plus the int32 bias, then
//     mult = float(x_scale * w_scale[m] / y_scale),
//     y = saturate(round_half_even(double(c) * mult + y_zero)).
//   DynamicQuantizeLinear: min/max with 0 (NaN skipped) in one block, scale =
//     (max - min) / 255 (1 when max == min, as onnxruntime), zero point =
//     round_half_even(clamp(0 - min / scale, 0, 255)), then x / scale as
//     QuantizeLinear's float32 path (quant_math.h requantize).
#include <string>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/quant/quant_math.h"
#include "ops/quant/qconv.h"
#include "ops/quant/quant_util.h"

namespace twinfer_gpu {

constexpr int kMaxBatchDims = 8;

// Batched [.., M, K] x [.., K, N] with broadcast batch dims: for each of the
// output's batch dims its size and A's / B's stride in matrices (0: broadcast).
struct IntMatMulGeom {
  int64_t m = 1, n = 1, k = 1, batches = 1;
  int nb = 0;
  int64_t ysize[kMaxBatchDims] = {}, astride[kMaxBatchDims] = {}, bstride[kMaxBatchDims] = {};
  bool a_u8 = false, b_u8 = false;
  bool za_row = false, zb_col = false;  // zero points per row of A / column of B
};

__device__ __forceinline__ int32_t byte_at(const void* p, bool u8, int64_t i) {
  return u8 ? static_cast<int32_t>(static_cast<const uint8_t*>(p)[i])
            : static_cast<int32_t>(static_cast<const int8_t*>(p)[i]);
}

// The int32 sum of output element i (row r of the flattened [batches*M, N]).
__device__ __forceinline__ int32_t int_dot(const IntMatMulGeom& g, const void* a, const void* b, const void* za,
                                           const void* zb, int64_t i) {
  const int64_t j = i % g.n, t = i / g.n, r = t % g.m;
  int64_t batch = t / g.m, abase = 0, bbase = 0;
  for (int d = g.nb - 1; d >= 0; --d) {
    const int64_t c = batch % g.ysize[d];
    batch /= g.ysize[d];
    abase += c * g.astride[d];
    bbase += c * g.bstride[d];
  }
  abase = (abase * g.m + r) * g.k;
  bbase = bbase * g.k * g.n + j;
  const int32_t zav = za ? byte_at(za, g.a_u8, g.za_row ? r : 0) : 0;
  const int32_t zbv = zb ? byte_at(zb, g.b_u8, g.zb_col ? j : 0) : 0;
  uint32_t acc = 0;
  for (int64_t k = 0; k < g.k; ++k)
    acc += static_cast<uint32_t>((byte_at(a, g.a_u8, abase + k) - zav) * (byte_at(b, g.b_u8, bbase + k * g.n) - zbv));
  return static_cast<int32_t>(acc);
}

__global__ void matmul_integer(int64_t total, IntMatMulGeom g, const void* a, const void* b, const void* za,
                               const void* zb, int32_t* y) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) y[i] = int_dot(g, a, b, za, zb, i);
}

// A scale of float32 (0), float16 (1) or bfloat16 (2) as float, and a float
// rounded to that type.
__device__ __forceinline__ float qscale_at(const void* p, int code, int64_t i) {
  if (code == 1) return twinfer::half_to_float(static_cast<const uint16_t*>(p)[i]);
  if (code == 2) return twinfer::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ float qround(int code, float v) {
  if (code == 1) return twinfer::half_to_float(twinfer::float_to_half(v));
  if (code == 2) return twinfer::bf16_to_float(twinfer::float_to_bf16(v));
  return v;
}

struct QLinearMMParams {
  int scale_code = 0;
  bool a_scale_row = false, b_scale_col = false, y_col = false, y_u8 = false;
};

__global__ void qlinear_matmul(int64_t total, IntMatMulGeom g, QLinearMMParams p, const void* a, const void* sa,
                               const void* za, const void* b, const void* sb, const void* zb, const void* sy,
                               const void* zy, void* y) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int32_t c = int_dot(g, a, b, za, zb, i);
    const int64_t j = i % g.n, r = (i / g.n) % g.m;
    const float as = qscale_at(sa, p.scale_code, p.a_scale_row ? r : 0);
    const float bs = qscale_at(sb, p.scale_code, p.b_scale_col ? j : 0);
    const float ys = qscale_at(sy, p.scale_code, p.y_col ? j : 0);
    const float mult = qround(p.scale_code, __fdiv_rn(qround(p.scale_code, __fmul_rn(as, bs)), ys));
    const int32_t yz = byte_at(zy, p.y_u8, p.y_col ? j : 0);
    double v = __dadd_rn(__dmul_rn(static_cast<double>(c), static_cast<double>(mult)), static_cast<double>(yz));
    v = rint(v);
    const double lo = p.y_u8 ? 0.0 : -128.0, hi = p.y_u8 ? 255.0 : 127.0;
    v = v != v ? 0.0 : fmin(hi, fmax(lo, v));
    if (p.y_u8) static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(v);
    else static_cast<int8_t*>(y)[i] = static_cast<int8_t>(v);
  }
}

// ConvInteger's geometry, spatial dims padded to 3 (leading 1s).
struct IntConvGeom {
  int64_t N = 1, C = 1, M = 1, Cg = 1, Mg = 1, P = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          p[3] = {0, 0, 0};
  bool x_u8 = false, w_u8 = false, wz_row = false;
};

// The int32 sum of output element i of a ConvInteger / QLinearConv (wrapping
// modulo 2^32 as the CPU's does).
__device__ __forceinline__ int32_t int_conv_sum(const IntConvGeom& g, const void* x, const void* w, int32_t xzv,
                                                const void* wz, int64_t i) {
  const int64_t pos = i % g.P, t = i / g.P, m = t % g.M, img = t / g.M, grp = m / g.Mg;
  const int64_t o2 = pos % g.out[2], o1 = (pos / g.out[2]) % g.out[1], o0 = pos / (g.out[2] * g.out[1]);
  const int32_t wzv = wz ? byte_at(wz, g.w_u8, g.wz_row ? m : 0) : 0;
  const int64_t taps = g.k[0] * g.k[1] * g.k[2];
  uint32_t acc = 0;
  for (int64_t c = 0; c < g.Cg; ++c) {
    const int64_t xbase = (img * g.C + grp * g.Cg + c) * g.in[0] * g.in[1] * g.in[2];
    const int64_t wbase = (m * g.Cg + c) * taps;
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
      const int64_t i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
      if (i0 < 0 || i0 >= g.in[0]) continue;
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
        const int64_t i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
        if (i1 < 0 || i1 >= g.in[1]) continue;
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          const int64_t i2 = o2 * g.s[2] - g.p[2] + k2 * g.d[2];
          if (i2 < 0 || i2 >= g.in[2]) continue;  // the padding holds x's zero point: adds 0
          const int32_t xv = byte_at(x, g.x_u8, xbase + (i0 * g.in[1] + i1) * g.in[2] + i2) - xzv;
          const int32_t wv = byte_at(w, g.w_u8, wbase + (k0 * g.k[1] + k1) * g.k[2] + k2) - wzv;
          acc += static_cast<uint32_t>(xv * wv);
        }
      }
    }
  }
  return static_cast<int32_t>(acc);
}

__global__ void conv_integer(int64_t total, IntConvGeom g, const void* x, const void* w, const void* xz,
                             const void* wz, int32_t* y) {
  const int32_t xzv = xz ? byte_at(xz, g.x_u8, 0) : 0;
  for (int64_t i = first_index(); i < total; i += grid_stride()) y[i] = int_conv_sum(g, x, w, xzv, wz, i);
}

struct QLinearConvParams {
  bool w_scale_row = false, y_u8 = false;
};

// QLinearConv: the sum plus the int32 bias (wrapping), requantized as the
// CPU kernel does: mult = float(x_scale * w_scale[m] / y_scale), then
// saturate(round_half_even(double(sum) * mult + y_zero_point)).
__global__ void qlinear_conv(int64_t total, IntConvGeom g, QLinearConvParams p, const void* x, const float* xs,
                             const void* xz, const void* w, const float* ws, const void* wz, const float* ys,
                             const void* yz, const int32_t* bias, void* y) {
  const int32_t xzv = byte_at(xz, g.x_u8, 0);
  const double yzv = static_cast<double>(byte_at(yz, p.y_u8, 0));
  const double lo = p.y_u8 ? 0.0 : -128.0, hi = p.y_u8 ? 255.0 : 127.0;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t m = (i / g.P) % g.M;
    uint32_t c = static_cast<uint32_t>(int_conv_sum(g, x, w, xzv, wz, i));
    if (bias) c += static_cast<uint32_t>(bias[m]);
    const float mult = __fdiv_rn(__fmul_rn(xs[0], ws[p.w_scale_row ? m : 0]), ys[0]);
    double v = __dadd_rn(__dmul_rn(static_cast<double>(static_cast<int32_t>(c)), static_cast<double>(mult)), yzv);
    v = v != v ? 0.0 : fmin(hi, fmax(lo, v));
    v = rint(v);
    if (p.y_u8) static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(v);
    else static_cast<int8_t*>(y)[i] = static_cast<int8_t>(v);
  }
}

constexpr int kRangeThreads = 256;

// One block: min and max of x with 0 (a NaN never wins a comparison), then
// thread 0 writes scale and zero point to params (and the optional outputs).
__global__ void dynamic_range(int64_t n, const float* __restrict__ x, float* params, float* y_scale,
                              uint8_t* y_zero) {
  __shared__ float lo_s[kRangeThreads], hi_s[kRangeThreads];
  float lo = 0.f, hi = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  lo_s[threadIdx.x] = lo;
  hi_s[threadIdx.x] = hi;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) {
      const float l = lo_s[threadIdx.x + w], h = hi_s[threadIdx.x + w];
      lo_s[threadIdx.x] = l < lo_s[threadIdx.x] ? l : lo_s[threadIdx.x];
      hi_s[threadIdx.x] = h > hi_s[threadIdx.x] ? h : hi_s[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float mn = lo_s[0], mx = hi_s[0];
    const float scale = mx == mn ? 1.f : __fdiv_rn(__fsub_rn(mx, mn), 255.f);
    float z = __fsub_rn(0.f, __fdiv_rn(mn, scale));
    z = 0.f < z ? z : 0.f;  // std::max(0.f, z): NaN gives 0
    z = z < 255.f ? z : 255.f;
    const float zp = rintf(z);
    params[0] = scale;
    params[1] = zp;
    if (y_scale) *y_scale = scale;
    if (y_zero) *y_zero = static_cast<uint8_t>(zp);
  }
}

__global__ void dynamic_quantize(int64_t n, const float* __restrict__ x, const float* params, uint8_t* y) {
  const float scale = params[0];
  const int32_t zp = static_cast<int32_t>(params[1]);
  const float lo = static_cast<float>(0 - zp), hi = static_cast<float>(255 - zp);
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = static_cast<uint8_t>(twinfer::quant::requantize(x[i], scale, lo, hi, zp));
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

bool q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

const void* optional_input(const KernelContext& ctx, size_t i) {
  return ctx.inputs.size() > i && ctx.inputs[i].data ? ctx.inputs[i].data : nullptr;
}

// One element (false) or `len` of them as [len] or [.., len] (true); else fails.
bool per_slice(const KernelBuildInfo& info, size_t input, int64_t len, const char* what, const char* slice) {
  const Shape s = info.input_shape(input);
  const int64_t n = shape_numel(s);
  if (n == 1) return false;
  if (n == len && (s.size() == 1 || s.back() == len)) return true;
  info.fail(ErrorKind::kShape, std::string(what) + " has shape " + shape_str(s) + "; it must have one element or " +
                                   std::to_string(len) + " (one per " + slice + ")");
}

// The batched geometry of inputs ia x ib; false (with *why) past kMaxBatchDims.
bool matmul_geom(const Shape& a0, const Shape& b0, twinfer_gpu::IntMatMulGeom* g, std::string* why) {
  Shape a = a0, b = b0;
  if (a.empty() || b.empty()) {
    if (why) *why = "MatMul operands must have rank >= 1";
    return false;
  }
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const size_t rank = std::max(a.size(), b.size());
  while (a.size() < rank) a.insert(a.begin(), 1);
  while (b.size() < rank) b.insert(b.begin(), 1);
  if (rank - 2 > static_cast<size_t>(twinfer_gpu::kMaxBatchDims)) {
    if (why) *why = "more than 8 batch dims have no CUDA kernel";
    return false;
  }
  g->m = a[rank - 2];
  g->k = a[rank - 1];
  g->n = b[rank - 1];
  if (b[rank - 2] != g->k) {
    if (why) *why = "inner dimensions differ";
    return false;
  }
  g->nb = static_cast<int>(rank - 2);
  int64_t as = 1, bs = 1;
  g->batches = 1;
  for (int d = g->nb - 1; d >= 0; --d) {
    if (a[d] != b[d] && a[d] != 1 && b[d] != 1) {
      if (why) *why = "batch dimensions do not broadcast";
      return false;
    }
    g->ysize[d] = std::max(a[d], b[d]);
    g->astride[d] = a[d] == 1 ? 0 : as;
    g->bstride[d] = b[d] == 1 ? 0 : bs;
    as *= a[d];
    bs *= b[d];
    g->batches *= g->ysize[d];
  }
  return true;
}

bool matmul_supports(const KernelBuildInfo& info, size_t ia, size_t ib, std::string* why) {
  if (!q8(info.input_dtype(ia)) || !q8(info.input_dtype(ib))) {
    if (why) *why = "the CUDA kernel reads int8/uint8 operands only";
    return false;
  }
  twinfer_gpu::IntMatMulGeom g;
  return matmul_geom(info.input_shape(ia), info.input_shape(ib), &g, why);
}

twinfer_gpu::IntMatMulGeom build_geom(const KernelBuildInfo& info, size_t ia, size_t ib) {
  twinfer_gpu::IntMatMulGeom g;
  std::string why;
  if (!matmul_geom(info.input_shape(ia), info.input_shape(ib), &g, &why)) info.fail(ErrorKind::kShape, why);
  g.a_u8 = info.input_dtype(ia) == DType::kUInt8;
  g.b_u8 = info.input_dtype(ib) == DType::kUInt8;
  return g;
}

// ---- MatMulInteger ---------------------------------------------------------------

bool matmul_integer_supports(const KernelBuildInfo& info, std::string* why) { return matmul_supports(info, 0, 1, why); }

class MatMulIntegerKernel final : public Kernel {
 public:
  explicit MatMulIntegerKernel(const KernelBuildInfo& info) : g_(build_geom(info, 0, 1)) {
    if (info.has_input(2)) g_.za_row = per_slice(info, 2, g_.m, "a_zero_point", "row of A");
    if (info.has_input(3)) g_.zb_col = per_slice(info, 3, g_.n, "b_zero_point", "column of B");
  }
  const char* impl_name() const override { return "cuda direct int8 matmul"; }
  void run(KernelContext& ctx) const override {
    const int64_t total = g_.batches * g_.m * g_.n;
    const ew::LaunchConfig lc = ew::elementwise_launch(total);
    if (!lc.blocks) return;
    twinfer_gpu::matmul_integer<<<lc.blocks, lc.threads, 0, stream_of(ctx)>>>(
        total, g_, ctx.inputs[0].data, ctx.inputs[1].data, optional_input(ctx, 2), optional_input(ctx, 3),
        ctx.outputs[0].as<int32_t>());
    check_launch("MatMulInteger launch");
  }

 private:
  twinfer_gpu::IntMatMulGeom g_;
};

// ---- QLinearMatMul -------------------------------------------------------------------
// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.

int qscale_code(DType t) {
  switch (t) {
    case DType::kFloat32: return 0;
    case DType::kFloat16: return 1;
    case DType::kBFloat16: return 2;
    default: return -1;
  }
}

bool qlinear_matmul_supports(const KernelBuildInfo& info, std::string* why) {
  if (!matmul_supports(info, 0, 3, why)) return false;
  if (!q8(info.input_dtype(7))) {
    if (why) *why = "the CUDA QLinearMatMul makes int8/uint8 only";
    return false;
  }
  const DType st = info.input_dtype(1);
  if (qscale_code(st) < 0 || info.input_dtype(4) != st || info.input_dtype(6) != st) {
    if (why) *why = "the CUDA QLinearMatMul takes float32/float16/bfloat16 scales of one dtype";
    return false;
  }
  return true;
}

class QLinearMatMulKernel final : public Kernel {
 public:
  explicit QLinearMatMulKernel(const KernelBuildInfo& info) : g_(build_geom(info, 0, 3)) {
    p_.scale_code = qscale_code(info.input_dtype(1));
    p_.y_u8 = info.input_dtype(7) == DType::kUInt8;
    p_.a_scale_row = per_slice(info, 1, g_.m, "a_scale", "row of A");
    g_.za_row = per_slice(info, 2, g_.m, "a_zero_point", "row of A");
    if (g_.za_row != p_.a_scale_row)
      info.fail(ErrorKind::kShape, "a_scale and a_zero_point must have the same number of elements");
    p_.b_scale_col = per_slice(info, 4, g_.n, "b_scale", "column of B");
    g_.zb_col = per_slice(info, 5, g_.n, "b_zero_point", "column of B");
    if (g_.zb_col != p_.b_scale_col)
      info.fail(ErrorKind::kShape, "b_scale and b_zero_point must have the same number of elements");
    p_.y_col = per_slice(info, 6, g_.n, "y_scale", "column of B");
    if (per_slice(info, 7, g_.n, "y_zero_point", "column of B") != p_.y_col)
      info.fail(ErrorKind::kShape, "y_scale and y_zero_point must have the same number of elements");
  }
  const char* impl_name() const override { return "cuda direct int8 matmul"; }
  void run(KernelContext& ctx) const override {
    const int64_t total = g_.batches * g_.m * g_.n;
    const ew::LaunchConfig lc = ew::elementwise_launch(total);
    if (!lc.blocks) return;
    const auto& in = ctx.inputs;
    twinfer_gpu::qlinear_matmul<<<lc.blocks, lc.threads, 0, stream_of(ctx)>>>(
        total, g_, p_, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, in[5].data, in[6].data,
        in[7].data, ctx.outputs[0].data);
    check_launch("QLinearMatMul launch");
  }

 private:
  twinfer_gpu::IntMatMulGeom g_;
  twinfer_gpu::QLinearMMParams p_;
};

// ---- ConvInteger --------------------------------------------------------------------

// The CPU kernels' geometry (ops/quant/qconv.h), in the kernel's struct.
twinfer_gpu::IntConvGeom int_conv_geom(const KernelBuildInfo& info, const quant::ConvIO& io) {
  const quant::ConvGeom c = quant::conv_geom(info, io);
  twinfer_gpu::IntConvGeom g;
  g.N = c.N;
  g.C = c.C;
  g.M = c.M;
  g.Cg = c.Cg;
  g.Mg = c.Mg;
  g.P = c.P;
  for (int i = 0; i < 3; ++i) {
    g.in[i] = c.in[i];
    g.out[i] = c.out[i];
    g.k[i] = c.k[i];
    g.s[i] = c.s[i];
    g.d[i] = c.d[i];
    g.p[i] = c.p[i];
  }
  g.x_u8 = info.input_dtype(io.x) == DType::kUInt8;
  g.w_u8 = info.input_dtype(io.w) == DType::kUInt8;
  return g;
}

bool conv_supports(const KernelBuildInfo& info, const quant::ConvIO& io, const char* op, std::string* why) {
  if (!q8(info.input_dtype(io.x)) || !q8(info.input_dtype(io.w))) {
    if (why) *why = std::string("the CUDA ") + op + " reads int8/uint8 only";
    return false;
  }
  const size_t r = info.input_shape(io.x).size();
  if (r < 3 || r > 5) {
    if (why) *why = std::string("the CUDA ") + op + " takes 1-3 spatial dims";
    return false;
  }
  return true;
}

bool conv_integer_supports(const KernelBuildInfo& info, std::string* why) {
  return conv_supports(info, quant::kConvInteger, "ConvInteger", why);
}

class ConvIntegerKernel final : public Kernel {
 public:
  explicit ConvIntegerKernel(const KernelBuildInfo& info) : g_(int_conv_geom(info, quant::kConvInteger)) {
    if (info.has_input(2) && shape_numel(info.input_shape(2)) != 1)
      info.fail(ErrorKind::kShape, "x_zero_point must have one element, got shape " + shape_str(info.input_shape(2)));
    if (info.has_input(3)) {
      const Shape s = info.input_shape(3);
      const int64_t n = shape_numel(s);
      if (n != 1 && !(n == g_.M && s.size() == 1))
        info.fail(ErrorKind::kShape, "w_zero_point has shape " + shape_str(s) + "; it must have one element or [" +
                                         std::to_string(g_.M) + "] (one per output channel)");
      g_.wz_row = n != 1;
    }
  }
  const char* impl_name() const override { return "cuda direct int8 convolution"; }
  void run(KernelContext& ctx) const override {
    const int64_t total = g_.N * g_.M * g_.P;
    const ew::LaunchConfig lc = ew::elementwise_launch(total);
    if (!lc.blocks) return;
    twinfer_gpu::conv_integer<<<lc.blocks, lc.threads, 0, stream_of(ctx)>>>(
        total, g_, ctx.inputs[0].data, ctx.inputs[1].data, optional_input(ctx, 2), optional_input(ctx, 3),
        ctx.outputs[0].as<int32_t>());
    check_launch("ConvInteger launch");
  }

 private:
  twinfer_gpu::IntConvGeom g_;
};

// ---- QLinearConv ----------------------------------------------------------------------
// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, [B].
// The form the QOperator format's int8 weights take runs as com.twinfer::QConv
// instead (graph/passes/fuse_qlinear.h); this one serves the rest (uint8
// weights, weight zero points other than 0) and plans built unoptimized.

bool qlinear_conv_supports(const KernelBuildInfo& info, std::string* why) {
  if (!conv_supports(info, quant::kQLinearConv, "QLinearConv", why)) return false;
  if (!q8(info.input_dtype(7))) {
    if (why) *why = "the CUDA QLinearConv makes int8/uint8 only";
    return false;
  }
  for (size_t i : {1, 4, 6})
    if (info.input_dtype(i) != DType::kFloat32) {
      if (why) *why = "the CUDA QLinearConv takes float32 scales";
      return false;
    }
  return true;
}

class QLinearConvKernel final : public Kernel {
 public:
  explicit QLinearConvKernel(const KernelBuildInfo& info) : g_(int_conv_geom(info, quant::kQLinearConv)) {
    for (size_t i : {1, 2, 6, 7})
      if (shape_numel(info.input_shape(i)) != 1)
        info.fail(ErrorKind::kShape, std::string(i == 1 ? "x_scale" : i == 2 ? "x_zero_point" : i == 6 ? "y_scale"
                                                                                                      : "y_zero_point") +
                                         " must have one element, got shape " + shape_str(info.input_shape(i)));
    p_.w_scale_row = per_channel(info, 4, "w_scale");
    g_.wz_row = per_channel(info, 5, "w_zero_point");
    p_.y_u8 = info.input_dtype(7) == DType::kUInt8;
    if (info.has_input(8) && info.input_shape(8) != Shape{g_.M})
      info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(g_.M) + "], got " +
                                       shape_str(info.input_shape(8)));
  }
  const char* impl_name() const override { return "cuda direct int8 convolution"; }
  void run(KernelContext& ctx) const override {
    const int64_t total = g_.N * g_.M * g_.P;
    const ew::LaunchConfig lc = ew::elementwise_launch(total);
    if (!lc.blocks) return;
    const auto& in = ctx.inputs;
    const int32_t* bias = in.size() > 8 && in[8].data ? in[8].as<const int32_t>() : nullptr;
    twinfer_gpu::qlinear_conv<<<lc.blocks, lc.threads, 0, stream_of(ctx)>>>(
        total, g_, p_, in[0].data, in[1].as<const float>(), in[2].data, in[3].data, in[4].as<const float>(),
        in[5].data, in[6].as<const float>(), in[7].data, bias, ctx.outputs[0].data);
    check_launch("QLinearConv launch");
  }

 private:
  // Input i has one element (false) or one per output channel, shape [M] (true).
  bool per_channel(const KernelBuildInfo& info, size_t i, const char* what) const {
    const Shape s = info.input_shape(i);
    const int64_t n = shape_numel(s);
    if (n == 1) return false;
    if (n == g_.M && s.size() == 1) return true;
    info.fail(ErrorKind::kShape, std::string(what) + " has shape " + shape_str(s) + "; it must have one element or [" +
                                     std::to_string(g_.M) + "] (one per output channel)");
  }

  twinfer_gpu::IntConvGeom g_;
  twinfer_gpu::QLinearConvParams p_;
};

// ---- DynamicQuantizeLinear -----------------------------------------------------------

class DynamicQuantizeKernel final : public Kernel {
 public:
  explicit DynamicQuantizeKernel(const KernelBuildInfo&) {}
  const char* impl_name() const override { return "cuda dynamic quantize"; }
  size_t scratch_bytes() const override { return 2 * sizeof(float); }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const cudaStream_t s = stream_of(ctx);
    float* params = static_cast<float*>(ctx.scratch);
    float* y_scale = ctx.outputs.size() > 1 && ctx.outputs[1].data ? ctx.outputs[1].as<float>() : nullptr;
    uint8_t* y_zero = ctx.outputs.size() > 2 && ctx.outputs[2].data ? ctx.outputs[2].as<uint8_t>() : nullptr;
    const float* x = ctx.inputs[0].as<const float>();
    twinfer_gpu::dynamic_range<<<1, twinfer_gpu::kRangeThreads, 0, s>>>(n, x, params, y_scale, y_zero);
    check_launch("DynamicQuantizeLinear range launch");
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    twinfer_gpu::dynamic_quantize<<<lc.blocks, lc.threads, 0, s>>>(n, x, params, ctx.outputs[0].as<uint8_t>());
    check_launch("DynamicQuantizeLinear launch");
  }
};

bool dynamic_quantize_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32) {
    if (why) *why = "the CUDA DynamicQuantizeLinear reads float32 only";
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_KERNEL("MatMulInteger", Backend::kCUDA, 0, matmul_integer_supports, make_kernel<MatMulIntegerKernel>);
TWINFER_REGISTER_KERNEL("QLinearMatMul", Backend::kCUDA, 0, qlinear_matmul_supports, make_kernel<QLinearMatMulKernel>);
TWINFER_REGISTER_KERNEL("ConvInteger", Backend::kCUDA, 0, conv_integer_supports, make_kernel<ConvIntegerKernel>);
TWINFER_REGISTER_KERNEL("QLinearConv", Backend::kCUDA, 0, qlinear_conv_supports, make_kernel<QLinearConvKernel>);
TWINFER_REGISTER_KERNEL("DynamicQuantizeLinear", Backend::kCUDA, 0, dynamic_quantize_supports,
                        make_kernel<DynamicQuantizeKernel>);

}  // namespace twinfer::cuda
