// ConvTranspose: shape rule and the reference kernel (a scatter loop,
// float32/float64, any geometry). The fast path for float32 is oneDNN's
// deconvolution (backends/cpu/onednn_deconv.cc).
#include "ops/vision/conv_transpose.h"

#include <algorithm>
#include <string>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/schema.h"

namespace twinfer::vision {
namespace {

[[noreturn]] void fail(const graph::Node& n, ErrorKind k, const std::string& m) { throw Error(k, m, n.name, n.op_type); }

std::vector<int64_t> ints_or(const graph::Node& n, const char* name, size_t len, int64_t dflt) {
  std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(len, dflt));
  if (v.size() != len)
    fail(n, ErrorKind::kModelFormat, std::string(name) + " has " + std::to_string(v.size()) + " values, expected " +
                                         std::to_string(len));
  return v;
}

}  // namespace

DeconvGeometry deconv_geometry(const graph::Node& n, const std::vector<int64_t>& in, const std::vector<int64_t>& wk) {
  const size_t nsp = in.size();
  DeconvGeometry g;
  g.kernel = n.has_attr("kernel_shape") ? ints_or(n, "kernel_shape", nsp, 1) : wk;
  if (g.kernel.size() != nsp) fail(n, ErrorKind::kModelFormat, "kernel_shape does not match the input rank");
  g.stride = ints_or(n, "strides", nsp, 1);
  g.dilation = ints_or(n, "dilations", nsp, 1);
  const std::vector<int64_t> opad = ints_or(n, "output_padding", nsp, 0);
  for (size_t i = 0; i < nsp; ++i) {
    if (g.kernel[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1)
      fail(n, ErrorKind::kModelFormat, "kernel_shape, strides and dilations must be >= 1");
    if (opad[i] < 0) fail(n, ErrorKind::kModelFormat, "output_padding must be >= 0");
  }
  std::vector<int64_t> oshape;
  if (n.has_attr("output_shape")) {
    oshape = n.attr_ints("output_shape");
    if (oshape.size() == nsp + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
    if (oshape.size() != nsp) fail(n, ErrorKind::kModelFormat, "output_shape does not match the input rank");
  }
  const std::string ap = n.attr_string("auto_pad", "NOTSET");
  const bool same = ap == "SAME_UPPER" || ap == "SAME_LOWER";
  if (!same && ap != "NOTSET" && ap != "VALID" && !ap.empty())
    fail(n, ErrorKind::kUnsupportedOp, "unknown auto_pad value '" + ap + "'");
  g.out.assign(nsp, -1);
  g.pad_begin.assign(nsp, 0);
  auto natural = [&](size_t i) {  // the output size with no padding
    return g.stride[i] * (in[i] - 1) + opad[i] + (g.kernel[i] - 1) * g.dilation[i] + 1;
  };
  // With output_shape (pads ignored) or SAME_*: the total padding that
  // gives the output size, never negative (a larger output is filled with
  // the bias past the last contribution), split as the spec says (the
  // begin gets the smaller half only with SAME_UPPER). onnxruntime does
  // the same; the ONNX reference evaluator keeps explicit pads instead.
  if (!oshape.empty() || same) {
    for (size_t i = 0; i < nsp; ++i) {
      if (!oshape.empty()) g.out[i] = oshape[i];
      else if (in[i] >= 0) g.out[i] = in[i] * g.stride[i];
      if (in[i] < 0) continue;
      const int64_t total = std::max<int64_t>(0, natural(i) - g.out[i]);
      g.pad_begin[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
    return g;
  }
  std::vector<int64_t> pads(2 * nsp, 0);
  if (ap == "NOTSET" || ap.empty()) pads = ints_or(n, "pads", 2 * nsp, 0);
  for (int64_t p : pads)
    if (p < 0) fail(n, ErrorKind::kModelFormat, "pads must be >= 0");
  for (size_t i = 0; i < nsp; ++i) {
    g.pad_begin[i] = pads[i];
    if (in[i] >= 0) g.out[i] = natural(i) - pads[i] - pads[nsp + i];
  }
  return g;
}

namespace {

void conv_transpose_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("ConvTranspose needs a float input, got ") + dtype_name(dt));
  if (!(c.input_dtype(1) == dt))
    c.fail(ErrorKind::kDType, std::string("weights dtype ") + dtype_name(c.input_dtype(1)) +
                                  " differs from the input dtype " + dtype_name(dt));
  if (c.has_input(2) && !(c.input_dtype(2) == dt))
    c.fail(ErrorKind::kDType, std::string("bias dtype ") + dtype_name(c.input_dtype(2)) +
                                  " differs from the input dtype " + dtype_name(dt));
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, dt);
  const SymShape& xs = c.input_shape(0);
  const SymShape& ws = c.input_shape(1);
  if (!(xs.size() >= 3 && ws.size() == xs.size()))
    c.fail(ErrorKind::kShape,
           "input " + sym_shape_str(xs) + " and weights " + sym_shape_str(ws) + " do not fit a ConvTranspose");
  const int64_t group = n.attr_int("group", 1);
  if (!(group >= 1)) c.fail(ErrorKind::kModelFormat, "group must be >= 1");
  if (xs[1].known() && ws[0].known())
    if (!(xs[1].value == ws[0].value))
      c.fail(ErrorKind::kShape,
             "input has " + std::to_string(xs[1].value) + " channels, weights " + std::to_string(ws[0].value));
  if (xs[1].known()) if (!(xs[1].value % group == 0))
      c.fail(ErrorKind::kShape, "input channels not divisible by group");
  const size_t nsp = xs.size() - 2;
  std::vector<int64_t> in, wk;
  bool wk_known = true;
  for (size_t i = 0; i < nsp; ++i) {
    in.push_back(xs[2 + i].known() ? xs[2 + i].value : -1);
    wk_known = wk_known && ws[2 + i].known();
    wk.push_back(ws[2 + i].known() ? ws[2 + i].value : 1);
  }
  SymShape out{xs[0], ws[1].known() ? Dim(ws[1].value * group) : Dim()};
  if (!wk_known && !n.has_attr("kernel_shape")) {
    out.resize(xs.size());
    return c.set_output(0, dt, out);
  }
  const DeconvGeometry g = deconv_geometry(n, in, wk);
  for (size_t i = 0; i < nsp; ++i) {
    if (g.out[i] >= 0) out.push_back(Dim(g.out[i]));
    else out.push_back(Dim());
    if (g.out[i] >= 0) if (!(g.out[i] > 0))
        c.fail(ErrorKind::kShape, "the output would be empty or negative in size");
  }
  c.set_output(0, dt, out);
}

// Reference: zero (or bias) the output, then scatter every input element
// through the kernel. Threaded over (n, output channel): each thread owns
// its output planes.
class ConvTransposeReference final : public Kernel {
 public:
  explicit ConvTransposeReference(const KernelBuildInfo& info) : s_(deconv_spec(info)) {
    const size_t off = 3 - s_.nsp;
    for (size_t i = 0; i < s_.nsp; ++i) {
      in_[off + i] = s_.x[2 + i];
      out_[off + i] = s_.y[2 + i];
      k_[off + i] = s_.kernel[i];
      st_[off + i] = s_.stride[i];
      d_[off + i] = s_.dilation[i];
      p_[off + i] = s_.pad_begin[i];
    }
  }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    const T* w = ctx.inputs[1].as<T>();
    const T* b = s_.has_bias ? ctx.inputs[2].as<T>() : nullptr;
    T* y = ctx.outputs[0].as<T>();
    const int64_t N = s_.x[0], C = s_.x[1], M = s_.y[1], G = s_.group, Cg = C / G, Mg = M / G;
    const int64_t in_sz = in_[0] * in_[1] * in_[2], out_sz = out_[0] * out_[1] * out_[2];
    const int64_t k_sz = k_[0] * k_[1] * k_[2];
    parallel_for(N * M, ctx.num_threads, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const int64_t n = p / M, m = p % M, g = m / Mg, mm = m % Mg;
        T* yp = y + p * out_sz;
        std::fill(yp, yp + out_sz, b ? b[m] : T(0));
        for (int64_t cc = 0; cc < Cg; ++cc) {
          const int64_t c = g * Cg + cc;
          const T* xp = x + (n * C + c) * in_sz;
          const T* wp = w + (c * Mg + mm) * k_sz;
          for (int64_t i0 = 0; i0 < in_[0]; ++i0)
            for (int64_t k0 = 0; k0 < k_[0]; ++k0) {
              const int64_t o0 = i0 * st_[0] - p_[0] + k0 * d_[0];
              if (o0 < 0 || o0 >= out_[0]) continue;
              for (int64_t i1 = 0; i1 < in_[1]; ++i1)
                for (int64_t k1 = 0; k1 < k_[1]; ++k1) {
                  const int64_t o1 = i1 * st_[1] - p_[1] + k1 * d_[1];
                  if (o1 < 0 || o1 >= out_[1]) continue;
                  const T* xr = xp + (i0 * in_[1] + i1) * in_[2];
                  T* yr = yp + (o0 * out_[1] + o1) * out_[2];
                  const T* wr = wp + (k0 * k_[1] + k1) * k_[2];
                  for (int64_t k2 = 0; k2 < k_[2]; ++k2) {
                    const T wv = wr[k2];
                    for (int64_t i2 = 0; i2 < in_[2]; ++i2) {
                      const int64_t o2 = i2 * st_[2] - p_[2] + k2 * d_[2];
                      if (o2 >= 0 && o2 < out_[2]) yr[o2] += xr[i2] * wv;
                    }
                  }
                }
            }
        }
      }
    });
  }

  DeconvSpec s_;
  int64_t in_[3] = {1, 1, 1}, out_[3] = {1, 1, 1}, k_[3] = {1, 1, 1}, st_[3] = {1, 1, 1}, d_[3] = {1, 1, 1},
          p_[3] = {0, 0, 0};
};

