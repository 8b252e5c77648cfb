// CUDA kernels of the sampling / window ops of csrc/ops/vision: GridSample,
// AffineGrid, RoiAlign, LpPool, Col2Im and DeformConv. A thread per output
// element each, with the CPU kernels' arithmetic from the shared
// __host__ __device__ headers (ops/vision/grid_sample_math.h,
// roi_align_math.h, lp_pool_math.h, deform_conv_math.h), in the CPU kernels'
// compute types: GridSample, AffineGrid, RoiAlign and DeformConv's samples in
// double; LpPool and DeformConv's sums in the element type (float for
// float16 / bfloat16); Col2Im sums in the element type (float for 16-bit
// floats) in the CPU's order, so float results are the CPU's bit for bit.
// float32 / float64 / float16 / bfloat16 (Col2Im also integers). RoiAlign's
// batch index out of range sets the kernel error flag (the CPU throws).
#include <string>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/nn/window.h"
#include "ops/tensor/tensor_util.h"
#include "ops/vision/col2im_geom.h"
#include "ops/vision/deform_conv_math.h"
#include "ops/vision/grid_sample_math.h"
#include "ops/vision/lp_pool_math.h"
#include "ops/vision/roi_align_math.h"

namespace twinfer_gpu {

using twinfer::ew::compute_t;
using twinfer::ew::load;
using twinfer::ew::store;
namespace tv = twinfer::vision;

// ---- GridSample -------------------------------------------------------------------

struct GsGeom {
  int nsp = 2;
  int64_t L[3] = {1, 1, 1};  // input spatial dims, right-aligned (unused leading dims 1)
  int64_t C = 1, P = 1, plane = 1;
  tv::GsMode mode = tv::GsMode::kLinear;
  tv::GsPad pad = tv::GsPad::kZeros;
  bool align = false;
};

template <typename T, typename G>
__global__ void grid_sample(int64_t n, GsGeom g, const T* __restrict__ x, const G* __restrict__ grid,
                            T* __restrict__ y) {
  using GC = compute_t<G>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t p = i % g.P, nc = i / g.P, b = nc / g.C;
    const G* gp = grid + (b * g.P + p) * g.nsp;
    tv::GsTaps td[3];
    for (int d = 0; d < 3; ++d) {
      if (d < 3 - g.nsp) {
        td[d].n = 1;
        td[d].idx[0] = 0;
        td[d].w[0] = 1;
        continue;
      }
      const int sd = d - (3 - g.nsp);
      const GC xd = tv::gs_unnormalize<GC>(static_cast<GC>(load(gp[g.nsp - 1 - sd])), g.L[d], g.align);
      td[d] = tv::gs_taps(static_cast<double>(xd), g.L[d], g.mode, g.pad, g.align);
    }
    const T* xc = x + nc * g.plane;
    double acc = 0;
    for (int a = 0; a < td[0].n; ++a)
      for (int bb = 0; bb < td[1].n; ++bb)
        for (int cc = 0; cc < td[2].n; ++cc) {
          const int64_t i0 = td[0].idx[a], i1 = td[1].idx[bb], i2 = td[2].idx[cc];
          if (i0 < 0 || i1 < 0 || i2 < 0) continue;
          const double w = td[0].w[a] * td[1].w[bb] * td[2].w[cc];
          acc += w * static_cast<double>(load(xc[(i0 * g.L[1] + i1) * g.L[2] + i2]));
        }
    y[i] = store<T>(tv::gs_result(td, acc));
  }
}

// ---- AffineGrid -------------------------------------------------------------------

