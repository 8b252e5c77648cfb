// Window generators and the mel filter bank (opset 17):
//   HannWindow(size)     w[n] = sin^2(pi n / N)
//   HammingWindow(size)  w[n] = 25/46 - 21/46 cos(2 pi n / N)
//   BlackmanWindow(size) w[n] = 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
// with N = size when periodic (the default), size - 1 otherwise; output of
// `output_datatype` (an ONNX type code, default float).
//   MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
//   upper_edge_hertz) -> [dft_length / 2 + 1, num_mel_bins] triangular filters
// on the mel scale (mel = 2595 log10(1 + hz / 700)), bin edges placed as the
// ONNX reference places them.
// Values are computed in double and converted as Cast would.
#include <cmath>
#include <cstring>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::signal {
namespace {

using tensor::view_scalar_int;
constexpr unsigned kWindowTypes = ew::kNumericTypes;

template <typename Ctx>
DType output_dtype(const Ctx& c) {
  const int64_t code = c.node().attr_int("output_datatype", 1);
  const DType dt = dtype_from_onnx(static_cast<int32_t>(code));
  if (!ew::in_typeset(kWindowTypes, dt))
    c.fail(ErrorKind::kDType, "output_datatype " + std::to_string(code) + " is not a supported numeric type");
  return dt;
}

void store_doubles(const std::vector<double>& v, const TensorView& y) {
  ew::dispatch_typeset<kWindowTypes>(y.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = y.as<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = ew::cast_value<T>(v[i]);
  });
}

// ---- windows -------------------------------------------------------------------

enum class Window { kHann, kHamming, kBlackman };

template <Window W>
void window_infer(InferContext& c) {
  const DType dt = output_dtype(c);
  const DType st = c.input_dtype(0);
  if (!(st == DType::kInt32 || st == DType::kInt64)) c.fail(ErrorKind::kDType, "size must be int32/int64");
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).empty() || (c.input_shape(0).size() == 1 && c.input_shape(0)[0] == Dim(1))))
      c.fail(ErrorKind::kShape, "size must be a scalar");
  Dim n;
  if (const Tensor* t = c.input_constant(0)) {
    const int64_t v = view_scalar_int(t->view());
    if (!(v >= 0)) c.fail(ErrorKind::kInvalidArgument, "size must be >= 0, got " + std::to_string(v));
    n = Dim(v);
  }
  c.set_output(0, dt, SymShape{n});
}

template <Window W>
class WindowKernel final : public Kernel {
 public:
  explicit WindowKernel(const KernelBuildInfo& info) : periodic_(info.node().attr_int("periodic", 1) != 0) {}
  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    const int64_t size = y.numel();
    const double big_n = static_cast<double>(periodic_ ? size : size - 1);
    std::vector<double> v(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      const double n = static_cast<double>(i);
      // The reference's order of operations, so values that round to an
      // integer output (the symmetric windows' peak of 1) round alike.
      if constexpr (W == Window::kHann) {
        const double s = std::sin(n * M_PI / big_n);
        v[i] = s * s;
      } else if constexpr (W == Window::kHamming) {
        const double alpha = 25.0 / 46.0;
        v[i] = alpha - std::cos(n * M_PI * 2.0 / big_n) * (1.0 - alpha);
      } else {
        double w = std::cos(n * (M_PI * 2.0) / big_n) * -0.5;
        w += std::cos(n * (M_PI * 4.0) / big_n) * 0.08;
        v[i] = w + 0.42;
      }
    }
    store_doubles(v, y);
  }

 private:
  bool periodic_;
};

// ---- MelWeightMatrix -----------------------------------------------------------------

double scalar_double(const TensorView& t) {
  double v = 0;
  ew::dispatch_typeset<ew::kNumericTypes>(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(ew::load(*t.as<const T>()));
  });
  return v;
}

