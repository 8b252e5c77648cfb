// com.twinfer::QConv (see ops/quant/qlinear_fused.h): a oneDNN int8 convolution
// (1-3 spatial dims, groups, dilations, pads) with constant int8 weights
// packed once at build, scales / zero points / bias / activation /
// requantization in its epilogue.
//
// Layout: oneDNN's int8 convolutions are written for channels-last (or
// channel-blocked) data; on plain NCHW it has only its reference kernel.
// The primitive is asked for its preferred layout (format_tag::any) and x / y
// are reordered in and out when it differs from theirs. Activations between
// nodes are NCHW, except an int8 value passed from QConv to QConv, which
// graph/passes/int8_channels_last.cc marks (attributes x_channels_last /
// y_channels_last): those buffers are NHWC, and the reorders, which cost
// EfficientNet-Lite0's depthwise layers more than their convolutions, vanish.
#include <algorithm>
#include <memory>

#include "backends/cpu/onednn_qlinear.h"
#include "graph/domains.h"
#include "ops/nn/window.h"

namespace twinfer::quant {
namespace {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

using onednn::channels_last_desc;

class QConvKernel final : public Kernel {
 public:
  explicit QConvKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(kQX), w = info.input_shape(kQW), y = info.output_shape(0);
    const size_t nsp = x.size() - 2;
    group_ = n.attr_int("group", 1);
    if (group_ < 1 || x[1] != w[1] * group_ || w[0] % group_ != 0)
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + ", weights " + shape_str(w) + " and group " +
                                       std::to_string(group_) + " do not fit");
    std::vector<int64_t> wk(w.begin() + 2, w.end());
    nn::Window win = nn::parse_window(n, nsp, &wk, nn::WindowOptions{true, false});
    if (win.kernel != wk) info.fail(ErrorKind::kShape, "kernel_shape differs from the weights " + shape_str(w));
    nn::resolve_pads(win, Shape(x.begin() + 2, x.end()));
    for (size_t i = 0; i < nsp; ++i) {
      strides_.push_back(win.stride[i]);
      dilates_.push_back(win.dilation[i] - 1);
      pad_l_.push_back(win.pad_begin[i]);
      pad_r_.push_back(win.pad_end[i]);
    }
    p_ = read_qlinear_params(info, w[0]);
    empty_ = shape_numel(y) == 0 || shape_numel(x) == 0;
    if (empty_) {
      if (shape_numel(y) != 0) info.fail(ErrorKind::kShape, "QConv of an empty input");
      return;
    }
    onednn::guarded(node_, op_, [&] {
      x_user_ = n.attr_int("x_channels_last", 0) ? channels_last_desc(x, p_.x_type) : onednn::plain_desc(x, p_.x_type);
      const DType yt = p_.quantized_out ? p_.y_type : DType::kFloat32;
      y_user_ = n.attr_int("y_channels_last", 0) ? channels_last_desc(y, yt) : onednn::plain_desc(y, yt);
      Shape wd = w;
      if (group_ > 1) {
        wd[0] /= group_;
        wd.insert(wd.begin(), group_);
      }
      w_plain_ = onednn::plain_desc(wd, DType::kInt8);
      if (!p_.bias.empty()) b_md_ = dnnl::memory::desc({w[0]}, dt::f32, tag::a);
      w_const_ = info.input_constant(kQW)->data();
      w_owner_ = info.input_constant(kQW)->storage();
      const Variant& v = variants_.get(onednn::current_threads(), [&] { return make_variant(); });
      declared_scratch_ = v.scratch_total;
      impl_ = "onednn int8 conv (" + v.impl + ")";
      w_const_ = nullptr;  // packed now; other thread budgets reorder from the packed copy
      w_owner_ = nullptr;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    if (empty_) return;
    onednn::guarded(node_, op_, [&] {
      onednn::ThreadScope threads(ctx.num_threads);
      const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
      char* scratch = onednn::run_scratch(ctx, declared_scratch_, v.scratch_total);
      const dnnl::engine& eng = onednn::engine();
      dnnl::stream s(eng);
      dnnl::memory x_user(x_user_, eng, ctx.inputs[kQX].data);
      dnnl::memory y_user(y_user_, eng, ctx.outputs[0].data);
      dnnl::memory src = v.reorder_src ? dnnl::memory(v.src_md, eng, scratch + v.src_off) : x_user;
      dnnl::memory dst = v.reorder_dst ? dnnl::memory(v.dst_md, eng, scratch + v.dst_off) : y_user;
      dnnl::memory pad = v.pad_bytes ? dnnl::memory(v.pad_md, eng, scratch) : dnnl::memory();
      auto with_pad = [&](std::unordered_map<int, dnnl::memory> args) {
        if (v.pad_bytes) args[DNNL_ARG_SCRATCHPAD] = pad;
        return args;
      };
      if (v.reorder_src) v.src_in.execute(s, with_pad({{DNNL_ARG_FROM, x_user}, {DNNL_ARG_TO, src}}));
      auto args = with_pad({{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WEIGHTS, v.weights}});
      if (!p_.bias.empty())
        args[DNNL_ARG_BIAS] = dnnl::memory(b_md_, eng, const_cast<float*>(p_.bias.data()));
      add_qlinear_args(p_, args);
      v.prim.execute(s, args);
      if (v.reorder_dst) v.dst_out.execute(s, with_pad({{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, y_user}}));
      s.wait();
    });
  }

 private:
  struct Variant {
    dnnl::convolution_forward prim;
    dnnl::memory weights;
    dnnl::memory::desc src_md, dst_md, pad_md;
    bool reorder_src = false, reorder_dst = false;
    dnnl::reorder src_in, dst_out;
    size_t pad_bytes = 0, src_off = 0, dst_off = 0, scratch_total = 0;
    std::string impl;
  };

  Variant make_variant() const {
    Variant v;
    const int mask = group_ > 1 ? (1 << 0) | (1 << 1) : (1 << 0);
    auto any = [](const dnnl::memory::desc& d) { return dnnl::memory::desc(d.get_dims(), d.get_data_type(), tag::any); };
    dnnl::convolution_forward::primitive_desc pd(
        onednn::engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, any(x_user_),
        any(w_plain_), b_md_, any(y_user_), strides_, dilates_, pad_l_, pad_r_, qlinear_attr(p_, mask));
    v.prim = dnnl::convolution_forward(pd);
    v.impl = pd.impl_info_str();
    v.weights = packed_.empty() ? packed_.init(w_plain_, w_const_, pd.weights_desc(), w_owner_) : packed_.get(pd.weights_desc());
    v.src_md = pd.src_desc();
    v.dst_md = pd.dst_desc();
    v.reorder_src = v.src_md != x_user_;
    v.reorder_dst = v.dst_md != y_user_;
    size_t pad = pd.scratchpad_desc().get_size();
    dnnl::primitive_attr rattr = onednn::base_attr();
    auto reorder = [&](const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
      dnnl::reorder::primitive_desc rpd(onednn::engine(), from, onednn::engine(), to, rattr);
      pad = std::max(pad, rpd.scratchpad_desc().get_size());
      return dnnl::reorder(rpd);
    };
    if (v.reorder_src) v.src_in = reorder(x_user_, v.src_md);
    if (v.reorder_dst) v.dst_out = reorder(v.dst_md, y_user_);
    // Scratch: [oneDNN scratchpad | x in the primitive's layout | y in it].
    v.pad_bytes = onednn::align_up(pad);
    if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
    v.src_off = v.pad_bytes;
    v.dst_off = v.src_off + (v.reorder_src ? onednn::align_up(v.src_md.get_size()) : 0);
    v.scratch_total = v.dst_off + (v.reorder_dst ? onednn::align_up(v.dst_md.get_size()) : 0);
    return v;
  }

  std::string node_, op_, impl_;
  int64_t group_ = 1;
  bool empty_ = false;
  QLinearParams p_;
  dnnl::memory::dims strides_, dilates_, pad_l_, pad_r_;
  dnnl::memory::desc x_user_, y_user_, w_plain_, b_md_;
  const void* w_const_ = nullptr;
  std::shared_ptr<const void> w_owner_;  // w_const_'s storage: packed copies shared across kernels
  mutable onednn::PackedWeights packed_;
  onednn::ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool qconv_supports(const KernelBuildInfo& info, std::string* why) {
  if (!info.input_constant(kQW)) {
    if (why) *why = "QConv needs constant weights";
    return false;
  }
  const size_t r = info.input_shape(kQX).size();
  if (r < 3 || r > 5) {
    if (why) *why = "QConv supports 1-3 spatial dims";
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_KERNEL(kQConvOp, Backend::kCPU, 10, qconv_supports, make_kernel<QConvKernel>, kTwinferDomain);

}  // namespace twinfer::quant
