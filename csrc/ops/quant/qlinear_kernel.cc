#include "ops/quant/qlinear_kernel.h"

#include "ops/quant/quant_util.h"

namespace twinfer::quant {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

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

dnnl::memory::desc vec_desc(int64_t n, dt type) { return dnnl::memory::desc({n}, type, tag::a); }

}  // namespace

QLinearParams read_qlinear_params(const KernelBuildInfo& info, int64_t channels) {
  QLinearParams p;
  p.x_type = info.input_dtype(kQX);
  if (p.x_type != DType::kUInt8 && p.x_type != DType::kInt8)
    info.fail(ErrorKind::kDType, std::string("x must be uint8 or int8, got ") + dtype_name(p.x_type));
  if (info.input_dtype(kQW) != DType::kInt8)
    info.fail(ErrorKind::kDType, std::string("w must be int8, got ") + dtype_name(info.input_dtype(kQW)));
  need_const(info, kQW, "w");
  const float xs = one_float(info, kQXScale, "x_scale");
  if (info.has_input(kQXZero)) p.x_zero = one_int(info, kQXZero, p.x_type, "x_zero_point");
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

dnnl::primitive_attr qlinear_attr(const QLinearParams& p, int weight_mask) {
  dnnl::primitive_attr attr = onednn::base_attr();
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, weight_mask);
  if (p.x_zero != 0) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
  if (p.quantized_out) {
    attr.set_scales_mask(DNNL_ARG_DST, 0);
    if (p.y_zero != 0) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
  }
  dnnl::post_ops po;
  onednn::append_activation(po, p.act);
  attr.set_post_ops(po);
  return attr;
}

void add_qlinear_args(const QLinearParams& p, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::engine& eng = onednn::engine();
  auto mem = [&](const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, eng, const_cast<void*>(ptr));
  };
  args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS] =
      mem(vec_desc(static_cast<int64_t>(p.scales.size()), dt::f32), p.scales.data());
  if (p.x_zero != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = mem(vec_desc(1, dt::s32), &p.x_zero);
  if (p.quantized_out) {
    args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST] = mem(vec_desc(1, dt::f32), &p.y_scale);
    if (p.y_zero != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = mem(vec_desc(1, dt::s32), &p.y_zero);
  }
}

}  // namespace twinfer::quant