template <typename T>
__global__ void affine_grid(int64_t n, int nsp, int64_t L0, int64_t L1, int64_t L2, bool align,
                            const T* __restrict__ theta, T* __restrict__ y) {
  const int64_t P = L0 * L1 * L2;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t b = i / P, p = i - b * P;
    const int64_t i2 = p % L2, i1 = (p / L2) % L1, i0 = p / (L1 * L2);
    double h[4];
    h[0] = tv::affine_base(i2, L2, align);
    h[1] = tv::affine_base(i1, L1, align);
    h[2] = nsp == 3 ? tv::affine_base(i0, L0, align) : 1.0;
    h[3] = 1.0;
    const T* t = theta + b * nsp * (nsp + 1);
    T* out = y + i * nsp;
    for (int r = 0; r < nsp; ++r) {
      double acc = 0;
      for (int k = 0; k <= nsp; ++k) acc += static_cast<double>(load(t[r * (nsp + 1) + k])) * h[k];
      out[r] = store<T>(acc);
    }
  }
}

// ---- RoiAlign ---------------------------------------------------------------------

struct RoiParams {
  int64_t N = 1, C = 1, H = 1, W = 1, OH = 1, OW = 1, ratio = 0;
  float scale = 1.f;
  bool max = false, half_pixel = true;
};

// std::max's rule (the first unless the second is larger), as the CPU's.
__device__ __forceinline__ double dmax(double a, double b) { return a < b ? b : a; }

template <typename T, typename I>
__global__ void roi_align(int64_t n, RoiParams q, const T* __restrict__ x, const T* __restrict__ rois,
                          const I* __restrict__ bidx, T* __restrict__ y, int* error) {
  using CT = compute_t<T>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t pw = i % q.OW, ph = (i / q.OW) % q.OH, c = (i / (q.OW * q.OH)) % q.C, r = i / (q.OW * q.OH * q.C);
    const int64_t b = static_cast<int64_t>(bidx[r]);
    if (b < 0 || b >= q.N) {
      *error = twinfer::cuda::kIndexOutOfRange;
      y[i] = store<T>(0.0);
      continue;
    }
    if (q.H == 0 || q.W == 0) {  // an empty map: nothing to sample (and nothing to read)
      y[i] = store<T>(0.0);
      continue;
    }
    const T* roi = rois + r * 4;
    const CT s = static_cast<CT>(q.scale);
    const tv::RoiGeom<CT> geo = tv::roi_geom<CT>(static_cast<CT>(load(roi[0]) * s), static_cast<CT>(load(roi[1]) * s),
                                                 static_cast<CT>(load(roi[2]) * s), static_cast<CT>(load(roi[3]) * s),
                                                 q.half_pixel, q.OH, q.OW, q.ratio);
    const T* xc = x + (b * q.C + c) * q.H * q.W;
    double v = 0;
    bool first = true;
    for (int64_t iy = 0; iy < geo.gh; ++iy) {
      const CT yy = tv::roi_sample_y(geo, ph, iy);
      for (int64_t ix = 0; ix < geo.gw; ++ix) {
        const tv::RoiSample<CT> sm = tv::roi_sample(yy, tv::roi_sample_x(geo, pw, ix), q.H, q.W);
        const double a0 = sm.w[0] * static_cast<double>(load(xc[sm.pos[0]]));
        const double a1 = sm.w[1] * static_cast<double>(load(xc[sm.pos[1]]));
        const double a2 = sm.w[2] * static_cast<double>(load(xc[sm.pos[2]]));
        const double a3 = sm.w[3] * static_cast<double>(load(xc[sm.pos[3]]));
        if (!q.max) {
          v += a0 + a1 + a2 + a3;
        } else {
          const double m = dmax(dmax(a0, a1), dmax(a2, a3));
          v = first ? m : dmax(v, m);
          first = false;
        }
      }
    }
    y[i] = store<T>(q.max ? v : v / static_cast<double>(geo.count));
  }
}

// ---- LpPool -----------------------------------------------------------------------

struct LpGeom {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          pb[3] = {0, 0, 0};
  double p = 2;
};

