// RoiAlign (opsets 10-22): shape rule and CPU kernel, float32/float64.
// Follows the ONNX reference / onnxruntime: each output bin averages (avg)
// or takes the max of (max: of the weighted corner values, as onnxruntime)
// sampling_ratio^2 bilinear samples (adaptive ceil(roi/bins) when 0);
// samples beyond one pixel outside the map read 0. Coordinates are shifted
// by half a pixel with coordinate_transformation_mode=half_pixel (the
// default from opset 16; opset 10 behaves as output_half_pixel, where the
// roi is also at least one pixel wide).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/kernel.h"
#include "ops/schema.h"
#include "ops/vision/roi_align_math.h"

namespace twinfer::vision {
namespace {

void roi_align_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("RoiAlign needs a float input, got ") + dtype_name(dt));
  if (!(c.input_dtype(1) == dt)) c.fail(ErrorKind::kDType, "rois dtype differs from the input");
  if (!(c.input_dtype(2) == DType::kInt64 || c.input_dtype(2) == DType::kInt32))
    c.fail(ErrorKind::kDType, "batch_indices must be int64");
  const std::string mode = n.attr_string("mode", "avg");
  if (!(mode == "avg" || mode == "max")) c.fail(ErrorKind::kUnsupportedOp, "mode '" + mode + "' is not supported");
  const int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1);
  if (!(oh > 0 && ow > 0)) c.fail(ErrorKind::kModelFormat, "output_height/width must be positive");
  Dim r, ch;
  if (c.input_has_shape(1)) r = c.input_shape(1)[0];
  if (!r.known() && c.input_has_shape(2) && !c.input_shape(2).empty()) r = c.input_shape(2)[0];
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() == 4)) c.fail(ErrorKind::kShape, "RoiAlign input must be 4-D, got " + sym_shape_str(x));
    ch = x[1];
  }
  c.set_output(0, dt, SymShape{r, ch, Dim(oh), Dim(ow)});
}

