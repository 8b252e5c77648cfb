#include <unordered_map>

#include "backends/cpu/onednn_matmul.h"

namespace twinfer::cpu::onednn {

namespace {
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::memory::desc strided_desc(const Shape& dims, const dnnl::memory::dims& strides) {
  if (strides.empty()) return plain_desc(dims);
  return dnnl::memory::desc(to_dims(dims), dt::f32, strides);
}

std::vector<float> scaled_copy(const void* p, int64_t n, float scale) {
  const float* f = static_cast<const float*>(p);
  std::vector<float> v(f, f + n);
  if (scale != 1.f)
    for (float& x : v) x *= scale;
  return v;
}
}  // namespace

MatmulCore::MatmulCore(MatmulDesc d, std::string node, std::string op)
    : d_(std::move(d)), node_(std::move(node)), op_(std::move(op)) {
  guarded(node_, op_, [&] {
    a_md_ = strided_desc(d_.a, d_.a_strides);
    b_md_ = strided_desc(d_.b, d_.b_strides);
    y_md_ = strided_desc(d_.y, d_.y_strides);
    if (!d_.bias.empty()) {
      bias_md_ = plain_desc(d_.bias);
      if (d_.bias_const) bias_copy_ = scaled_copy(d_.bias_const, shape_numel(d_.bias), d_.bias_scale);
    }
    if (!d_.add.empty()) {
      add_md_ = plain_desc(d_.add);
      if (d_.add_const) add_copy_ = scaled_copy(d_.add_const, shape_numel(d_.add), d_.add_scale);
    }
    runtime_alpha_ = d_.alpha != 1.f && !d_.b_const;
    if (d_.b_const && d_.alpha != 1.f) b_scaled_ = scaled_copy(d_.b_const, shape_numel(d_.b), d_.alpha);
    const Variant& v = variants_.get(current_threads(), [&] { return make_variant(); });
    declared_scratch_ = v.pad_bytes;
    impl_info_ = v.impl;
    b_scaled_ = {};  // packed now; later variants reorder from the packed copy
  });
}

MatmulCore::Variant MatmulCore::make_variant() const {
  Variant v;
  dnnl::primitive_attr attr = base_attr();
  if (runtime_alpha_) attr.set_scales_mask(DNNL_ARG_SRC, 0);
  dnnl::post_ops po;
  if (!d_.add.empty()) po.append_binary(dnnl::algorithm::binary_add, add_md_);
  if (d_.sum) po.append_sum(d_.sum_scale);
  append_activation(po, d_.act);
  attr.set_post_ops(po);
  const bool packed = d_.b_const != nullptr;
  dnnl::memory::desc w_md = packed ? dnnl::memory::desc(to_dims(d_.b), dt::f32, tag::any) : b_md_;
  dnnl::matmul::primitive_desc pd(engine(), a_md_, w_md, bias_md_, y_md_, attr);
  v.impl = pd.impl_info_str();
  v.prim = dnnl::matmul(pd);
  if (packed) {
    const void* src = b_scaled_.empty() ? d_.b_const : b_scaled_.data();
    // The model's own bytes are shared with other kernels' copies; a copy
    // scaled by alpha is this kernel's.
    v.weights = packed_.empty() ? packed_.init(b_md_, src, pd.weights_desc(), b_scaled_.empty() ? d_.b_owner : nullptr)
                                : packed_.get(pd.weights_desc());
  }
  v.pad_bytes = align_up(pd.scratchpad_desc().get_size());
  if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
  return v;
}

void MatmulCore::run(const KernelContext& ctx, const void* a, const void* b, const void* bias,
                     const void* add, void* y) const {
  guarded(node_, op_, [&] {
    ThreadScope threads(ctx.num_threads);
    const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
    const dnnl::engine& eng = engine();
    dnnl::stream s(eng);
    auto mem = [&](const dnnl::memory::desc& md, const void* p) {
      return dnnl::memory(md, eng, const_cast<void*>(p));
    };
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(a_md_, a)}, {DNNL_ARG_DST, mem(y_md_, y)}};
    args[DNNL_ARG_WEIGHTS] = d_.b_const ? v.weights : mem(b_md_, b);
    if (!d_.bias.empty()) args[DNNL_ARG_BIAS] = mem(bias_md_, d_.bias_const ? bias_copy_.data() : bias);
    if (!d_.add.empty())
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mem(add_md_, d_.add_const ? add_copy_.data() : add);
    if (runtime_alpha_)
      args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC] = mem(dnnl::memory::desc({1}, dt::f32, tag::a), &d_.alpha);
    if (v.pad_bytes) args[DNNL_ARG_SCRATCHPAD] = mem(v.pad_md, run_scratch(ctx, declared_scratch_, v.pad_bytes));
    v.prim.execute(s, args);
    s.wait();
  });
}

}  // namespace twinfer::cpu::onednn