template <typename T>
__global__ void lp_pool(int64_t n, LpGeom g, const T* __restrict__ x, T* __restrict__ y) {
  using CT = compute_t<T>;
  const CT p = static_cast<CT>(g.p), inv_p = static_cast<CT>(1.0 / g.p);
  const bool p1 = g.p == 1.0, p2 = g.p == 2.0;
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t ow = i % g.out[2], oh = (i / g.out[2]) % g.out[1], od = (i / (g.out[2] * g.out[1])) % g.out[0];
    const int64_t pl = i / (g.out[2] * g.out[1] * g.out[0]);
    int64_t f[3], t[3];
    tv::lp_window(od, g.in[0], g.k[0], g.s[0], g.d[0], g.pb[0], &f[0], &t[0]);
    tv::lp_window(oh, g.in[1], g.k[1], g.s[1], g.d[1], g.pb[1], &f[1], &t[1]);
    tv::lp_window(ow, g.in[2], g.k[2], g.s[2], g.d[2], g.pb[2], &f[2], &t[2]);
    const T* xp = x + pl * in_plane;
    CT sum = 0;
    for (int64_t kd = 0, id = f[0]; kd < t[0]; ++kd, id += g.d[0])
      for (int64_t kh = 0, ih = f[1]; kh < t[1]; ++kh, ih += g.d[1]) {
        const T* row = xp + (id * g.in[1] + ih) * g.in[2];
        for (int64_t kw = 0, iw = f[2]; kw < t[2]; ++kw, iw += g.d[2])
          sum += tv::lp_term<CT>(static_cast<CT>(load(row[iw])), p, p1, p2);
      }
    y[i] = store<T>(tv::lp_finish<CT>(sum, inv_p, p1, p2));
  }
}

// ---- Col2Im -----------------------------------------------------------------------

constexpr int kCol2ImDims = 6;

struct Col2ImGeom {
  int nsp = 2;
  int64_t image[kCol2ImDims] = {}, block[kCol2ImDims] = {}, dil[kCol2ImDims] = {}, pad[kCol2ImDims] = {},
          stride[kCol2ImDims] = {}, blocks[kCol2ImDims] = {};
  int64_t img = 1, K = 1, L = 1;
};

// y[n, c, pos] = sum over block offsets k (in the CPU's order) of
// x[n, c*K + k, l] for the block l that puts offset k at pos.
template <typename T>
__global__ void col2im(int64_t n, Col2ImGeom g, const T* __restrict__ x, T* __restrict__ y) {
  using CT = compute_t<T>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t pos[kCol2ImDims];
    int64_t rem = i;
    for (int d = g.nsp - 1; d >= 0; --d) {
      pos[d] = rem % g.image[d];
      rem /= g.image[d];
    }
    const T* xp = x + rem * g.K * g.L;  // rem: n * C + c
    CT acc = 0;
    for (int64_t k = 0; k < g.K; ++k) {
      int64_t kr = k, l = 0, mul = 1;
      bool inside = true;
      for (int d = g.nsp - 1; d >= 0; --d) {
        const int64_t kk = kr % g.block[d];
        kr /= g.block[d];
        const int64_t t = pos[d] + g.pad[d] - kk * g.dil[d];
        if (t < 0 || t % g.stride[d] != 0 || t / g.stride[d] >= g.blocks[d]) {
          inside = false;
          break;
        }
        l += (t / g.stride[d]) * mul;
        mul *= g.blocks[d];
      }
      if (inside) acc += static_cast<CT>(load(xp[k * g.L + l]));
    }
    y[i] = store<T>(acc);
  }
}

// ---- DeformConv -------------------------------------------------------------------

