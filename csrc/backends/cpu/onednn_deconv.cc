// ConvTranspose on oneDNN's deconvolution, float32.
//
// Constant weights are reordered once into the layout the primitive asks
// for (format_tag::any); ONNX's [C, M/group, k...] weights are oneDNN's
// "iohw" (giohw with groups) plain layout, so no transpose is needed.
// Activations stay plain NCHW: deconvolutions are rare in the networks we
// run (decoder upsampling), and this keeps the kernel free of reorders.
// Geometries oneDNN rejects (negative implied padding, e.g. output_padding
// past the last contribution) go to the reference kernel
// (ops/vision/conv_transpose.cc).
#include <string>
#include <unordered_map>

#include "backends/cpu/onednn_common.h"
#include "ops/vision/conv_transpose.h"

namespace twinfer::cpu::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// ONNX weight layout as a oneDNN plain tag (dims are (g,) o, i, spatial).
tag weights_tag(size_t rank, bool grouped) {
  if (!grouped) return rank == 3 ? tag::bac : rank == 4 ? tag::bacd : tag::bacde;
  return rank == 3 ? tag::acbd : rank == 4 ? tag::acbde : tag::acbdef;
}

class OnednnDeconv final : public Kernel {
 public:
  explicit OnednnDeconv(const KernelBuildInfo& info)
      : s_(vision::deconv_spec(info)), node_(info.node().name), op_(info.node().op_type) {
    empty_ = shape_numel(s_.y) == 0 || shape_numel(s_.x) == 0;
    if (empty_) return;
    x_md_ = plain_desc(s_.x);
    y_md_ = plain_desc(s_.y);
    const int64_t G = s_.group, M = s_.y[1], C = s_.x[1];
    dnnl::memory::dims wd;
    if (G > 1) wd = {G, M / G, C / G};
    else wd = {M, C};
    for (size_t i = 0; i < s_.nsp; ++i) wd.push_back(s_.kernel[i]);
    w_md_ = dnnl::memory::desc(wd, dt::f32, weights_tag(s_.x.size(), G > 1));
    if (s_.has_bias) b_md_ = plain_desc({M});
    for (size_t i = 0; i < s_.nsp; ++i) {
      strides_.push_back(s_.stride[i]);
      dilates_.push_back(s_.dilation[i] - 1);
      pad_l_.push_back(s_.pad_begin[i]);
      pad_r_.push_back(s_.pad_end[i]);
    }
    const Tensor* wc = info.input_constant(1);
    const_weights_ = wc != nullptr;
    guarded(node_, op_, [&] {
      const Variant& v = variants_.get(current_threads(), [&] { return make_variant(wc); });
      declared_scratch_ = v.pad_bytes;
      impl_ = "onednn deconv " + v.impl;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    if (empty_) return;
    guarded(node_, op_, [&] { execute(ctx); });
  }

 private:
  using Variant = PrimitiveVariant<dnnl::deconvolution_forward>;

  Variant make_variant(const Tensor* wc) const {
    Variant v;
    const dnnl::memory::desc w_any(w_md_.get_dims(), dt::f32, tag::any);
    dnnl::deconvolution_forward::primitive_desc pd(
        engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, x_md_,
        const_weights_ ? w_any : w_md_, s_.has_bias ? b_md_ : dnnl::memory::desc(), y_md_, strides_, dilates_,
        pad_l_, pad_r_, base_attr());
    v.adopt(pd);
    if (const_weights_)
      v.weights = packed_.empty() ? packed_.init(w_md_, wc->data(), pd.weights_desc(), wc->storage()) : packed_.get(pd.weights_desc());
    return v;
  }

  void execute(KernelContext& ctx) const {
    ThreadScope threads(ctx.num_threads);
    const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(nullptr); });
    const dnnl::engine& eng = engine();
    dnnl::stream s(eng);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(x_md_, eng, ctx.inputs[0].data)},
        {DNNL_ARG_DST, dnnl::memory(y_md_, eng, ctx.outputs[0].data)},
        {DNNL_ARG_WEIGHTS, const_weights_ ? v.weights : dnnl::memory(w_md_, eng, ctx.inputs[1].data)}};
    if (s_.has_bias) args[DNNL_ARG_BIAS] = dnnl::memory(b_md_, eng, ctx.inputs[2].data);
    if (v.pad_bytes)
      args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, run_scratch(ctx, declared_scratch_, v.pad_bytes));
    v.prim.execute(s, args);
    s.wait();
  }

  vision::DeconvSpec s_;
  std::string node_, op_;
  bool empty_ = false, const_weights_ = false;
  std::string impl_ = "onednn deconv";
  dnnl::memory::desc x_md_, y_md_, w_md_, b_md_;
  dnnl::memory::dims strides_, dilates_, pad_l_, pad_r_;
  mutable PackedWeights packed_;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      *why = std::string("oneDNN ConvTranspose supports float32 only, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  const Shape x = info.input_shape(0);
  if (x.size() < 3 || x.size() > 5) {
    *why = "oneDNN ConvTranspose supports 1-3 spatial dims";
    return false;
  }
  vision::DeconvSpec s = vision::deconv_spec(info);
  for (size_t i = 0; i < s.nsp; ++i)
    if (s.pad_begin[i] < 0 || s.pad_end[i] < 0) {
      *why = "oneDNN deconvolution needs non-negative implied padding";
      return false;
    }
  return true;
}

TWINFER_REGISTER_KERNEL("ConvTranspose", Backend::kCPU, 10, supports, make_kernel<OnednnDeconv>);

}  // namespace
}  // namespace twinfer::cpu::onednn
