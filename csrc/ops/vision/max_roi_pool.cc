// MaxRoiPool (Fast R-CNN's RoI pooling): each region of interest, scaled by
// spatial_scale and rounded to whole pixels, is cut into pooled_shape bins
// (bin edges floor/ceil of equal fractions of the region), and each bin
// gives the max of its pixels, 0 for a bin outside the image. rois are
// [num_rois, 5]: (batch index, x1, y1, x2, y2). What onnxruntime and
// torchvision's roi_pool (its exporter writes this op) compute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/shape_limits.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::vision {
namespace {

template <typename Ctx>
std::vector<int64_t> pooled_shape(const Ctx& c) {
  std::vector<int64_t> p = c.node().attr_ints("pooled_shape");
  if (p.size() != 2 || p[0] <= 0 || p[1] <= 0 || p[0] > kMaxElements || p[1] > kMaxElements)
    c.fail(ErrorKind::kModelFormat, "pooled_shape must be two positive sizes");
  return p;
}

template <typename Ctx>
float spatial_scale(const Ctx& c) {
  const float s = c.node().attr_float("spatial_scale", 1.f);
  if (!(s > 0) || !std::isfinite(s)) c.fail(ErrorKind::kModelFormat, "spatial_scale must be a positive number");
  return s;
}

void max_roi_pool_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("MaxRoiPool needs float X, got ") + dtype_name(dt));
  if (!(c.input_dtype(1) == dt)) c.fail(ErrorKind::kDType, "MaxRoiPool's rois must have X's type");
  const std::vector<int64_t> p = pooled_shape(c);
  spatial_scale(c);
  Dim rois = Dim(), channels = Dim();
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() == 4)) c.fail(ErrorKind::kShape, "MaxRoiPool's X must be [N, C, H, W], got " + sym_shape_str(x));
    channels = x[1];
  }
  if (c.input_has_shape(1)) {
    const SymShape& r = c.input_shape(1);
    if (!(r.size() == 2 && (!r[1].known() || r[1].value == 5)))
      c.fail(ErrorKind::kShape, "MaxRoiPool's rois must be [num_rois, 5], got " + sym_shape_str(r));
    rois = r[0];
  }
  c.set_output(0, dt, {rois, channels, Dim(p[0]), Dim(p[1])});
}

class MaxRoiPoolKernel final : public Kernel {
 public:
  explicit MaxRoiPoolKernel(const KernelBuildInfo& info) : scale_(spatial_scale(info)) {
    const std::vector<int64_t> p = pooled_shape(info);
    ph_ = p[0];
    pw_ = p[1];
  }
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    // Coordinates, bins and the max in X's precision (float for the 16-bit
    // types), as onnxruntime computes them in float.
    using CT = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const TensorView& xv = ctx.inputs[0];
    const TensorView& rv = ctx.inputs[1];
    const int64_t N = xv.shape[0], C = xv.shape[1], H = xv.shape[2], W = xv.shape[3];
    const int64_t R = rv.shape[0];
    const T* x = xv.as<const T>();
    const T* rois = rv.as<const T>();
    T* y = ctx.outputs[0].as<T>();
    // The whole-pixel region of each roi, checked before any thread starts.
    struct Region {
      int64_t batch, h0, w0, h1, w1;
    };
    std::vector<Region> regions(static_cast<size_t>(R));
    const auto pixel = [&](T v, int64_t r) {
      const double s = static_cast<double>(std::round(static_cast<CT>(ew::load(v)) * static_cast<CT>(scale_)));
      if (!(std::fabs(s) < 1e15))
        throw Error(ErrorKind::kInvalidArgument, "roi " + std::to_string(r) + " has a coordinate that is not finite "
                                                 "or past any image", "", "MaxRoiPool");
      return static_cast<int64_t>(s);
    };
    for (int64_t r = 0; r < R; ++r) {
      const T* roi = rois + r * 5;
      const double b = static_cast<double>(ew::load(roi[0]));
      if (!(b >= 0 && b < static_cast<double>(N)))
        throw Error(ErrorKind::kInvalidArgument, "roi " + std::to_string(r) + " names batch " + std::to_string(b) +
                                                     " of " + std::to_string(N), "", "MaxRoiPool");
      regions[r] = {static_cast<int64_t>(b), pixel(roi[2], r), pixel(roi[1], r), pixel(roi[4], r), pixel(roi[3], r)};
    }
    parallel_for(R * C, ctx.num_threads, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t rc = lo; rc < hi; ++rc) {
        const Region& g = regions[rc / C];
        const int64_t c = rc % C;
        const T* plane = x + (g.batch * C + c) * H * W;
        T* out = y + rc * ph_ * pw_;
        // A region of at least one pixel each way, cut into equal fractions.
        const CT bin_h = static_cast<CT>(std::max<int64_t>(g.h1 - g.h0 + 1, 1)) / static_cast<CT>(ph_);
        const CT bin_w = static_cast<CT>(std::max<int64_t>(g.w1 - g.w0 + 1, 1)) / static_cast<CT>(pw_);
        const auto edge = [](CT v, int64_t start, int64_t len) {
          return std::clamp<int64_t>(static_cast<int64_t>(v) + start, 0, len);
        };
        for (int64_t i = 0; i < ph_; ++i) {
          const int64_t hs = edge(std::floor(static_cast<CT>(i) * bin_h), g.h0, H);
          const int64_t he = edge(std::ceil(static_cast<CT>(i + 1) * bin_h), g.h0, H);
          for (int64_t j = 0; j < pw_; ++j) {
            const int64_t ws = edge(std::floor(static_cast<CT>(j) * bin_w), g.w0, W);
            const int64_t we = edge(std::ceil(static_cast<CT>(j + 1) * bin_w), g.w0, W);
            if (he <= hs || we <= ws) {  // a bin outside the image
              out[i * pw_ + j] = ew::store<T>(CT(0));
              continue;
            }
            CT best = std::numeric_limits<CT>::lowest();  // NaNs never win, as in torch and onnxruntime
            for (int64_t h = hs; h < he; ++h)
              for (int64_t w = ws; w < we; ++w) {
                const CT v = static_cast<CT>(ew::load(plane[h * W + w]));
                if (v > best) best = v;
              }
            out[i * pw_ + j] = ew::store<T>(best);
          }
        }
      }
    });
  }

  float scale_ = 1.f;
  int64_t ph_ = 1, pw_ = 1;
};

bool max_roi_pool_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::in_typeset(ew::kFloatTypes, info.input_dtype(0))) {
    *why = std::string("MaxRoiPool supports float types, not ") + dtype_name(info.input_dtype(0));
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("MaxRoiPool", max_roi_pool_infer);
TWINFER_REGISTER_KERNEL("MaxRoiPool", Backend::kCPU, 0, max_roi_pool_supports, make_kernel<MaxRoiPoolKernel>);

}  // namespace twinfer::vision