struct DeformGeom {
  int64_t C = 1, H = 1, W = 1, M = 1, kH = 1, kW = 1, OH = 1, OW = 1, G = 1, OG = 1;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

// y[n, m, oh, ow] = bias[m] + sum over (cc, i, j), in the CPU's order, of
// w[m, cc, i, j] * (the sample, rounded to T as the CPU's column matrix).
template <typename T>
__global__ void deform_conv(int64_t n, DeformGeom g, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ off, const T* __restrict__ bias, const T* __restrict__ mask,
                            T* __restrict__ y) {
  using CT = compute_t<T>;
  const int64_t K = g.kH * g.kW, P = g.OH * g.OW, Cg = g.C / g.G, Mg = g.M / g.G, Cog = g.C / g.OG;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t p = i % P, m = (i / P) % g.M, b = i / (P * g.M);
    const int64_t oh = p / g.OW, ow = p - oh * g.OW, grp = m / Mg;
    CT acc = bias ? static_cast<CT>(load(bias[m])) : CT(0);
    const T* wr = w + m * Cg * K;
    for (int64_t cc = 0; cc < Cg; ++cc) {
      const int64_t c = grp * Cg + cc, og = c / Cog;
      const T* xc = x + (b * g.C + c) * g.H * g.W;
      for (int64_t ki = 0; ki < g.kH; ++ki)
        for (int64_t kj = 0; kj < g.kW; ++kj) {
          const int64_t k = ki * g.kW + kj;
          const T* oy = off + ((b * g.OG + og) * 2 * K + 2 * k) * P;
          const double hy = static_cast<double>(oh * g.sh - g.ph + ki * g.dh) + static_cast<double>(load(oy[p]));
          const double wx = static_cast<double>(ow * g.sw - g.pw + kj * g.dw) + static_cast<double>(load(oy[P + p]));
          double v = tv::deform_sample(xc, g.H, g.W, hy, wx);
          if (mask) v *= static_cast<double>(load(mask[((b * g.OG + og) * K + k) * P + p]));
          const CT col = static_cast<CT>(load(store<T>(v)));
          acc += static_cast<CT>(load(wr[cc * K + k])) * col;
        }
    }
    y[i] = store<T>(acc);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

namespace tv = twinfer::vision;
constexpr unsigned kVisionFloat = ew::kF32 | ew::kF64 | ew::kF16 | ew::kBF16;

bool refuse(std::string* why, const std::string& w) {
  if (why) *why = w;
  return false;
}

bool float_input(const KernelBuildInfo& info, size_t i, std::string* why) {
  const DType dt = info.input_dtype(i);
  if (ew::in_typeset(kVisionFloat, dt)) return true;
  return refuse(why, "a CUDA " + info.node().op_type + " of " + dtype_name(dt) +
                         " has no kernel (float32/float64/float16/bfloat16)");
}

// Rank of input i when known, else -1.
int input_rank(const KernelBuildInfo& info, size_t i) {
  const graph::Value& v = info.input(i);
  return v.has_shape ? static_cast<int>(v.shape.size()) : -1;
}

// ---- GridSample -------------------------------------------------------------------

template <typename Info>
void gs_attrs(const Info& c, tv::GsMode* mode, tv::GsPad* pad, bool* align) {
  const graph::Node& n = c.node();
  const std::string m = n.attr_string("mode", c.opset() >= 20 ? "linear" : "bilinear");
  if (m == "nearest") *mode = tv::GsMode::kNearest;
  else if (m == "linear" || m == "bilinear") *mode = tv::GsMode::kLinear;
  else if (m == "cubic" || m == "bicubic") *mode = tv::GsMode::kCubic;
  else c.fail(ErrorKind::kUnsupportedOp, "mode '" + m + "' is not supported");
  const std::string p = n.attr_string("padding_mode", "zeros");
  if (p == "zeros") *pad = tv::GsPad::kZeros;
  else if (p == "border") *pad = tv::GsPad::kBorder;
  else if (p == "reflection") *pad = tv::GsPad::kReflection;
  else c.fail(ErrorKind::kUnsupportedOp, "padding_mode '" + p + "' is not supported");
  *align = n.attr_int("align_corners", 0) != 0;
}

bool grid_sample_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_input(info, 0, why) || !float_input(info, 1, why)) return false;
  const std::string m = info.node().attr_string("mode", info.opset() >= 20 ? "linear" : "bilinear");
  if (m != "nearest" && m != "linear" && m != "bilinear" && m != "cubic" && m != "bicubic")
    return refuse(why, "GridSample mode '" + m + "' has no CUDA kernel");
  const std::string p = info.node().attr_string("padding_mode", "zeros");
  if (p != "zeros" && p != "border" && p != "reflection")
    return refuse(why, "GridSample padding_mode '" + p + "' has no CUDA kernel");
  const int r = input_rank(info, 0);
  if (r >= 0 && (r < 3 || r > 5)) return refuse(why, "a CUDA GridSample takes 1-3 spatial dims");
  return true;
}

