// LpPool: y = (sum over the window of |x|^p)^(1/p), padded positions adding
// nothing; GlobalLpPool: the same over all of each (n, c) plane. Window attributes (kernel_shape, strides, pads, auto_pad, and
// dilations / ceil_mode from opset 18) are parsed by ops/nn/window.h as for
// the other pools. Shape rule and CPU kernel (float32/float64, float16/bfloat16
// summed in float; 1-3 spatial dims, threaded over (n, c) planes).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/nn/window.h"
#include "ops/schema.h"
#include "ops/vision/lp_pool_math.h"

namespace twinfer::vision {
namespace {

template <typename Ctx>
double lp_p(const Ctx& c) {
  const graph::Node& n = c.node();
  double p = c.opset() < 2 ? n.attr_float("p", 2.f) : static_cast<double>(n.attr_int("p", 2));
  if (!(p > 0)) c.fail(ErrorKind::kModelFormat, "LpPool needs p > 0");
  return p;
}

void lp_pool_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("LpPool needs a float input, got ") + dtype_name(dt));
  lp_p(c);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  if (!(x.size() >= 3)) c.fail(ErrorKind::kShape, "LpPool input must have rank >= 3, got " + sym_shape_str(x));
  nn::Window w = nn::parse_window(n, x.size() - 2, nullptr, nn::WindowOptions{true, true});
  SymShape y{x[0], x[1]};
  for (size_t i = 0; i < w.nsp; ++i) y.push_back(nn::window_output_dim(w, i, x[2 + i], n));
  c.set_output(0, dt, y);
}

struct Dim1 {
  int64_t in = 1, out = 1, dil = 1;
  std::vector<int64_t> first, taps;  // per output: first input index inside, taps inside
};

Dim1 make_dim(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb) {
  Dim1 t;
  t.in = in;
  t.out = out;
  t.dil = d;
  for (int64_t o = 0; o < out; ++o) {
    int64_t first = 0, taps = 0;
    lp_window(o, in, k, s, d, pb, &first, &taps);
    t.first.push_back(first);
    t.taps.push_back(taps);
  }
  return t;
}

// LpPool, or with `global` GlobalLpPool: one window over each whole plane.
class LpPoolKernel final : public Kernel {
 public:
  explicit LpPoolKernel(const KernelBuildInfo& info, bool global = false) : p_(lp_p(info)) {
    const Shape x = info.input_shape(0);
    if (x.size() < 3 || x.size() > 5) info.fail(ErrorKind::kUnsupportedOp, "LpPool supports 1-3 spatial dims");
    const size_t off = 3 - (x.size() - 2);
    planes_ = x[0] * x[1];
    if (global) {
      for (size_t i = 0; i < 3; ++i)
        dims_[i] = i < off ? make_dim(1, 1, 1, 1, 1, 0) : make_dim(x[2 + i - off], 1, x[2 + i - off], 1, 1, 0);
      return;
    }
    nn::Window w = nn::parse_window(info.node(), x.size() - 2, nullptr, nn::WindowOptions{true, true});
    nn::resolve_pads(w, Shape(x.begin() + 2, x.end()));
    const Shape y = info.output_shape(0);
    for (size_t i = 0; i < 3; ++i) {
      if (i < off) {
        dims_[i] = make_dim(1, 1, 1, 1, 1, 0);
        continue;
      }
      const size_t j = i - off;
      const int64_t out = nn::window_output_size(w, j, x[2 + j], info.node());
      if (out != y[2 + j]) info.fail(ErrorKind::kShape, "output " + shape_str(y) + " does not fit the window");
      dims_[i] = make_dim(x[2 + j], out, w.kernel[j], w.stride[j], w.dilation[j], w.pad_begin[j]);
    }
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype,
                                          [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  // Sums in the element type; float for float16 / bfloat16.
  template <typename T>
  void compute(KernelContext& ctx) const {
    using CT = ew::compute_t<T>;
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const Dim1 &D = dims_[0], &H = dims_[1], &W = dims_[2];
    const int64_t in_plane = D.in * H.in * W.in, out_plane = D.out * H.out * W.out;
    const CT p = static_cast<CT>(p_), inv_p = static_cast<CT>(1.0 / p_);
    const bool p1 = p_ == 1.0, p2 = p_ == 2.0;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, out_plane));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t pb, int64_t pe) {
      for (int64_t pl = pb; pl < pe; ++pl) {
        const T* xp = x + pl * in_plane;
        T* yp = y + pl * out_plane;
        for (int64_t od = 0; od < D.out; ++od)
          for (int64_t oh = 0; oh < H.out; ++oh)
            for (int64_t ow = 0; ow < W.out; ++ow) {
              CT sum = 0;
              for (int64_t kd = 0, id = D.first[od]; kd < D.taps[od]; ++kd, id += D.dil)
                for (int64_t kh = 0, ih = H.first[oh]; kh < H.taps[oh]; ++kh, ih += H.dil) {
                  const T* row = xp + (id * H.in + ih) * W.in;
                  for (int64_t kw = 0, iw = W.first[ow]; kw < W.taps[ow]; ++kw, iw += W.dil) {
                    sum += lp_term<CT>(static_cast<CT>(ew::load(row[iw])), p, p1, p2);
                  }
                }
              yp[(od * H.out + oh) * W.out + ow] = ew::store<T>(lp_finish<CT>(sum, inv_p, p1, p2));
            }
      }
    });
  }

  double p_;
  Dim1 dims_[3];
  int64_t planes_ = 0;
};

void global_lp_pool_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("GlobalLpPool needs a float input, got ") + dtype_name(dt));
  lp_p(c);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  SymShape y = c.input_shape(0);
  if (!(y.size() >= 3)) c.fail(ErrorKind::kShape, "GlobalLpPool input must have rank >= 3, got " + sym_shape_str(y));
  for (size_t i = 2; i < y.size(); ++i) y[i] = Dim(1);
  c.set_output(0, dt, y);
}

std::unique_ptr<Kernel> make_global_lp_pool(const KernelBuildInfo& info) {
  return std::make_unique<LpPoolKernel>(info, true);
}

bool lp_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = std::string("LpPool supports float32/float64/float16/bfloat16, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("LpPool", lp_pool_infer);
TWINFER_REGISTER_KERNEL("LpPool", Backend::kCPU, 0, lp_supports, make_kernel<LpPoolKernel>);
TWINFER_REGISTER_SCHEMA("GlobalLpPool", global_lp_pool_infer);
TWINFER_REGISTER_KERNEL("GlobalLpPool", Backend::kCPU, 0, lp_supports, make_global_lp_pool);

}  // namespace twinfer::vision
