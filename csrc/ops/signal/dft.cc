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
// The CPU kernels transform with an FFT planned once per node (fft.h), in
// double precision: O(n log n) per line for any length. (They used the
// direct sums of dft_plan.h, O(n^2) per line, which the CUDA kernels still
// use: a 16000-sample spectrogram with 512-point frames took 20 ms against
// onnxruntime's 0.6 ms.)
#include <memory>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/signal/dft_plan.h"
#include "ops/signal/fft.h"

namespace twinfer::signal {
namespace {

constexpr unsigned kSignalTypes = ew::kFloatTypes;

// Lines per parallel task: about 4096 points of work each.
int64_t lines_per_task(int64_t n) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)); }

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
  explicit DftKernel(const KernelBuildInfo& info)
      : g_(dft_geometry(info)), plan_(std::make_shared<FftPlan>(g_.n, g_.d.inverse)) {}

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<kSignalTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      go<T>(ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), ctx.num_threads);
    });
  }

 private:
  // Per line: the m inputs cut or zero-padded to n points (for the inverse
  // real transform: bins 0..n/2, completed as a Hermitian spectrum, the
  // imaginary parts of bin 0 and n/2 dropped like numpy), one FFT, the first
  // `bins` values out.
  template <typename T>
  void go(const T* x, T* y, int threads) const {
    using C = ew::compute_t<T>;
    const int64_t n = g_.n;
    const bool irfft = g_.d.inverse && g_.d.onesided;
    const int64_t cout = irfft ? 1 : 2;
    const double scale = g_.d.inverse ? 1.0 / static_cast<double>(n) : 1.0;
    parallel_for(g_.outer * g_.inner, threads, lines_per_task(n), [&](int64_t b, int64_t e) {
      std::vector<Cpx> in(n), out(n), scratch(plan_->scratch_size());
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / g_.inner, j = t % g_.inner;
        auto read = [&](int64_t i) {
          const T* p = x + ((o * g_.m + i) * g_.inner + j) * g_.cin;
          return Cpx{static_cast<double>(ew::load(p[0])), g_.cin == 2 ? static_cast<double>(ew::load(p[1])) : 0.0};
        };
        std::fill(in.begin(), in.end(), Cpx{});
        if (irfft) {
          const int64_t have = std::min(g_.m, n / 2 + 1);
          for (int64_t k = 0; k < have; ++k) {
            Cpx v = read(k);
            if (k == 0 || 2 * k == n) v.im = 0.0;
            in[k] = v;
            if (k > 0) in[n - k] = Cpx{v.re, -v.im};
          }
        } else {
          for (int64_t i = 0; i < std::min(g_.m, n); ++i) in[i] = read(i);
        }
        plan_->run(in.data(), out.data(), scratch.data());
        for (int64_t k = 0; k < g_.bins; ++k) {
          T* q = y + ((o * g_.bins + k) * g_.inner + j) * cout;
          q[0] = ew::store<T>(static_cast<C>(out[k].re * scale));
          if (!irfft) q[1] = ew::store<T>(static_cast<C>(out[k].im * scale));
        }
      }
    });
  }

  DftGeometry g_;
  std::shared_ptr<const FftPlan> plan_;
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
  explicit StftKernel(const KernelBuildInfo& info)
      : g_(stft_geometry(info)), plan_(std::make_shared<FftPlan>(g_.n, false)) {}

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<kSignalTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* w = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const T>() : nullptr;
      go<T>(ctx.inputs[0].as<const T>(), w, ctx.outputs[0].as<T>(), ctx.num_threads);
    });
  }

 private:
  // Frames are numbered over batch x frames. A real signal's frames go two
  // at a time through one complex FFT (z = f1 + i f2, then
  // F1[k] = (Z[k] + conj(Z[-k])) / 2, F2[k] = (Z[k] - conj(Z[-k])) / 2i),
  // which halves the work; a complex signal's one at a time.
  template <typename T>
  void go(const T* x, const T* w, T* y, int threads) const {
    using C = ew::compute_t<T>;
    const int64_t n = g_.n, total = g_.batch * g_.frames;
    const int64_t per = g_.cin == 1 ? 2 : 1;  // frames per FFT
    const int64_t tasks = (total + per - 1) / per;
    parallel_for(tasks, threads, lines_per_task(n * per), [&](int64_t b, int64_t e) {
      std::vector<Cpx> in(n), out(n), scratch(plan_->scratch_size());
      std::vector<double> wv(n, 1.0);
      if (w)
        for (int64_t i = 0; i < n; ++i) wv[i] = static_cast<double>(ew::load(w[i]));
      // Sample i of frame t (window applied), zero past the signal's end.
      auto sample = [&](int64_t t, int64_t i, int part) {
        const int64_t bb = t / g_.frames, pos = (t % g_.frames) * g_.step + i;
        if (pos >= g_.len) return 0.0;
        return static_cast<double>(ew::load(x[(bb * g_.len + pos) * g_.cin + part])) * wv[i];
      };
      auto write = [&](int64_t t, int64_t k, double re, double im) {
        T* q = y + (t * g_.bins + k) * 2;
        q[0] = ew::store<T>(static_cast<C>(re));
        q[1] = ew::store<T>(static_cast<C>(im));
      };
      for (int64_t task = b; task < e; ++task) {
        const int64_t t1 = task * per;
        const bool two = per == 2 && t1 + 1 < total;
        for (int64_t i = 0; i < n; ++i)
          in[i] = Cpx{sample(t1, i, 0), g_.cin == 2 ? sample(t1, i, 1) : (two ? sample(t1 + 1, i, 0) : 0.0)};
        plan_->run(in.data(), out.data(), scratch.data());
        if (!two) {
          for (int64_t k = 0; k < g_.bins; ++k) write(t1, k, out[k].re, out[k].im);
          continue;
        }
        for (int64_t k = 0; k < g_.bins; ++k) {
          const Cpx z = out[k], zc = out[(n - k) % n];  // Z[k], Z[-k]
          write(t1, k, 0.5 * (z.re + zc.re), 0.5 * (z.im - zc.im));
          write(t1 + 1, k, 0.5 * (z.im + zc.im), -0.5 * (z.re - zc.re));
        }
      }
    });
  }

  StftGeometry g_;
  std::shared_ptr<const FftPlan> plan_;
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