class CudaGridSample final : public Kernel {
 public:
  explicit CudaGridSample(const KernelBuildInfo& info) : xt_(info.input_dtype(0)), gt_(info.input_dtype(1)) {
    gs_attrs(info, &g_.mode, &g_.pad, &g_.align);
    const Shape x = info.input_shape(0), gr = info.input_shape(1);
    const size_t nsp = x.size() - 2;
    if (x.size() < 3 || x.size() > 5 || gr.size() != x.size() || gr.back() != static_cast<int64_t>(nsp) ||
        gr[0] != x[0])
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + " and grid " + shape_str(gr) +
                                       " do not fit (1-3 spatial dims)");
    g_.nsp = static_cast<int>(nsp);
    for (size_t i = 0; i < nsp; ++i) g_.L[3 - nsp + i] = x[2 + i];
    g_.C = x[1];
    g_.P = shape_numel(Shape(gr.begin() + 1, gr.end() - 1));
    g_.plane = g_.L[0] * g_.L[1] * g_.L[2];
    n_ = x[0] * x[1] * g_.P;
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kVisionFloat>(xt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto go = [&](auto gtag) {
        using G = typename decltype(gtag)::type;
        twinfer_gpu::grid_sample<<<lc.blocks, lc.threads, 0, s>>>(n_, g_, ctx.inputs[0].as<const T>(),
                                                                  ctx.inputs[1].as<const G>(), ctx.outputs[0].as<T>());
      };
      if (gt_ == xt_) go(TypeTag<T>{});
      else if (gt_ == DType::kFloat32) go(TypeTag<float>{});
      else if (gt_ == DType::kFloat64) go(TypeTag<double>{});
      else if (gt_ == DType::kFloat16) go(TypeTag<half_t>{});
      else go(TypeTag<bfloat16_t>{});
    });
    check_launch("GridSample launch");
  }
  const char* impl_name() const override { return "cuda grid_sample"; }

 private:
  DType xt_, gt_;
  twinfer_gpu::GsGeom g_;
  int64_t n_ = 0;
};

// ---- AffineGrid -------------------------------------------------------------------

bool affine_grid_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_input(info, 0, why)) return false;
  const graph::Value& y = info.output(0);
  if (y.has_shape && y.shape.size() != 4 && y.shape.size() != 5)
    return refuse(why, "a CUDA AffineGrid makes 2-D or 3-D grids");
  return true;
}

class CudaAffineGrid final : public Kernel {
 public:
  explicit CudaAffineGrid(const KernelBuildInfo& info)
      : dt_(info.input_dtype(0)), align_(info.node().attr_int("align_corners", 0) != 0) {
    const Shape y = info.output_shape(0);
    nsp_ = static_cast<int>(y.size()) - 2;
    const Shape th = info.input_shape(0);
    if (nsp_ < 2 || nsp_ > 3 || th != Shape{y[0], nsp_, nsp_ + 1})
      info.fail(ErrorKind::kShape, "theta " + shape_str(th) + " does not fit the output " + shape_str(y));
    for (int i = 0; i < nsp_; ++i) L_[3 - nsp_ + i] = y[1 + i];
    n_ = y[0] * L_[0] * L_[1] * L_[2];
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kVisionFloat>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::affine_grid<<<lc.blocks, lc.threads, 0, s>>>(n_, nsp_, L_[0], L_[1], L_[2], align_,
                                                                ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("AffineGrid launch");
  }
  const char* impl_name() const override { return "cuda affine_grid"; }

 private:
  DType dt_;
  bool align_;
  int nsp_ = 2;
  int64_t L_[3] = {1, 1, 1};
  int64_t n_ = 0;
};

// ---- RoiAlign ---------------------------------------------------------------------

bool roi_align_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_input(info, 0, why)) return false;
  if (info.input_dtype(1) != info.input_dtype(0)) return refuse(why, "RoiAlign's rois differ in dtype from X");
  const DType bt = info.input_dtype(2);
  if (bt != DType::kInt64 && bt != DType::kInt32) return refuse(why, "RoiAlign's batch_indices must be int32/int64");
  const std::string mode = info.node().attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") return refuse(why, "RoiAlign mode '" + mode + "' has no CUDA kernel");
  const std::string ct = info.node().attr_string("coordinate_transformation_mode",
                                                 info.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ct != "half_pixel" && ct != "output_half_pixel")
    return refuse(why, "RoiAlign coordinate_transformation_mode '" + ct + "' has no CUDA kernel");
  return true;
}

