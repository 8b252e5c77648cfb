// Conv: shape rule and the reference kernel (direct loops, float32/float64;
// float16/bfloat16 computed in float32 on converted copies),
// for ai.onnx Conv and the fused com.twinfer Conv. The fast path is
// backends/cpu/onednn_conv.cc.
#include "ops/nn/conv.h"

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "ops/elementwise/scalar.h"
#include "ops/nn/channels_last.h"
#include "ops/schema.h"

namespace twinfer::nn {

namespace {

// The blocked-layout and channels-last Convs carry the fused form's residual and activation.
bool is_fused_domain(const graph::Node& n) {
  return n.domain == kTwinferDomain || n.domain == kBlockedDomain || n.domain == kChannelsLastDomain;
}

bool is_channels_last(const graph::Node& n) { return n.domain == kChannelsLastDomain; }

void infer_conv(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("Conv needs a float input, got ") + dtype_name(dt));
  const auto same_as_input = [&](int i, const char* what) {
    if (c.input_dtype(i) == dt) return;
    c.fail(ErrorKind::kDType, std::string(what) + " dtype " + dtype_name(c.input_dtype(i)) +
                                  " differs from the input dtype " + dtype_name(dt));
  };
  same_as_input(1, "weights");
  if (c.has_input(2)) same_as_input(2, "bias");
  const bool fused = is_fused_domain(n);
  if (fused) {
    parse_activation(n);  // reject bad activation attributes at load time
    if (c.has_input(3)) same_as_input(3, "residual");
  } else {
    if (!(c.num_inputs() <= 3)) c.fail(ErrorKind::kModelFormat, "Conv takes at most 3 inputs");
  }
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) {
    c.set_output_rank_unknown(0, dt);
    return;
  }
  // The rule is written for [N, C, spatial...] and [M, C/group, k...];
  // channels-last activations and KRSC weights are permuted into it and the
  // output back.
  const bool cl = is_channels_last(n);
  const SymShape xs = cl ? channels_first_shape(c.input_shape(0)) : c.input_shape(0);
  const SymShape ws = cl ? channels_first_shape(c.input_shape(1)) : c.input_shape(1);
  if (!(xs.size() >= 3)) c.fail(ErrorKind::kShape, "Conv input must have rank >= 3, got " + sym_shape_str(xs));
  if (!(ws.size() == xs.size()))
    c.fail(ErrorKind::kShape, "weights " + sym_shape_str(ws) + " do not match input " + sym_shape_str(xs));
  const size_t nsp = xs.size() - 2;
  const int64_t group = n.attr_int("group", 1);
  if (!(group >= 1)) c.fail(ErrorKind::kModelFormat, "group must be >= 1");

  std::vector<int64_t> wk;
  bool wk_known = true;
  for (size_t i = 0; i < nsp; ++i) {
    wk_known = wk_known && ws[2 + i].known();
    wk.push_back(ws[2 + i].value);
  }
  if (!wk_known && !n.has_attr("kernel_shape")) {
    // The kernel size is unknown: only the rank of the output is.
    SymShape out(xs.size());
    out[0] = xs[0];
    out[1] = ws[0];
    c.set_output(0, dt, cl ? channels_last_shape(out) : out);
    return;
  }
  Window w = parse_window(n, nsp, wk_known ? &wk : nullptr, WindowOptions{true, false});

  if (xs[1].known() && ws[1].known())
    if (!(xs[1].value == ws[1].value * group))
      c.fail(ErrorKind::kShape,
             "input has " + std::to_string(xs[1].value) + " channels but weights expect " +
                 std::to_string(ws[1].value) + " x group " + std::to_string(group));
  if (ws[0].known())
    if (!(ws[0].value % group == 0)) c.fail(ErrorKind::kShape, "output channels are not divisible by group");
  if (c.has_input(2) && c.input_has_shape(2)) {
    const SymShape& bs = c.input_shape(2);
    if (!(bs.size() == 1 && (!bs[0].known() || !ws[0].known() || bs[0].value == ws[0].value)))
      c.fail(ErrorKind::kShape, "bias must have shape [M], got " + sym_shape_str(bs));
  }

