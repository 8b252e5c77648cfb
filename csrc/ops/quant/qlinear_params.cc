#include "ops/quant/qlinear_params.h"

#include "ops/quant/quant_util.h"

namespace twinfer::quant {

namespace {

const Tensor& need_const(const KernelBuildInfo& info, size_t i, const char* what) {
  const Tensor* t = info.input_constant(i);
  if (!t) info.fail(ErrorKind::kUnsupportedOp, std::string(what) + " must be a constant");
  return *t;
}

float one_float(const KernelBuildInfo& info, size_t i, const char* what) {
  const Tensor& t = need_const(info, i, what);
  if (t.dtype() != DType::kFloat32 || t.numel() != 1)
    info.fail(ErrorKind::kDType, std::string(what) + " must be one float32 value");
  return *t.data_as<float>();
}

int32_t one_int(const KernelBuildInfo& info, size_t i, DType type, const char* what) {
  const Tensor& t = need_const(info, i, what);
  if (t.dtype() != type || t.numel() != 1)
    info.fail(ErrorKind::kDType, std::string(what) + " must be one " + dtype_name(type) + " value");
  int32_t v = 0;
  load_int32s(t.view(), &v);
  return v;
}

std::vector<float> per_channel(const KernelBuildInfo& info, size_t i, int64_t channels, const char* what) {
  const Tensor& t = need_const(info, i, what);
  if (t.dtype() != DType::kFloat32 || (t.numel() != 1 && t.numel() != channels))
    info.fail(ErrorKind::kShape, std::string(what) + " must be float32 with 1 or " + std::to_string(channels) +
                                     " elements, got " + dtype_name(t.dtype()) + " " + shape_str(t.shape()));
  const float* p = t.data_as<float>();
  std::vector<float> v(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) v[c] = p[t.numel() == 1 ? 0 : c];
  return v;
}

// A run-time x_scale / x_zero_point: one element of the given type.
void check_runtime_one(const KernelBuildInfo& info, size_t i, DType type, const char* what) {
  if (info.input_dtype(i) != type || shape_numel(info.input_shape(i)) != 1)
    info.fail(ErrorKind::kDType, std::string(what) + " must be one " + dtype_name(type) + " value, got " +
                                     dtype_name(info.input_dtype(i)) + " " + shape_str(info.input_shape(i)));
}

}  // namespace

QLinearParams read_qlinear_params(const KernelBuildInfo& info, int64_t channels, bool allow_runtime_x) {
  QLinearParams p;
  p.x_type = info.input_dtype(kQX);
  p.x_per_token = info.node().attr_int("x_per_token", 0) != 0;
  const bool float_x = p.x_type == DType::kFloat32 || p.x_type == DType::kFloat16 || p.x_type == DType::kBFloat16;
  if (p.x_per_token ? !float_x : (p.x_type != DType::kUInt8 && p.x_type != DType::kInt8))
    info.fail(ErrorKind::kDType, std::string("x must be ") +
                                     (p.x_per_token ? "float32, float16 or bfloat16" : "uint8 or int8") + ", got " +
                                     dtype_name(p.x_type));
  if (info.input_dtype(kQW) != DType::kInt8)
    info.fail(ErrorKind::kDType, std::string("w must be int8, got ") + dtype_name(info.input_dtype(kQW)));
  need_const(info, kQW, "w");
  // Per token, x's scale is a row's own and is applied at run time; a
  // run-time x_scale (allow_runtime_x) joins w_scale in oneDNN's epilogue.
  if (allow_runtime_x && !p.x_per_token) {
    p.x_scale_runtime = info.has_input(kQXScale) && !info.input_constant(kQXScale);
    p.x_zero_runtime = info.has_input(kQXZero) && !info.input_constant(kQXZero);
    if (p.x_scale_runtime) check_runtime_one(info, kQXScale, DType::kFloat32, "x_scale");
    if (p.x_zero_runtime) check_runtime_one(info, kQXZero, p.x_type, "x_zero_point");
  }
  const float xs = p.x_per_token || p.x_scale_runtime ? 1.f : one_float(info, kQXScale, "x_scale");
  if (!p.x_per_token && !p.x_zero_runtime && info.has_input(kQXZero))
    p.x_zero = one_int(info, kQXZero, p.x_type, "x_zero_point");
  if (info.has_input(kQXSmooth)) {
    if (!p.x_per_token) info.fail(ErrorKind::kModelFormat, "x_smooth needs x_per_token = 1");
    const Shape& xs_shape = info.input_shape(kQX);
    const int64_t k = xs_shape.empty() ? 1 : xs_shape.back();
    const Tensor& t = need_const(info, kQXSmooth, "x_smooth");
    if (t.dtype() != DType::kFloat32 || t.numel() != k)
      info.fail(ErrorKind::kShape, "x_smooth must be float32 with " + std::to_string(k) + " elements (x's last dim), got " +
                                       dtype_name(t.dtype()) + " " + shape_str(t.shape()));
    p.x_smooth.assign(t.data_as<float>(), t.data_as<float>() + k);
  }
  p.scales = per_channel(info, kQWScale, channels, "w_scale");
  for (float& s : p.scales) s *= xs;
  if (info.has_input(kQBias)) p.bias = per_channel(info, kQBias, channels, "bias");
  p.quantized_out = info.has_input(kQYScale);
  p.y_type = info.output(0).dtype;
  if (p.quantized_out) {
    p.y_scale = one_float(info, kQYScale, "y_scale");
    if (!info.has_input(kQYZero)) info.fail(ErrorKind::kModelFormat, "y_scale needs y_zero_point");
    p.y_zero = one_int(info, kQYZero, p.y_type, "y_zero_point");
  }
  p.act = nn::parse_activation(info.node());
  return p;
}

}  // namespace twinfer::quant