class CudaRoiAlign final : public Kernel {
 public:
  explicit CudaRoiAlign(const KernelBuildInfo& info) : dt_(info.input_dtype(0)), bt_(info.input_dtype(2)) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(0), rois = info.input_shape(1), bi = info.input_shape(2);
    if (x.size() != 4 || rois.size() != 2 || rois[1] != 4 || bi != Shape{rois[0]})
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + ", rois " + shape_str(rois) + " and batch_indices " +
                                       shape_str(bi) + " do not fit");
    q_.N = x[0];
    q_.C = x[1];
    q_.H = x[2];
    q_.W = x[3];
    q_.max = n.attr_string("mode", "avg") == "max";
    q_.OH = n.attr_int("output_height", 1);
    q_.OW = n.attr_int("output_width", 1);
    q_.ratio = n.attr_int("sampling_ratio", 0);
    q_.scale = n.attr_float("spatial_scale", 1.f);
    q_.half_pixel =
        n.attr_string("coordinate_transformation_mode", info.opset() >= 16 ? "half_pixel" : "output_half_pixel") ==
        "half_pixel";
    n_ = rois[0] * q_.C * q_.OH * q_.OW;
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    ew::dispatch_typeset<kVisionFloat>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto go = [&](auto itag) {
        using I = decltype(itag);
        twinfer_gpu::roi_align<<<lc.blocks, lc.threads, 0, s>>>(n_, q_, ctx.inputs[0].as<const T>(),
                                                                ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const I>(),
                                                                ctx.outputs[0].as<T>(), error);
      };
      if (bt_ == DType::kInt32) go(int32_t{});
      else go(int64_t{});
    });
    check_launch("RoiAlign launch");
  }
  const char* impl_name() const override { return "cuda roi_align"; }

 private:
  DType dt_, bt_;
  twinfer_gpu::RoiParams q_;
  int64_t n_ = 0;
};

// ---- LpPool -----------------------------------------------------------------------

template <typename Info>
double lp_p(const Info& c) {
  const graph::Node& n = c.node();
  const double p = c.opset() < 2 ? n.attr_float("p", 2.f) : static_cast<double>(n.attr_int("p", 2));
  if (!(p > 0)) c.fail(ErrorKind::kModelFormat, "LpPool needs p > 0");
  return p;
}

bool lp_pool_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_input(info, 0, why)) return false;
  const int r = input_rank(info, 0);
  if (r >= 0 && (r < 3 || r > 5)) return refuse(why, "a CUDA LpPool takes 1-3 spatial dims");
  return true;
}