class RoiAlignKernel final : public Kernel {
 public:
  explicit RoiAlignKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    const graph::Node& n = info.node();
    x_ = info.input_shape(0);
    const Shape rois = info.input_shape(1), bi = info.input_shape(2);
    if (x_.size() != 4 || rois.size() != 2 || rois[1] != 4 || bi != Shape{rois[0]})
      info.fail(ErrorKind::kShape, "input " + shape_str(x_) + ", rois " + shape_str(rois) + " and batch_indices " +
                                       shape_str(bi) + " do not fit");
    R_ = rois[0];
    max_ = n.attr_string("mode", "avg") == "max";
    oh_ = n.attr_int("output_height", 1);
    ow_ = n.attr_int("output_width", 1);
    ratio_ = n.attr_int("sampling_ratio", 0);
    if (ratio_ > kMaxRoiGrid)
      info.fail(ErrorKind::kInvalidArgument, "sampling_ratio " + std::to_string(ratio_) + " is above " +
                                                 std::to_string(kMaxRoiGrid) + " samples per bin and axis");
    scale_ = n.attr_float("spatial_scale", 1.f);
    const std::string ct =
        n.attr_string("coordinate_transformation_mode", info.opset() >= 16 ? "half_pixel" : "output_half_pixel");
    if (ct != "half_pixel" && ct != "output_half_pixel")
      info.fail(ErrorKind::kUnsupportedOp, "coordinate_transformation_mode '" + ct + "' is not supported");
    half_pixel_ = ct == "half_pixel";
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    // The geometry in the data's precision (roi_align_math.h).
    using R = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using Sample = RoiSample<R>;
    const T* x = ctx.inputs[0].as<const T>();
    const T* rois = ctx.inputs[1].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    std::vector<int64_t> bidx(static_cast<size_t>(R_));
    for (int64_t r = 0; r < R_; ++r) {
      const int64_t b = ctx.inputs[2].dtype == DType::kInt32 ? ctx.inputs[2].as<const int32_t>()[r]
                                                              : ctx.inputs[2].as<const int64_t>()[r];
      if (b < 0 || b >= x_[0])
        throw Error(ErrorKind::kInvalidArgument,
                    "batch index " + std::to_string(b) + " is out of range [0, " + std::to_string(x_[0]) + ")", node_,
                    op_);
      bidx[r] = b;
    }
    const int64_t C = x_[1], H = x_[2], W = x_[3], OH = oh_, OW = ow_;
    parallel_for(R_, ctx.num_threads, 1, [&](int64_t rb, int64_t re) {
      std::vector<Sample> samples;
      for (int64_t r = rb; r < re; ++r) {
        const T* roi = rois + r * 4;
        auto scaled = [&](int k) { return static_cast<R>(static_cast<R>(ew::load(roi[k])) * static_cast<R>(scale_)); };
        const RoiGeom<R> geo = roi_geom<R>(scaled(0), scaled(1), scaled(2), scaled(3), half_pixel_, OH, OW, ratio_);
        const int64_t gh = geo.gh, gw = geo.gw, count = geo.count;
        // The roi's samples, precomputed once for all channels: bounded (a
        // roi of 2^32 pixels asked for a wrapped count, then wrote past it).
        constexpr int64_t kMaxSamples = int64_t{1} << 26;
        int64_t n_samples = 0;
        if (__builtin_mul_overflow(OH * OW, gh * gw, &n_samples) || n_samples > kMaxSamples)
          throw Error(ErrorKind::kInvalidArgument,
                      "roi " + std::to_string(r) + " needs " + std::to_string(gh) + " x " + std::to_string(gw) +
                          " samples in each of " + std::to_string(OH * OW) + " bins, more than 2^26: a roi that "
                          "large, or sampling_ratio, is not what RoiAlign is for", node_, op_);
        samples.assign(static_cast<size_t>(n_samples), Sample{});
        size_t k = 0;
        for (int64_t ph = 0; ph < OH; ++ph)
          for (int64_t pw = 0; pw < OW; ++pw)
            for (int64_t iy = 0; iy < gh; ++iy) {
              const R yy = roi_sample_y(geo, ph, iy);
              for (int64_t ix = 0; ix < gw; ++ix, ++k) samples[k] = roi_sample(yy, roi_sample_x(geo, pw, ix), H, W);
            }
        for (int64_t c = 0; c < C; ++c) {
          const T* xc = x + (bidx[r] * C + c) * H * W;
          T* yc = y + (r * C + c) * OH * OW;
          size_t q = 0;
          for (int64_t o = 0; o < OH * OW; ++o) {
            double v = 0;
            bool first = true;
            for (int64_t s = 0; s < gh * gw; ++s, ++q) {
              const Sample& sm = samples[q];
              if (!max_) {
                v += sm.w[0] * xc[sm.pos[0]] + sm.w[1] * xc[sm.pos[1]] + sm.w[2] * xc[sm.pos[2]] +
                     sm.w[3] * xc[sm.pos[3]];
              } else {
                const double m = std::max(std::max(sm.w[0] * xc[sm.pos[0]], sm.w[1] * xc[sm.pos[1]]),
                                          std::max(sm.w[2] * xc[sm.pos[2]], sm.w[3] * xc[sm.pos[3]]));
                v = first ? m : std::max(v, m);
                first = false;
              }
            }
            yc[o] = static_cast<T>(max_ ? v : v / static_cast<double>(count));
          }
        }
      }
    });
  }

  std::string node_, op_;
  Shape x_;
  int64_t R_ = 0, oh_ = 1, ow_ = 1, ratio_ = 0;
  float scale_ = 1.f;
  bool max_ = false, half_pixel_ = true;
};

bool roi_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = std::string("RoiAlign supports float32/float64, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("RoiAlign", roi_align_infer);
TWINFER_REGISTER_KERNEL("RoiAlign", Backend::kCPU, 0, roi_supports, make_kernel<RoiAlignKernel>);

}  // namespace twinfer::vision