  SymShape out;
  out.push_back(xs[0]);
  out.push_back(ws[0]);
  for (size_t i = 0; i < nsp; ++i) out.push_back(window_output_dim(w, i, xs[2 + i], n));
  if (fused && c.has_input(3) && c.input_has_shape(3)) {
    const SymShape rs = cl ? channels_first_shape(c.input_shape(3)) : c.input_shape(3);
    bool ok = rs.size() == out.size();
    for (size_t i = 0; ok && i < rs.size(); ++i)
      ok = !rs[i].known() || !out[i].known() || rs[i].value == out[i].value;
    if (!(ok))
      c.fail(ErrorKind::kShape,
             "residual " + sym_shape_str(c.input_shape(3)) + " does not match the output " +
                 sym_shape_str(cl ? channels_last_shape(out) : out));
  }
  c.set_output(0, dt, cl ? channels_last_shape(out) : out);
}

TWINFER_REGISTER_SCHEMA("Conv", infer_conv);
TWINFER_REGISTER_SCHEMA("Conv", infer_conv, kTwinferDomain);
TWINFER_REGISTER_SCHEMA("Conv", infer_conv, kBlockedDomain);  // shapes are logical whatever the layout
TWINFER_REGISTER_SCHEMA("Conv", infer_conv, kChannelsLastDomain);

// ---------------------------------------------------------------------------
// Reference kernel: y[n, m, o...] = b[m] + sum over c in m's group and the
// kernel window of x[n, c, o*s - pb + k*d] * w[m, c, k]; spatial dims are
// handled as 3-D (missing leading dims have size 1).

struct Geom3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          p[3] = {0, 0, 0};
};

Geom3 geom3(const ConvSpec& cs) {
  Geom3 g;
  const size_t nsp = cs.win.nsp, off = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    g.in[off + i] = cs.x[2 + i];
    g.out[off + i] = cs.y[2 + i];
    g.k[off + i] = cs.win.kernel[i];
    g.s[off + i] = cs.win.stride[i];
    g.d[off + i] = cs.win.dilation[i];
    g.p[off + i] = cs.win.pad_begin[i];
  }
  return g;
}

class ConvReference final : public Kernel {
 public:
  explicit ConvReference(const KernelBuildInfo& info) : spec_(conv_spec(info)), g_(geom3(spec_)) {}

  void run(KernelContext& ctx) const override {
    const DType dt = ctx.inputs[0].dtype;
    auto in = [&](size_t i, bool present) { return present ? ctx.inputs[i].data : nullptr; };
    const void* b = in(2, spec_.has_bias);
    const void* r = in(3, spec_.has_residual);
    if (dt == DType::kFloat16) return widened<half_t>(ctx, b, r);
    if (dt == DType::kBFloat16) return widened<bfloat16_t>(ctx, b, r);
    dispatch_float(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), static_cast<const T*>(b),
                 static_cast<const T*>(r), ctx.outputs[0].as<T>());
    });
  }

 private:
  // 16-bit floats: the loops run on float32 copies (a reference, not a fast path).
  template <typename H>
  void widened(KernelContext& ctx, const void* b, const void* r) const {
    auto wide = [](const void* p, int64_t n) {
      std::vector<float> v(p ? static_cast<size_t>(n) : 0);
      for (size_t i = 0; i < v.size(); ++i) v[i] = ew::load(static_cast<const H*>(p)[i]);
      return v;
    };
    const TensorView& y = ctx.outputs[0];
    const std::vector<float> xf = wide(ctx.inputs[0].data, ctx.inputs[0].numel()),
                             wf = wide(ctx.inputs[1].data, ctx.inputs[1].numel()),
                             bf = wide(b, spec_.y[1]), rf = wide(r, y.numel());
    std::vector<float> yf(static_cast<size_t>(y.numel()));
    compute<float>(xf.data(), wf.data(), b ? bf.data() : nullptr, r ? rf.data() : nullptr, yf.data());
    for (size_t i = 0; i < yf.size(); ++i) y.as<H>()[i] = ew::store<H>(yf[i]);
  }

  template <typename T>
  void compute(const T* x, const T* w, const T* b, const T* r, T* y) const {
    const int64_t N = spec_.x[0], C = spec_.x[1], M = spec_.y[1], G = spec_.group;
    const int64_t Cg = C / G, Mg = M / G;
    const int64_t in_sz = g_.in[0] * g_.in[1] * g_.in[2];
    const int64_t out_sz = g_.out[0] * g_.out[1] * g_.out[2];
    const int64_t k_sz = g_.k[0] * g_.k[1] * g_.k[2];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) {
        const int64_t gi = m / Mg;
        T* yp = y + (n * M + m) * out_sz;
        for (int64_t o0 = 0; o0 < g_.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < g_.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < g_.out[2]; ++o2) {
              T acc = b ? b[m] : T(0);
              for (int64_t c = 0; c < Cg; ++c) {
                const T* xp = x + (n * C + gi * Cg + c) * in_sz;
                const T* wp = w + (m * Cg + c) * k_sz;
                for (int64_t k0 = 0; k0 < g_.k[0]; ++k0) {
                  int64_t i0 = o0 * g_.s[0] - g_.p[0] + k0 * g_.d[0];
                  if (i0 < 0 || i0 >= g_.in[0]) continue;
                  for (int64_t k1 = 0; k1 < g_.k[1]; ++k1) {
                    int64_t i1 = o1 * g_.s[1] - g_.p[1] + k1 * g_.d[1];
                    if (i1 < 0 || i1 >= g_.in[1]) continue;
                    for (int64_t k2 = 0; k2 < g_.k[2]; ++k2) {
                      int64_t i2 = o2 * g_.s[2] - g_.p[2] + k2 * g_.d[2];
                      if (i2 < 0 || i2 >= g_.in[2]) continue;
                      acc += xp[(i0 * g_.in[1] + i1) * g_.in[2] + i2] *
                             wp[(k0 * g_.k[1] + k1) * g_.k[2] + k2];
                    }
                  }
                }
              }
              int64_t oi = (o0 * g_.out[1] + o1) * g_.out[2] + o2;
              if (r) acc += r[(n * M + m) * out_sz + oi];
              yp[oi] = spec_.act.apply(acc);
            }
      }
  }

  ConvSpec spec_;
  Geom3 g_;
};