class CudaLpPool final : public Kernel {
 public:
  explicit CudaLpPool(const KernelBuildInfo& info) : dt_(info.input_dtype(0)) {
    g_.p = lp_p(info);
    const Shape x = info.input_shape(0);
    if (x.size() < 3 || x.size() > 5) info.fail(ErrorKind::kUnsupportedOp, "LpPool supports 1-3 spatial dims");
    nn::Window w = nn::parse_window(info.node(), x.size() - 2, nullptr, nn::WindowOptions{true, true});
    nn::resolve_pads(w, Shape(x.begin() + 2, x.end()));
    const Shape y = info.output_shape(0);
    const size_t off = 3 - w.nsp;
    for (size_t j = 0; j < w.nsp; ++j) {
      const size_t i = off + j;
      const int64_t out = nn::window_output_size(w, j, x[2 + j], info.node());
      if (out != y[2 + j]) info.fail(ErrorKind::kShape, "output " + shape_str(y) + " does not fit the window");
      g_.in[i] = x[2 + j];
      g_.out[i] = out;
      g_.k[i] = w.kernel[j];
      g_.s[i] = w.stride[j];
      g_.d[i] = w.dilation[j];
      g_.pb[i] = w.pad_begin[j];
    }
    n_ = shape_numel(y);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kVisionFloat>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::lp_pool<<<lc.blocks, lc.threads, 0, s>>>(n_, g_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("LpPool launch");
  }
  const char* impl_name() const override { return "cuda lp_pool"; }

 private:
  DType dt_;
  twinfer_gpu::LpGeom g_;
  int64_t n_ = 0;
};

// ---- Col2Im -----------------------------------------------------------------------

constexpr unsigned kCol2ImTypes = kVisionFloat | ew::kIntTypes;

bool col2im_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(kCol2ImTypes, dt))
    return refuse(why, std::string("a CUDA Col2Im of ") + dtype_name(dt) + " has no kernel");
  std::vector<int64_t> image, block;
  if (!tensor::const_ints(info, 1, &image) || !tensor::const_ints(info, 2, &block))
    return refuse(why, "a CUDA Col2Im needs constant image_shape and block_shape");
  if (image.empty() || image.size() > static_cast<size_t>(twinfer_gpu::kCol2ImDims))
    return refuse(why, "a CUDA Col2Im takes 1-6 spatial dims");
  return true;
}

class CudaCol2Im final : public Kernel {
 public:
  explicit CudaCol2Im(const KernelBuildInfo& info) : dt_(info.input_dtype(0)) {
    std::vector<int64_t> image, block;
    if (!tensor::const_ints(info, 1, &image) || !tensor::const_ints(info, 2, &block))
      info.fail(ErrorKind::kUnsupportedOp, "image_shape and block_shape must be known when the kernel is built");
    if (image.size() > static_cast<size_t>(twinfer_gpu::kCol2ImDims))
      info.fail(ErrorKind::kShape, "a CUDA Col2Im takes 1-6 spatial dims");
    const vision::Col2ImGeom c = vision::col2im_geom(info, image, block);  // the CPU's, checked there
    const size_t nsp = image.size();
    g_.nsp = static_cast<int>(nsp);
    for (size_t i = 0; i < nsp; ++i) {
      g_.image[i] = image[i];
      g_.block[i] = block[i];
      g_.dil[i] = c.dil[i];
      g_.pad[i] = c.pads[i];
      g_.stride[i] = c.stride[i];
      g_.blocks[i] = c.blocks[i];
      g_.img *= image[i];
    }
    g_.L = c.L;
    g_.K = c.K;
    const Shape x = info.input_shape(0), y = info.output_shape(0);
    if (x.size() != 3 || x[1] % g_.K != 0 || x[2] != g_.L || y.size() != 2 + nsp || y[1] != x[1] / g_.K)
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + " does not fit the output " + shape_str(y));
    n_ = shape_numel(y);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kCol2ImTypes>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::col2im<<<lc.blocks, lc.threads, 0, s>>>(n_, g_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("Col2Im launch");
  }
  const char* impl_name() const override { return "cuda col2im"; }

 private:
  DType dt_;
  twinfer_gpu::Col2ImGeom g_;
  int64_t n_ = 0;
};

// ---- DeformConv -------------------------------------------------------------------

