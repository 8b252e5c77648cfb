// DFT and STFT. Signals carry a last dim of 1 (real) or 2 (complex: re, im).
//
// DFT(input, dft_length?, axis?) along `axis` (an attribute, default 1, before
// opset 20; an optional scalar input, default -2, since). The line is cut or
// zero-padded to dft_length (default: its length). inverse=1 divides by n.
// onesided=1 keeps bins 0..n/2 of a forward transform; with inverse=1 it is
// the inverse real transform (numpy.fft.irfft): the input holds bins 0..n/2 of
// a Hermitian spectrum, n defaults to 2 * (m - 1), and the output is real
// (last dim 1).
//
// STFT(signal [B, L, 1|2], frame_step, window?, frame_length?): frames of
// frame_length (the window's length when given) every frame_step samples,
// weighted by the window, each transformed; output [B, frames, bins, 2] with
// frames = 1 + (L - frame_length) / frame_step and bins = frame_length / 2 + 1
// when onesided (the default), else frame_length.
//
// The transforms are direct sums over precomputed twiddles in double
// precision (O(n^2) per line), their configuration and per-value arithmetic
// shared with the CUDA kernels (dft_plan.h).
#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/signal/dft_plan.h"

namespace twinfer::signal {
namespace {

constexpr unsigned kSignalTypes = ew::kFloatTypes;

// A line held in two arrays, for dft_bin / irfft_sample.
struct Line {
  const double* xr;
  const double* xi;
  void operator()(int64_t j, double* r, double* i) const {
    *r = xr[j];
    *i = xi[j];
  }
};

void dft_line(const double* xr, const double* xi, int64_t m, int64_t n, int64_t bins, int sign, const Twiddles& tw,
              double* re, double* im) {
  for (int64_t k = 0; k < bins; ++k) dft_bin(Line{xr, xi}, m, n, k, sign, tw.c.data(), tw.s.data(), re + k, im + k);
}

void irfft_line(const double* xr, const double* xi, int64_t m, int64_t n, const Twiddles& tw, double* out) {
  for (int64_t t = 0; t < n; ++t) out[t] = irfft_sample(Line{xr, xi}, m, n, t, tw.c.data(), tw.s.data());
}

void dft_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kSignalTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("DFT does not support ") + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  SymShape s = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  if (!(r >= 2)) c.fail(ErrorKind::kShape, "input " + sym_shape_str(s) + " must have rank >= 2");
  if (!(!s.back().known() || s.back().value == 1 || s.back().value == 2))
    c.fail(ErrorKind::kShape, "input " + sym_shape_str(s) + " must end in 1 (real) or 2 (complex)");
  bool known;
  const DftConfig d = dft_config(c, r, c.has_input(1) ? c.input_constant(1) : nullptr,
                                 c.has_input(2) ? c.input_constant(2) : nullptr, &known);
  s.back() = Dim(d.inverse && d.onesided ? 1 : 2);
  if (!known) {
    if (c.opset() >= 20 && c.has_input(2) && !c.input_constant(2)) {
      SymShape u(s.size());
      u.back() = s.back();
      return c.set_output(0, dt, u);
    }
    s[d.axis] = Dim();
    return c.set_output(0, dt, s);
  }
  if (s[d.axis].known() || d.n > 0) {
    const int64_t n = dft_points(d, s[d.axis].known() ? s[d.axis].value : 0);
    if (!(n >= 1)) c.fail(ErrorKind::kInvalidArgument, "the transform has no points");
    s[d.axis] = Dim(!d.inverse && d.onesided ? n / 2 + 1 : n);
  } else {
    s[d.axis] = Dim();
  }
  c.set_output(0, dt, s);
}

class DftKernel final : public Kernel {
 public:
  explicit DftKernel(const KernelBuildInfo& info) : g_(dft_geometry(info)) {}

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<kSignalTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      go<T>(ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), ctx.num_threads);
    });
  }

 private:
  template <typename T>
  void go(const T* x, T* y, int threads) const {
    using C = ew::compute_t<T>;
    const Twiddles tw(g_.n);
    const bool irfft = g_.d.inverse && g_.d.onesided;
    const int64_t cout = irfft ? 1 : 2;
    const double scale = g_.d.inverse ? 1.0 / static_cast<double>(g_.n) : 1.0;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, g_.n));
    parallel_for(g_.outer * g_.inner, threads, grain, [&](int64_t b, int64_t e) {
      std::vector<double> xr(g_.m), xi(g_.m), re(std::max(g_.n, g_.bins)), im(std::max(g_.n, g_.bins));
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / g_.inner, j = t % g_.inner;
        for (int64_t i = 0; i < g_.m; ++i) {
          const T* p = x + ((o * g_.m + i) * g_.inner + j) * g_.cin;
          xr[i] = static_cast<double>(ew::load(p[0]));
          xi[i] = g_.cin == 2 ? static_cast<double>(ew::load(p[1])) : 0.0;
        }
        if (irfft) {
          irfft_line(xr.data(), xi.data(), g_.m, g_.n, tw, re.data());
        } else {
          dft_line(xr.data(), xi.data(), g_.m, g_.n, g_.bins, g_.d.inverse ? 1 : -1, tw, re.data(), im.data());
        }
        for (int64_t k = 0; k < g_.bins; ++k) {
          T* q = y + ((o * g_.bins + k) * g_.inner + j) * cout;
          if (irfft) {
            q[0] = ew::store<T>(static_cast<C>(re[k]));
          } else {
            q[0] = ew::store<T>(static_cast<C>(re[k] * scale));
            q[1] = ew::store<T>(static_cast<C>(im[k] * scale));
          }
        }
      }
    });
  }

  DftGeometry g_;
};