void mel_infer(InferContext& c) {
  const DType dt = output_dtype(c);
  Dim rows, cols;
  if (const Tensor* t = c.input_constant(0)) {
    const int64_t m = view_scalar_int(t->view());
    if (!(m >= 1)) c.fail(ErrorKind::kInvalidArgument, "num_mel_bins must be >= 1");
    cols = Dim(m);
  }
  if (const Tensor* t = c.input_constant(1)) {
    const int64_t n = view_scalar_int(t->view());
    if (!(n >= 1)) c.fail(ErrorKind::kInvalidArgument, "dft_length must be >= 1");
    rows = Dim(n / 2 + 1);
  }
  c.set_output(0, dt, SymShape{rows, cols});
}

class MelKernel final : public Kernel {
 public:
  explicit MelKernel(const KernelBuildInfo& info) : node_(info.node().name) {}
  void run(KernelContext& ctx) const override {
    const int64_t mel = view_scalar_int(ctx.inputs[0]);
    const int64_t dft = view_scalar_int(ctx.inputs[1]);
    const int64_t rate = view_scalar_int(ctx.inputs[2]);
    const double lo = scalar_double(ctx.inputs[3]), hi = scalar_double(ctx.inputs[4]);
    if (rate <= 0 || lo < 0 || hi < lo)
      throw Error(ErrorKind::kInvalidArgument, "needs sample_rate > 0 and 0 <= lower_edge_hertz <= upper_edge_hertz",
                  node_, "MelWeightMatrix");
    const TensorView& y = ctx.outputs[0];
    const int64_t rows = dft / 2 + 1;
    if (y.shape != Shape{rows, mel})
      throw Error(ErrorKind::kInvalidArgument, "inputs differ from the planned output", node_, "MelWeightMatrix");
    const double lo_mel = 2595.0 * std::log10(1.0 + lo / 700.0), hi_mel = 2595.0 * std::log10(1.0 + hi / 700.0);
    const double step = (hi_mel - lo_mel) / static_cast<double>(mel + 2);
    std::vector<int64_t> edge(static_cast<size_t>(mel + 2));
    for (int64_t i = 0; i < mel + 2; ++i) {
      const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595.0) - 1.0);
      edge[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate)));
    }
    std::vector<double> v(static_cast<size_t>(rows * mel), 0.0);
    auto put = [&](int64_t j, int64_t i, double x) {
      if (j >= 0 && j < rows) v[j * mel + i] = x;
    };
    for (int64_t i = 0; i < mel; ++i) {
      const int64_t l = edge[i], c = edge[i + 1], h = edge[i + 2];
      if (c == l) {
        put(c, i, 1.0);
      } else {
        for (int64_t j = l; j <= c; ++j) put(j, i, static_cast<double>(j - l) / static_cast<double>(c - l));
      }
      if (h > c)
        for (int64_t j = c; j < h; ++j) put(j, i, static_cast<double>(h - j) / static_cast<double>(h - c));
    }
    store_doubles(v, y);
  }

 private:
  std::string node_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("HannWindow", window_infer<Window::kHann>);
TWINFER_REGISTER_KERNEL("HannWindow", Backend::kCPU, 0, nullptr, make_kernel<WindowKernel<Window::kHann>>);
TWINFER_REGISTER_SCHEMA("HammingWindow", window_infer<Window::kHamming>);
TWINFER_REGISTER_KERNEL("HammingWindow", Backend::kCPU, 0, nullptr, make_kernel<WindowKernel<Window::kHamming>>);
TWINFER_REGISTER_SCHEMA("BlackmanWindow", window_infer<Window::kBlackman>);
TWINFER_REGISTER_KERNEL("BlackmanWindow", Backend::kCPU, 0, nullptr, make_kernel<WindowKernel<Window::kBlackman>>);
TWINFER_REGISTER_SCHEMA("MelWeightMatrix", mel_infer);
TWINFER_REGISTER_KERNEL("MelWeightMatrix", Backend::kCPU, 0, nullptr, make_kernel<MelKernel>);

}  // namespace twinfer::signal