bool deform_conv_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_input(info, 0, why)) return false;
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != info.input_dtype(0))
      return refuse(why, "DeformConv's inputs differ in dtype");
  const int r = input_rank(info, 0);
  if (r >= 0 && r != 4) return refuse(why, "a CUDA DeformConv takes 2-D inputs");
  return true;
}

class CudaDeformConv final : public Kernel {
 public:
  explicit CudaDeformConv(const KernelBuildInfo& info) : dt_(info.input_dtype(0)) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(0), w = info.input_shape(1), y = info.output_shape(0);
    g_.G = n.attr_int("group", 1);
    g_.OG = n.attr_int("offset_group", 1);
    if (x.size() != 4 || w.size() != 4 || g_.G < 1 || g_.OG < 1 || x[1] != w[1] * g_.G || w[0] % g_.G != 0 ||
        x[1] % g_.OG != 0)
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + ", weights " + shape_str(w) + ", group " +
                                       std::to_string(g_.G) + " and offset_group " + std::to_string(g_.OG) +
                                       " do not fit");
    std::vector<int64_t> wk{w[2], w[3]};
    nn::Window win = nn::parse_window(n, 2, &wk, nn::WindowOptions{true, false});
    nn::resolve_pads(win, Shape{x[2], x[3]});
    const int64_t K = w[2] * w[3];
    if (info.input_shape(2) != Shape{x[0], g_.OG * 2 * K, y[2], y[3]})
      info.fail(ErrorKind::kShape, "offset " + shape_str(info.input_shape(2)) + " does not fit");
    has_bias_ = info.has_input(3);
    if (has_bias_ && info.input_shape(3) != Shape{w[0]})
      info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(w[0]) + "]");
    has_mask_ = info.has_input(4);
    if (has_mask_ && info.input_shape(4) != Shape{x[0], g_.OG * K, y[2], y[3]})
      info.fail(ErrorKind::kShape, "mask " + shape_str(info.input_shape(4)) + " does not fit");
    g_.C = x[1];
    g_.H = x[2];
    g_.W = x[3];
    g_.M = w[0];
    g_.kH = w[2];
    g_.kW = w[3];
    g_.OH = y[2];
    g_.OW = y[3];
    g_.sh = win.stride[0];
    g_.sw = win.stride[1];
    g_.dh = win.dilation[0];
    g_.dw = win.dilation[1];
    g_.ph = win.pad_begin[0];
    g_.pw = win.pad_begin[1];
    n_ = shape_numel(y);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kVisionFloat>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::deform_conv<<<lc.blocks, lc.threads, 0, s>>>(
          n_, g_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const T>(),
          has_bias_ ? ctx.inputs[3].as<const T>() : nullptr, has_mask_ ? ctx.inputs[4].as<const T>() : nullptr,
          ctx.outputs[0].as<T>());
    });
    check_launch("DeformConv launch");
  }
  const char* impl_name() const override { return "cuda deform_conv"; }

 private:
  DType dt_;
  twinfer_gpu::DeformGeom g_;
  bool has_bias_ = false, has_mask_ = false;
  int64_t n_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("GridSample", Backend::kCUDA, 0, grid_sample_supports, make_kernel<CudaGridSample>);
TWINFER_REGISTER_KERNEL("AffineGrid", Backend::kCUDA, 0, affine_grid_supports, make_kernel<CudaAffineGrid>);
TWINFER_REGISTER_KERNEL("RoiAlign", Backend::kCUDA, 0, roi_align_supports, make_kernel<CudaRoiAlign>);
TWINFER_REGISTER_KERNEL("LpPool", Backend::kCUDA, 0, lp_pool_supports, make_kernel<CudaLpPool>);
TWINFER_REGISTER_KERNEL("Col2Im", Backend::kCUDA, 0, col2im_supports, make_kernel<CudaCol2Im>);
TWINFER_REGISTER_KERNEL("DeformConv", Backend::kCUDA, 0, deform_conv_supports, make_kernel<CudaDeformConv>);

}  // namespace twinfer::cuda