bool reference_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = std::string("reference ConvTranspose supports float32/float64, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

}  // namespace

DeconvSpec deconv_spec(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  DeconvSpec s;
  s.x = info.input_shape(0);
  s.w = info.input_shape(1);
  s.y = info.output_shape(0);
  if (s.x.size() < 3 || s.x.size() > 5 || s.w.size() != s.x.size())
    info.fail(ErrorKind::kShape, "input " + shape_str(s.x) + " and weights " + shape_str(s.w) +
                                     " do not fit a ConvTranspose with 1-3 spatial dims");
  s.nsp = s.x.size() - 2;
  s.group = n.attr_int("group", 1);
  if (s.group < 1 || s.x[1] != s.w[0] || s.x[1] % s.group != 0)
    info.fail(ErrorKind::kShape, "input " + shape_str(s.x) + ", weights " + shape_str(s.w) + " and group " +
                                     std::to_string(s.group) + " do not fit");
  std::vector<int64_t> in(s.x.begin() + 2, s.x.end()), wk(s.w.begin() + 2, s.w.end());
  DeconvGeometry g = deconv_geometry(n, in, wk);
  if (g.kernel != wk) info.fail(ErrorKind::kShape, "kernel_shape differs from the weights' spatial dims");
  Shape expect{s.x[0], s.w[1] * s.group};
  expect.insert(expect.end(), g.out.begin(), g.out.end());
  if (expect != s.y)
    info.fail(ErrorKind::kShape, "output shape " + shape_str(s.y) + " differs from the expected " + shape_str(expect));
  s.kernel = g.kernel;
  s.stride = g.stride;
  s.dilation = g.dilation;
  s.pad_begin = g.pad_begin;
  for (size_t i = 0; i < s.nsp; ++i)
    s.pad_end.push_back(s.stride[i] * (in[i] - 1) + (s.kernel[i] - 1) * s.dilation[i] + 1 - s.pad_begin[i] - g.out[i]);
  s.has_bias = info.has_input(2);
  if (s.has_bias && info.input_shape(2) != Shape{s.y[1]})
    info.fail(ErrorKind::kShape, "bias must have shape [" + std::to_string(s.y[1]) + "], got " +
                                     shape_str(info.input_shape(2)));
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != info.input_dtype(0))
      info.fail(ErrorKind::kDType, "all inputs must have the same dtype");
  return s;
}

TWINFER_REGISTER_SCHEMA("ConvTranspose", conv_transpose_infer);
TWINFER_REGISTER_KERNEL("ConvTranspose", Backend::kCPU, 0, reference_supports, make_kernel<ConvTransposeReference>);

}  // namespace twinfer::vision
