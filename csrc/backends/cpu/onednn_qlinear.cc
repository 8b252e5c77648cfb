#include "backends/cpu/onednn_qlinear.h"

namespace twinfer::quant {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

dnnl::memory::desc vec_desc(int64_t n, dt type) { return dnnl::memory::desc({n}, type, tag::a); }

}  // namespace

dnnl::primitive_attr qlinear_attr(const QLinearParams& p, int weight_mask) {
  dnnl::primitive_attr attr = onednn::base_attr();
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, weight_mask);
  if (p.x_scale_runtime) attr.set_scales_mask(DNNL_ARG_SRC, 0);
  if (p.x_zero != 0 || p.x_zero_runtime) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
  if (p.quantized_out) {
    attr.set_scales_mask(DNNL_ARG_DST, 0);
    if (p.y_zero != 0) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
  }
  dnnl::post_ops po;
  onednn::append_activation(po, p.act);
  attr.set_post_ops(po);
  return attr;
}

void add_qlinear_args(const QLinearParams& p, std::unordered_map<int, dnnl::memory>& args, const float* x_scale,
                      const int32_t* x_zero) {
  const dnnl::engine& eng = onednn::engine();
  auto mem = [&](const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, eng, const_cast<void*>(ptr));
  };
  args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS] =
      mem(vec_desc(static_cast<int64_t>(p.scales.size()), dt::f32), p.scales.data());
  if (p.x_scale_runtime) args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC] = mem(vec_desc(1, dt::f32), x_scale);
  if (p.x_zero_runtime)
    args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = mem(vec_desc(1, dt::s32), x_zero);
  else if (p.x_zero != 0)
    args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = mem(vec_desc(1, dt::s32), &p.x_zero);
  if (p.quantized_out) {
    args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST] = mem(vec_desc(1, dt::f32), &p.y_scale);
    if (p.y_zero != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = mem(vec_desc(1, dt::s32), &p.y_zero);
  }
}

dnnl::primitive_attr qlinear_token_attr(const QLinearParams& p, int64_t m, int64_t n) {
  dnnl::primitive_attr attr = onednn::base_attr();
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 2);  // per N of [1, K, N]
  if (p.quantized_out) {
    attr.set_scales_mask(DNNL_ARG_DST, 0);
    if (p.y_zero != 0) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
  }
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_mul, dnnl::memory::desc({1, m, 1}, dt::f32, tag::abc));
  if (!p.bias.empty()) po.append_binary(dnnl::algorithm::binary_add, dnnl::memory::desc({1, 1, n}, dt::f32, tag::abc));
  onednn::append_activation(po, p.act);
  attr.set_post_ops(po);
  return attr;
}

void add_qlinear_token_args(const QLinearParams& p, const float* row_scales, int64_t m, int64_t n,
                            std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::engine& eng = onednn::engine();
  auto mem = [&](const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, eng, const_cast<void*>(ptr));
  };
  args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS] =
      mem(vec_desc(static_cast<int64_t>(p.scales.size()), dt::f32), p.scales.data());
  args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] =
      mem(dnnl::memory::desc({1, m, 1}, dt::f32, tag::abc), row_scales);
  if (!p.bias.empty())
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] =
        mem(dnnl::memory::desc({1, 1, n}, dt::f32, tag::abc), p.bias.data());
  if (p.quantized_out) {
    args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST] = mem(vec_desc(1, dt::f32), &p.y_scale);
    if (p.y_zero != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = mem(vec_desc(1, dt::s32), &p.y_zero);
  }
}

}  // namespace twinfer::quant