bool reference_supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 && dt != DType::kBFloat16) {
    *why = std::string("reference Conv supports float32/float64/float16/bfloat16, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 0, reference_supports, make_kernel<ConvReference>);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 0, reference_supports, make_kernel<ConvReference>,
                        kTwinferDomain);

}  // namespace

ConvSpec conv_spec(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  ConvSpec cs;
  cs.fused_domain = is_fused_domain(n);
  cs.channels_last = is_channels_last(n);
  cs.x = cs.channels_last ? channels_first_shape(info.input_shape(0)) : info.input_shape(0);
  cs.w = cs.channels_last ? channels_first_shape(info.input_shape(1)) : info.input_shape(1);
  cs.y = cs.channels_last ? channels_first_shape(info.output_shape(0)) : info.output_shape(0);
  if (cs.x.size() < 3 || cs.w.size() != cs.x.size())
    info.fail(ErrorKind::kShape, "input " + shape_str(cs.x) + " and weights " + shape_str(cs.w) +
                                     " do not fit a convolution");
  const size_t nsp = cs.x.size() - 2;
  cs.group = n.attr_int("group", 1);
  if (cs.group < 1 || cs.x[1] != cs.w[1] * cs.group || cs.w[0] % cs.group != 0)
    info.fail(ErrorKind::kShape, "input " + shape_str(cs.x) + ", weights " + shape_str(cs.w) +
                                     " and group " + std::to_string(cs.group) + " do not fit");
  std::vector<int64_t> wk(cs.w.begin() + 2, cs.w.end());
  cs.win = parse_window(n, nsp, &wk, WindowOptions{true, false});
  resolve_pads(cs.win, Shape(cs.x.begin() + 2, cs.x.end()));
  Shape expect{cs.x[0], cs.w[0]};
  for (size_t i = 0; i < nsp; ++i) expect.push_back(window_output_size(cs.win, i, cs.x[2 + i], n));
  if (expect != cs.y)
    info.fail(ErrorKind::kShape, "output shape " + shape_str(cs.y) + " differs from the expected " +
                                     shape_str(expect));
  cs.has_bias = info.has_input(2);
  if (cs.has_bias && info.input_shape(2) != Shape{cs.w[0]})
    info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(cs.w[0]) + "], got " +
                                     shape_str(info.input_shape(2)));
  if (cs.fused_domain) {
    cs.act = parse_activation(n);
    cs.has_residual = info.has_input(3);
    const Shape rs = !cs.has_residual ? Shape{}
                     : cs.channels_last ? channels_first_shape(info.input_shape(3))
                                        : info.input_shape(3);
    if (cs.has_residual && rs != cs.y)
      info.fail(ErrorKind::kShape, "residual " + shape_str(info.input_shape(3)) +
                                       " does not match the output " + shape_str(cs.y));
  }
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != info.input_dtype(0))
      info.fail(ErrorKind::kDType, "all inputs must have the same dtype");
  return cs;
}

}  // namespace twinfer::nn
