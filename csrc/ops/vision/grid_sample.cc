// GridSample (opsets 16-22, 1-3 spatial dims) and AffineGrid (20): shape
// rules and CPU kernels, float32/float64 (float16/bfloat16 computed as float:
// the grid in float, the taps and sums in double, as float32; float32 blocks
// whose positions all have four taps sum in float, four_tap_rows).
//
// GridSample follows the ONNX reference: grid[n, o..., :] holds normalised
// coordinates in (x, y, z) order (the last spatial dim first), denormalised
// per dim with align_corners; coordinates past the border are clamped
// (border) or reflected (reflection) first; then nearest (round half to
// even), linear (2 taps per dim) or cubic (4 taps, Keys a = -0.75) sampling,
// every tap outside the input reading 0 (zeros), the edge (border) or its
// reflection (reflection). A NaN in the grid follows PyTorch (the reference
// has no answer; see gs_nan_coordinate). The taps of one output position are
// built once and reused for all channels.
//
// AffineGrid: out[n, p..., :] = theta[n] @ (x, y[, z], 1) over the base grid
// of `size` (-1..1 per dim, pixel centres unless align_corners).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"
#include "ops/tensor/tensor_util.h"
#include "ops/vision/grid_sample_math.h"

namespace twinfer::vision {
namespace {

// Block positions that each have 4 taps (2-D linear inside the input, the
// common case), float32: y[q] = sum_k w[k][q] x[o[k][q]], the taps laid out
// [4][block], in float (as onnxruntime; the general loop sums in double).
// Scalar: GCC's AVX-512 clone built each gather from sixteen single loads
// and was no faster (GridSample [1, 32, 64, 64] 0.37 ms either way).
constexpr int64_t kBlock = 128;  // output positions whose taps are built together

__attribute__((optimize("no-tree-vectorize"))) void four_tap_rows(const float* __restrict x, const int32_t* __restrict o,
                                       const float* __restrict w, float* __restrict y, int64_t m) {
  for (int64_t q = 0; q < m; ++q)
    y[q] = w[q] * x[o[q]] + w[kBlock + q] * x[o[kBlock + q]] + w[2 * kBlock + q] * x[o[2 * kBlock + q]] +
           w[3 * kBlock + q] * x[o[3 * kBlock + q]];
}

template <typename Ctx>
void gs_attrs(const Ctx& c, GsMode* mode, GsPad* pad, bool* align) {
  const graph::Node& n = c.node();
  const std::string m = n.attr_string("mode", c.opset() >= 20 ? "linear" : "bilinear");
  if (m == "nearest") *mode = GsMode::kNearest;
  else if (m == "linear" || m == "bilinear") *mode = GsMode::kLinear;
  else if (m == "cubic" || m == "bicubic") *mode = GsMode::kCubic;
  else c.fail(ErrorKind::kUnsupportedOp, "mode '" + m + "' is not supported");
  const std::string p = n.attr_string("padding_mode", "zeros");
  if (p == "zeros") *pad = GsPad::kZeros;
  else if (p == "border") *pad = GsPad::kBorder;
  else if (p == "reflection") *pad = GsPad::kReflection;
  else c.fail(ErrorKind::kUnsupportedOp, "padding_mode '" + p + "' is not supported");
  *align = n.attr_int("align_corners", 0) != 0;
}

void grid_sample_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  GsMode m;
  GsPad p;
  bool a;
  gs_attrs(c, &m, &p, &a);
  if (!(dtype_is_float(c.input_dtype(1)))) c.fail(ErrorKind::kDType, "grid must be a float tensor");
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  const SymShape& g = c.input_shape(1);
  if (!(x.size() >= 3 && g.size() == x.size()))
    c.fail(ErrorKind::kShape, "input " + sym_shape_str(x) + " and grid " + sym_shape_str(g) + " do not fit");
  if (g.back().known())
    if (!(g.back().value == static_cast<int64_t>(x.size() - 2)))
      c.fail(ErrorKind::kShape,
             "grid's last dim must be " + std::to_string(x.size() - 2) + ", got " + sym_shape_str(g));
  SymShape out{x[0].known() ? x[0] : g[0], x[1]};
  out.insert(out.end(), g.begin() + 1, g.end() - 1);
  c.set_output(0, dt, out);
}

class GridSampleKernel final : public Kernel {
 public:
  explicit GridSampleKernel(const KernelBuildInfo& info) {
    gs_attrs(info, &mode_, &pad_, &align_);
    x_ = info.input_shape(0);
    g_ = info.input_shape(1);
    nsp_ = x_.size() - 2;
    if (x_.size() < 3 || x_.size() > 5 || g_.size() != x_.size() || g_.back() != static_cast<int64_t>(nsp_) ||
        g_[0] != x_[0])
      info.fail(ErrorKind::kShape, "input " + shape_str(x_) + " and grid " + shape_str(g_) +
                                       " do not fit (1-3 spatial dims)");
    npos_ = shape_numel(Shape(g_.begin() + 1, g_.end() - 1));
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const DType gt = ctx.inputs[1].dtype;
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (gt == DType::kFloat32) compute<T, float>(ctx);
      else if (gt == DType::kFloat64) compute<T, double>(ctx);
      else if (gt == DType::kFloat16) compute<T, half_t>(ctx);
      else if (gt == DType::kBFloat16) compute<T, bfloat16_t>(ctx);
      else dispatch_unsupported(gt, "GridSample's grid");
    });
  }

 private:
  template <typename T, typename G>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<const T>();
    const G* grid = ctx.inputs[1].as<const G>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t N = x_[0], C = x_[1], P = npos_;
    const size_t nsp = nsp_;
    int64_t L[3] = {1, 1, 1};
    for (size_t i = 0; i < nsp; ++i) L[3 - nsp + i] = x_[2 + i];
    const int64_t plane = L[0] * L[1] * L[2];
    // Blocks of kBlock output positions of one image: the taps of each
    // position first (offsets and weights, up to 64), then each channel's
    // outputs for the block, contiguous in y (y is [N, C, positions]).
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    const int64_t nb = (P + kBlock - 1) / kBlock;
    parallel_for(N * nb, ctx.num_threads, std::max<int64_t>(1, 16 / std::max<int64_t>(1, C)),
                 [&](int64_t b, int64_t e) {
      std::vector<int64_t> off(static_cast<size_t>(kBlock * kMaxTaps));
      std::vector<double> wt(static_cast<size_t>(kBlock * kMaxTaps));
      int taps[kBlock];
      bool nan_at[kBlock];
      // float32 x addressed in int32: four_tap_rows's layout of a block.
      constexpr bool kFloat = std::is_same_v<T, float>;
      const bool four_tap_layout = kFloat && plane > 0 && plane <= INT32_MAX;
      const bool linear_2d = nsp == 2 && mode_ == GsMode::kLinear;
      std::vector<int32_t> o4(four_tap_layout ? 4 * kBlock : 0);
      std::vector<float> w4(four_tap_layout ? 4 * kBlock : 0);
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / nb, p0 = (t - n * nb) * kBlock, m = std::min(kBlock, P - p0);
        for (int64_t q = 0; q < m; ++q) {
          const G* gp = grid + (n * P + p0 + q) * static_cast<int64_t>(nsp);
          if (linear_2d) {
            // 2-D linear with both coordinates inside [0, L - 1): four taps
            // in the input whatever the padding mode, the same values as
            // gs_taps's (which costs as much as all channels' sums).
            using GC = ew::compute_t<G>;
            const double xx = static_cast<double>(gs_unnormalize<GC>(static_cast<GC>(ew::load(gp[0])), L[2], align_));
            const double yy = static_cast<double>(gs_unnormalize<GC>(static_cast<GC>(ew::load(gp[1])), L[1], align_));
            if (xx >= 0 && xx < static_cast<double>(L[2] - 1) && yy >= 0 && yy < static_cast<double>(L[1] - 1)) {
              const double fx = std::floor(xx), fy = std::floor(yy), rx = xx - fx, ry = yy - fy;
              const int64_t base = static_cast<int64_t>(fy) * L[2] + static_cast<int64_t>(fx);
              int64_t* oq = off.data() + q * kMaxTaps;
              double* wq = wt.data() + q * kMaxTaps;
              oq[0] = base, oq[1] = base + 1, oq[2] = base + L[2], oq[3] = base + L[2] + 1;
              wq[0] = (1 - ry) * (1 - rx), wq[1] = (1 - ry) * rx, wq[2] = ry * (1 - rx), wq[3] = ry * rx;
              taps[q] = 4;
              nan_at[q] = false;
              continue;
            }
            // Zeros padding, both taps of a dim outside the input: the sample
            // is 0 (NaN compares false and goes on to gs_taps).
            auto outside = [](double v, int64_t len) { return v < -1 || v >= static_cast<double>(len); };
            if (pad_ == GsPad::kZeros && (outside(xx, L[2]) || outside(yy, L[1]))) {
              taps[q] = 0;
              nan_at[q] = false;
              continue;
            }
          }
          GsTaps td[3];
          for (size_t i = 0; i < 3; ++i) {
            if (i < 3 - nsp) {
              td[i].n = 1;
              td[i].idx[0] = 0;
              td[i].w[0] = 1;
              continue;
            }
            const size_t d = i - (3 - nsp);            // spatial dim
            using GC = ew::compute_t<G>;                // float for 16-bit grids
            const GC v = static_cast<GC>(ew::load(gp[nsp - 1 - d]));  // grid holds (x, y, z): last dim first
            const GC xd = gs_unnormalize<GC>(v, L[i], align_);
            td[i] = gs_taps(static_cast<double>(xd), L[i], mode_, pad_, align_);
          }
          int k = 0;
          for (int a0 = 0; a0 < td[0].n; ++a0)
            for (int a1 = 0; a1 < td[1].n; ++a1)
              for (int a2 = 0; a2 < td[2].n; ++a2) {
                const int64_t i0 = td[0].idx[a0], i1 = td[1].idx[a1], i2 = td[2].idx[a2];
                if (i0 < 0 || i1 < 0 || i2 < 0) continue;
                off[q * kMaxTaps + k] = (i0 * L[1] + i1) * L[2] + i2;
                wt[q * kMaxTaps + k] = td[0].w[a0] * td[1].w[a1] * td[2].w[a2];
                ++k;
              }
          taps[q] = k;  // fewer where taps fall in zero padding
          nan_at[q] = gs_is_nan(td);
        }
        // Positions with four taps go through four_tap_rows; the others (a
        // tap in the zero padding, a NaN coordinate, other modes) are listed
        // in `rest`, given no taps there (offset 0, weight 0) and written
        // again by the general loop after it.
        int64_t rest[kBlock], nrest = 0;
        bool four = false;
        for (int64_t q = 0; q < m; ++q) {
          const bool mine = four_tap_layout && taps[q] == 4 && !nan_at[q];
          four = four || mine;
          if (!mine) rest[nrest++] = q;
          if (!four_tap_layout) continue;
          for (int k = 0; k < 4; ++k) {
            o4[k * kBlock + q] = mine ? static_cast<int32_t>(off[q * kMaxTaps + k]) : 0;
            w4[k * kBlock + q] = mine ? static_cast<float>(wt[q * kMaxTaps + k]) : 0.f;
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const T* xc = x + (n * C + c) * plane;
          T* yc = y + (n * C + c) * P + p0;
          if constexpr (kFloat) {
            if (four) four_tap_rows(xc, o4.data(), w4.data(), yc, m);
          }
          for (int64_t r = 0; r < (four ? nrest : m); ++r) {
            const int64_t q = four ? rest[r] : r;
            const int64_t* oq = off.data() + q * kMaxTaps;
            const double* wq = wt.data() + q * kMaxTaps;
            double acc = 0;
            if (taps[q] == 4) {  // bilinear in 2-D inside the input, the common case: unrolled
              acc = wq[0] * static_cast<double>(ew::load(xc[oq[0]])) + wq[1] * static_cast<double>(ew::load(xc[oq[1]]));
              acc += wq[2] * static_cast<double>(ew::load(xc[oq[2]]));
              acc += wq[3] * static_cast<double>(ew::load(xc[oq[3]]));
            } else {
              for (int k = 0; k < taps[q]; ++k) acc += wq[k] * static_cast<double>(ew::load(xc[oq[k]]));
            }
            yc[q] = ew::store<T>(nan_at[q] ? kNan : acc);
          }
        }
      }
    });
  }

  static constexpr int kMaxTaps = 64;  // 4 taps a dim (cubic), 3 dims

  GsMode mode_ = GsMode::kLinear;
  GsPad pad_ = GsPad::kZeros;
  bool align_ = false;
  Shape x_, g_;
  size_t nsp_ = 2;
  int64_t npos_ = 0;
};

