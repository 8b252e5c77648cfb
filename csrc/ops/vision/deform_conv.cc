// DeformConv (opsets 19-22), 2-D: shape rule and CPU kernel, float32/float64.
// Every kernel tap (i, j) of output (oh, ow) reads the input at
//   (oh*stride - pad + i*dilation + dy, ow*stride - pad + j*dilation + dx)
// by bilinear interpolation (corners outside the input read 0), with (dy, dx)
// = offset[n, og*2*K + 2*(i*kW + j) + {0, 1}, oh, ow] for the input channel's
// offset group og, scaled by mask[n, og*K + i*kW + j, oh, ow] when given.
// The kernel builds the sampled column matrix per (n, group) and multiplies
// it by the group's weights.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel.h"
#include "ops/nn/window.h"
#include "ops/schema.h"
#include "ops/vision/deform_conv_math.h"

namespace twinfer::vision {
namespace {

void deform_conv_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("DeformConv needs a float input, got ") + dtype_name(dt));
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  const SymShape& w = c.input_shape(1);
  if (!(x.size() == 4 && w.size() == 4))
    c.fail(ErrorKind::kUnsupportedOp, "DeformConv supports 2-D inputs, got " + sym_shape_str(x));
  std::vector<int64_t> wk{w[2].known() ? w[2].value : 1, w[3].known() ? w[3].value : 1};
  if (!(w[2].known() && w[3].known()) && !n.has_attr("kernel_shape")) {
    return c.set_output(0, dt, SymShape{x[0], w[0], Dim(), Dim()});
  }
  nn::Window win = nn::parse_window(n, 2, &wk, nn::WindowOptions{true, false});
  SymShape out{x[0], w[0]};
  for (size_t i = 0; i < 2; ++i) out.push_back(nn::window_output_dim(win, i, x[2 + i], n));
  c.set_output(0, dt, out);
}

class DeformConvKernel final : public Kernel {
 public:
  explicit DeformConvKernel(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    x_ = info.input_shape(0);
    w_ = info.input_shape(1);
    y_ = info.output_shape(0);
    group_ = n.attr_int("group", 1);
    og_ = n.attr_int("offset_group", 1);
    if (x_.size() != 4 || w_.size() != 4 || group_ < 1 || og_ < 1 || x_[1] != w_[1] * group_ ||
        w_[0] % group_ != 0 || x_[1] % og_ != 0)
      info.fail(ErrorKind::kShape, "input " + shape_str(x_) + ", weights " + shape_str(w_) + ", group " +
                                       std::to_string(group_) + " and offset_group " + std::to_string(og_) +
                                       " do not fit");
    std::vector<int64_t> wk{w_[2], w_[3]};
    win_ = nn::parse_window(n, 2, &wk, nn::WindowOptions{true, false});
    nn::resolve_pads(win_, Shape{x_[2], x_[3]});
    const int64_t K = w_[2] * w_[3];
    const Shape off_expect{x_[0], og_ * 2 * K, y_[2], y_[3]};
    if (info.input_shape(2) != off_expect)
      info.fail(ErrorKind::kShape, "offset " + shape_str(info.input_shape(2)) + " should be " + shape_str(off_expect));
    has_bias_ = info.has_input(3);
    if (has_bias_ && info.input_shape(3) != Shape{w_[0]})
      info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(w_[0]) + "]");
    has_mask_ = info.has_input(4);
    const Shape mask_expect{x_[0], og_ * K, y_[2], y_[3]};
    if (has_mask_ && info.input_shape(4) != mask_expect)
      info.fail(ErrorKind::kShape, "mask " + shape_str(info.input_shape(4)) + " should be " + shape_str(mask_expect));
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<const T>();
    const T* w = ctx.inputs[1].as<const T>();
    const T* off = ctx.inputs[2].as<const T>();
    const T* b = has_bias_ ? ctx.inputs[3].as<const T>() : nullptr;
    const T* mask = has_mask_ ? ctx.inputs[4].as<const T>() : nullptr;
    T* y = ctx.outputs[0].as<T>();
    const int64_t N = x_[0], C = x_[1], H = x_[2], W = x_[3], M = w_[0], kH = w_[2], kW = w_[3], K = kH * kW;
    const int64_t OH = y_[2], OW = y_[3], P = OH * OW, G = group_, Cg = C / G, Mg = M / G, Cog = C / og_;
    const int64_t sh = win_.stride[0], sw = win_.stride[1], dh = win_.dilation[0], dw = win_.dilation[1];
    const int64_t ph = win_.pad_begin[0], pw = win_.pad_begin[1];
    parallel_for(N * G, ctx.num_threads, 1, [&](int64_t qb, int64_t qe) {
      std::vector<T> col(static_cast<size_t>(Cg * K * P));
      for (int64_t q = qb; q < qe; ++q) {
        const int64_t n = q / G, g = q % G;
        for (int64_t cc = 0; cc < Cg; ++cc) {
          const int64_t c = g * Cg + cc, og = c / Cog;
          const T* xc = x + (n * C + c) * H * W;
          for (int64_t i = 0; i < kH; ++i)
            for (int64_t j = 0; j < kW; ++j) {
              const int64_t k = i * kW + j;
              const T* oy = off + ((n * og_ + og) * 2 * K + 2 * k) * P;
              const T* ox = oy + P;
              const T* mk = mask ? mask + ((n * og_ + og) * K + k) * P : nullptr;
              T* cr = col.data() + (cc * K + k) * P;
              for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                  const int64_t p = oh * OW + ow;
                  const double hy = static_cast<double>(oh * sh - ph + i * dh) + oy[p];
                  const double wx = static_cast<double>(ow * sw - pw + j * dw) + ox[p];
                  double v = deform_sample(xc, H, W, hy, wx);
                  if (mk) v *= static_cast<double>(mk[p]);
                  cr[p] = static_cast<T>(v);
                }
            }
        }
        for (int64_t mm = 0; mm < Mg; ++mm) {
          const int64_t m = g * Mg + mm;
          T* yp = y + (n * M + m) * P;
          std::fill(yp, yp + P, b ? b[m] : T(0));
          const T* wr = w + m * Cg * K;
          for (int64_t r = 0; r < Cg * K; ++r) {
            const T wv = wr[r];
            const T* cr = col.data() + r * P;
            for (int64_t p = 0; p < P; ++p) yp[p] += wv * cr[p];
          }
        }
      }
    });
  }

  Shape x_, w_, y_;
  int64_t group_ = 1, og_ = 1;
  nn::Window win_;
  bool has_bias_ = false, has_mask_ = false;
};

bool deform_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = std::string("DeformConv supports float32/float64, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("DeformConv", deform_conv_infer);
TWINFER_REGISTER_KERNEL("DeformConv", Backend::kCPU, 0, deform_supports, make_kernel<DeformConvKernel>);

}  // namespace twinfer::vision