bool dft_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kSignalTypes, why);
}

// ---- STFT ----------------------------------------------------------------------

void stft_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kSignalTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("STFT does not support ") + dtype_name(dt));
  if (c.has_input(2)) if (!(c.input_dtype(2) == dt)) c.fail(ErrorKind::kDType, "window must have the signal's dtype");
  Dim batch, len, wl;
  if (c.input_has_shape(0)) {
    const SymShape& s = c.input_shape(0);
    // [batch, length] is a real signal too: onnxruntime takes it, and
    // PyTorch's exporter writes it for torch.stft (Kokoro's vocoder).
    if (!(s.size() == 3 || s.size() == 2))
      c.fail(ErrorKind::kShape, "signal " + sym_shape_str(s) + " must be [batch, length, 1 or 2] or [batch, length]");
    if (!(s.size() == 2 || !s[2].known() || s[2].value == 1 || s[2].value == 2))
      c.fail(ErrorKind::kShape, "signal " + sym_shape_str(s) + " must end in 1 or 2");
    batch = s[0];
    len = s[1];
  }
  if (c.has_input(2) && c.input_has_shape(2)) {
    if (!(c.input_shape(2).size() == 1)) c.fail(ErrorKind::kShape, "window must be 1-D");
    wl = c.input_shape(2)[0];
  }
  const StftConfig cfg =
      stft_config(c, c.input_constant(1), c.has_input(3) ? c.input_constant(3) : nullptr, wl, len);
  const bool onesided = c.node().attr_int("onesided", 1) != 0;
  Dim frames, bins;
  if (cfg.length > 0) bins = Dim(onesided ? cfg.length / 2 + 1 : cfg.length);
  if (cfg.length > 0 && cfg.step > 0 && len.known()) frames = Dim(1 + (len.value - cfg.length) / cfg.step);
  c.set_output(0, dt, SymShape{batch, frames, bins, Dim(2)});
}

class StftKernel final : public Kernel {
 public:
  explicit StftKernel(const KernelBuildInfo& info) : g_(stft_geometry(info)) {}

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<kSignalTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* w = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const T>() : nullptr;
      go<T>(ctx.inputs[0].as<const T>(), w, ctx.outputs[0].as<T>(), ctx.num_threads);
    });
  }

 private:
  template <typename T>
  void go(const T* x, const T* w, T* y, int threads) const {
    using C = ew::compute_t<T>;
    const Twiddles tw(g_.n);
    parallel_for(g_.batch * g_.frames, threads, 1, [&](int64_t b, int64_t e) {
      std::vector<double> xr(g_.n), xi(g_.n), re(g_.bins), im(g_.bins);
      for (int64_t t = b; t < e; ++t) {
        const int64_t bb = t / g_.frames, f = t % g_.frames;
        for (int64_t i = 0; i < g_.n; ++i) {
          const int64_t pos = f * g_.step + i;
          const double wv = w ? static_cast<double>(ew::load(w[i])) : 1.0;
          if (pos < g_.len) {
            const T* p = x + (bb * g_.len + pos) * g_.cin;
            xr[i] = static_cast<double>(ew::load(p[0])) * wv;
            xi[i] = g_.cin == 2 ? static_cast<double>(ew::load(p[1])) * wv : 0.0;
          } else {
            xr[i] = xi[i] = 0.0;
          }
        }
        dft_line(xr.data(), xi.data(), g_.n, g_.n, g_.bins, -1, tw, re.data(), im.data());
        T* q = y + t * g_.bins * 2;
        for (int64_t k = 0; k < g_.bins; ++k) {
          q[2 * k] = ew::store<T>(static_cast<C>(re[k]));
          q[2 * k + 1] = ew::store<T>(static_cast<C>(im[k]));
        }
      }
    });
  }

  StftGeometry g_;
};

bool stft_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kSignalTypes, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("DFT", dft_infer);
TWINFER_REGISTER_KERNEL("DFT", Backend::kCPU, 0, dft_supports, make_kernel<DftKernel>);
TWINFER_REGISTER_SCHEMA("STFT", stft_infer);
TWINFER_REGISTER_KERNEL("STFT", Backend::kCPU, 0, stft_supports, make_kernel<StftKernel>);

}  // namespace twinfer::signal