// ---- AffineGrid ------------------------------------------------------------------

void affine_grid_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt))) c.fail(ErrorKind::kDType, "theta must be a float tensor");
  std::vector<int64_t> size;
  if (!c.constant_ints(1, &size)) {
    if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known()) {
      const int64_t r = c.input_shape(1)[0].value;
      if (!(r == 4 || r == 5)) c.fail(ErrorKind::kShape, "size must have 4 or 5 values");
      return c.set_output(0, dt, SymShape(static_cast<size_t>(r), Dim()));
    }
    return c.set_output_rank_unknown(0, dt);
  }
  if (!(size.size() == 4 || size.size() == 5)) c.fail(ErrorKind::kShape, "size must have 4 or 5 values");
  for (int64_t v : size) if (!(v >= 0)) c.fail(ErrorKind::kInvalidArgument, "size values must be >= 0");
  SymShape out{Dim(size[0])};
  for (size_t i = 2; i < size.size(); ++i) out.push_back(Dim(size[i]));
  out.push_back(Dim(static_cast<int64_t>(size.size() - 2)));
  c.set_output(0, dt, out);
}

class AffineGridKernel final : public Kernel {
 public:
  explicit AffineGridKernel(const KernelBuildInfo& info) : align_(info.node().attr_int("align_corners", 0) != 0) {
    y_ = info.output_shape(0);
    nsp_ = y_.size() - 2;
    const Shape th = info.input_shape(0);
    if (nsp_ < 2 || nsp_ > 3 || th != Shape{y_[0], static_cast<int64_t>(nsp_), static_cast<int64_t>(nsp_ + 1)})
      info.fail(ErrorKind::kShape, "theta " + shape_str(th) + " does not fit the output " + shape_str(y_));
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* th = ctx.inputs[0].as<const T>();
      T* y = ctx.outputs[0].as<T>();
      const size_t nsp = nsp_;
      int64_t L[3] = {1, 1, 1};
      for (size_t i = 0; i < nsp; ++i) L[3 - nsp + i] = y_[1 + i];
      auto base = [&](int64_t i, int64_t len) { return affine_base(i, len, align_); };
      const int64_t P = L[0] * L[1] * L[2];
      for (int64_t n = 0; n < y_[0]; ++n) {
        const T* t = th + n * static_cast<int64_t>(nsp * (nsp + 1));
        for (int64_t p = 0; p < P; ++p) {
          const int64_t i2 = p % L[2], i1 = (p / L[2]) % L[1], i0 = p / (L[1] * L[2]);
          // Homogeneous point (x, y[, z], 1): x along the last dim.
          double h[4];
          h[0] = base(i2, L[2]);
          h[1] = base(i1, L[1]);
          h[2] = nsp == 3 ? base(i0, L[0]) : 1.0;
          h[3] = 1.0;
          T* out = y + (n * P + p) * static_cast<int64_t>(nsp);
          for (size_t r = 0; r < nsp; ++r) {
            double acc = 0;
            for (size_t k = 0; k <= nsp; ++k) acc += static_cast<double>(ew::load(t[r * (nsp + 1) + k])) * h[k];
            out[r] = ew::store<T>(acc);
          }
        }
      }
    });
  }

 private:
  bool align_;
  Shape y_;
  size_t nsp_ = 2;
};

bool float_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = info.node().op_type + " supports float32/float64/float16/bfloat16, not " + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("GridSample", grid_sample_infer);
TWINFER_REGISTER_KERNEL("GridSample", Backend::kCPU, 0, float_supports, make_kernel<GridSampleKernel>);
TWINFER_REGISTER_SCHEMA("AffineGrid", affine_grid_infer);
TWINFER_REGISTER_KERNEL("AffineGrid", Backend::kCPU, 0, float_supports, make_kernel<AffineGridKernel>);

}  // namespace twinfer::vision
