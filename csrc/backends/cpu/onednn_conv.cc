// Conv (ai.onnx) and fused Conv (com.twinfer) on oneDNN, float32.
//
// Constant weights are reordered once, at construction, into the layout the
// primitive prefers (format_tag::any). Activations arrive and leave in plain
// NCHW; the layout the convolution computes in is chosen per node
// (choose_layout):
//   kBlocked  src/dst in oneDNN's channel-blocked layout (nChw16c on
//             AVX-512, nChw8c otherwise) with a reorder in and out. Those
//             reorders are cheap (contiguous 16-float runs) and oneDNN's
//             direct / depthwise JIT kernels are fast on it. A src with fewer
//             channels than one block (the RGB input) stays plain: the
//             first-layer kernel reads NCHW directly.
//   kPlain    src/dst NCHW: 1x1 / stride 1 / unpadded convs on large images
//             are one GEMM in NCHW, and skipping the two reorders wins.
//   kAny      format_tag::any: oneDNN picks (channels-last brgemm kernels on
//             AVX-512). Their reorders cost more than the blocked ones, which
//             only the 2-D 3x3 convs with >= 128 channels win back (1-D ones
//             stay blocked); also the fallback when the blocked layout has no
//             JIT kernel.
// Measured with `python benchmarks/micro/conv_shapes.py --layouts --rounds 3
// [--net mobilenetv2]` (batch 1, 2 threads, AVX-512 EPYC; ms summed over the
// network's convs, each a single-node model run through twinfer.load):
//                  plain    any   blocked   this rule   onnxruntime
//   ResNet-50      25.38   23.43   20.54      20.28        20.25
//   MobileNetV2     7.94    4.28    2.97       2.63         2.60
//
// TWINFER_CONV_LAYOUT=plain|blocked|any (read once) overrides the rule for
// convs with constant weights; it exists so the benchmark can re-measure the
// rule on other CPUs, not for production use.
//
// com.twinfer.nhwc::Conv (graph/passes/channels_last.h) hands oneDNN its
// NHWC buffers and its KRSC weights as they are.
//
// The same kernel runs com.twinfer.blocked::Conv, the plan-time form whose
// activations are already blocked (graph/passes/blocked_layout.h): x (unless
// `plain_input`), the residual and y are the caller's blocked buffers, so a
// chain of convolutions pays no reorders at all, and 1x1 convs take oneDNN's
// JIT 1x1 kernel with their post-ops fused instead of the plain GEMM.
//
// The fused variant adds the residual with a sum post-op (the residual is
// copied/reordered into the destination first) and the activation with an
// eltwise post-op.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "core/tensor.h"
#include "ops/nn/conv.h"

namespace twinfer::cpu::onednn {
namespace {

using nn::ConvSpec;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

enum class Layout { kPlain, kBlocked, kAny };

Layout choose_layout(const ConvSpec& cs) {
  static const std::string forced = [] {
    const char* e = std::getenv("TWINFER_CONV_LAYOUT");
    return std::string(e ? e : "");
  }();
  if (forced == "plain") return Layout::kPlain;
  if (forced == "blocked") return Layout::kBlocked;
  if (forced == "any") return Layout::kAny;
  bool one_by_one = true, unit = true;  // 1x1 kernel; and stride 1 without pads
  int64_t out_spatial = 1, wide_dims = 0;  // spatial dims the map or the kernel spans
  for (size_t i = 0; i < cs.win.nsp; ++i) {
    one_by_one = one_by_one && cs.win.kernel[i] == 1;
    unit = unit && cs.win.stride[i] == 1 && cs.win.pad_begin[i] == 0 && cs.win.pad_end[i] == 0;
    out_spatial *= cs.y[2 + i];
    wide_dims += cs.x[2 + i] > 1 || cs.win.kernel[i] > 1;
  }
  // 1x1 convs are one plain GEMM. It beats the blocked kernel plus its two
  // reorders from 28x28 up, and on smaller maps when the conv does little
  // work per element moved: Cin*Cout/(Cin+Cout) below ~160 (MobileNet's
  // 64..576-channel 1x1s on 14x14 and 7x7; ResNet's 256x1024 is above).
  if (one_by_one && unit && cs.group == 1) {
    const double cin = static_cast<double>(cs.x[1]), cout = static_cast<double>(cs.w[0]);
    if (out_spatial >= 400 || cin * cout / (cin + cout) < 160.0) return Layout::kPlain;
  }
  // Wide spatial kernels: oneDNN's channels-last brgemm kernels beat the
  // blocked direct ones by more than the dearer reorders cost. Not on 1-D
  // convolutions (one spatial dim wider than 1: [N, C, L], or [N, C, L, 1]
  // as tf2onnx writes Keras's Conv1D): there the blocked kernel won every
  // shape measured, 2-26% (AMD EPYC, AVX-512, 1 and 2 threads: 128-512
  // channels, L 200-4000, k 3-5, stride 1-2; magika's 256 -> 512, k 5 on
  // [5, 256, 512, 1] 33.8 -> 31.2 ms; docs/performance.md, stop 51).
  if (!one_by_one && cs.group == 1 && cs.x[1] >= 128 && wide_dims > 1) return Layout::kAny;
  return Layout::kBlocked;
}

// The weights as the node holds them: [M, C/group, k...] row-major, or KRSC
// [M, k..., C/group] for channels-last (the same dims, other strides); a
// grouped conv's M split into [group, M/group] as oneDNN wants it.
dnnl::memory::desc weights_desc(const ConvSpec& cs) {
  Shape dims = cs.w;
  Shape strides = cs.channels_last ? channels_last_strides(dims) : contiguous_strides(dims);
  if (cs.group > 1) {
    dims[0] /= cs.group;
    dims.insert(dims.begin(), cs.group);
    strides.insert(strides.begin(), strides[0] * dims[1]);
  }
  return dnnl::memory::desc(to_dims(dims), dt::f32, to_dims(strides));
}

// A 2-D convolution over a map one pixel wide with a kernel one wide (a 1-D
// convolution written as [N, C, L, 1], as tf2onnx exports Keras's Conv1D)
// described with its spatial dims swapped, [N, C, 1, L]: oneDNN's kernels
// block over the width, and every layout this kernel reads or writes (NCHW,
// blocked, NHWC, plain or KRSC weights) holds the same bytes either way.
// magika's [5, 256, 512, 1] convolution with a 5x1 kernel took 72.9 ms as
// given and 35.5 ms swapped (one thread; onnxruntime 31 ms).
ConvSpec width_one_as_height(ConvSpec cs) {
  if (cs.win.nsp != 2 || cs.x[3] != 1 || cs.y[3] != 1 || cs.w[3] != 1 || cs.x[2] == 1) return cs;
  for (Shape* s : {&cs.x, &cs.w, &cs.y}) std::swap((*s)[2], (*s)[3]);
  for (std::vector<int64_t>* v : {&cs.win.kernel, &cs.win.stride, &cs.win.dilation, &cs.win.pad_begin, &cs.win.pad_end})
    std::swap((*v)[0], (*v)[1]);
  return cs;
}

class OnednnConv final : public Kernel {
 public:
  explicit OnednnConv(const KernelBuildInfo& info)
      : spec_(width_one_as_height(nn::conv_spec(info))), node_(info.node().name), op_(info.node().op_type) {
    empty_ = shape_numel(spec_.y) == 0;
    if (empty_) return;
    x_plain_ = plain_desc(spec_.x);
    y_plain_ = plain_desc(spec_.y);
    blocked_io_ = info.node().domain == kBlockedDomain;
    x_user_ = blocked_io_ && !info.node().attr_int("plain_input", 0) ? blocked_desc(spec_.x)
              : spec_.channels_last                                    ? channels_last_desc(spec_.x)
                                                                       : x_plain_;
    y_user_ = blocked_io_ ? blocked_desc(spec_.y) : spec_.channels_last ? channels_last_desc(spec_.y) : y_plain_;
    w_user_ = weights_desc(spec_);
    if (spec_.has_bias) b_desc_ = plain_desc({spec_.w[0]});
    const Tensor* wc = info.input_constant(1);
    const_weights_ = wc != nullptr;
    // A runtime weights tensor is read as is (w_user_), and oneDNN's fast
    // kernels want packed weights, so such convs compute in plain NCHW.
    // Blocked I/O computes blocked, except where the channels-last brgemm
    // kernels win even with a reorder on each side (wide 3x3 convs: ResNet-50's
    // layer3/layer4 3x3s took 1.0 ms that way vs 1.2-2.8 ms blocked, 1 thread).
    layout_ = !const_weights_ ? Layout::kPlain : choose_layout(spec_);
    if (blocked_io_ && layout_ != Layout::kAny) layout_ = Layout::kBlocked;
    // Channels-last I/O (com.twinfer.nhwc, a device plan's host fallback or
    // the simulated device): oneDNN's choice, its NHWC kernels need no reorder.
    if (spec_.channels_last && const_weights_) layout_ = Layout::kAny;
    for (size_t i = 0; i < spec_.win.nsp; ++i) {
      strides_.push_back(spec_.win.stride[i]);
      dilates_.push_back(spec_.win.dilation[i] - 1);  // oneDNN counts the gaps
      pad_l_.push_back(spec_.win.pad_begin[i]);
      pad_r_.push_back(spec_.win.pad_end[i]);
    }
    guarded(node_, op_, [&] {
      // The variant for the constructing thread's budget; its weights
      // reorder is the one copy made from the model's tensor.
      int threads = current_threads();
      const Variant& v = variants_.get(threads, [&] { return make_variant(wc); });
      declared_scratch_ = v.scratch_total;
      impl_ = std::string("onednn conv ") + v.impl;
      // y may be the residual's own block (the plan's choice): the sum
      // post-op then adds it where it lies, instead of a copy of it into y
      // first (ResNet-50's conv3s: 0.1-0.5 ms each, one thread). Blocked
      // layouts have no GEMM convolution, so no variant takes the epilogue,
      // which would read the residual after the convolution wrote over it.
      residual_in_place_ = spec_.has_residual && layout_ == Layout::kBlocked && !v.has_epilogue;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  int output_may_take_input() const override { return residual_in_place_ ? 3 : -1; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    if (empty_) return;
    guarded(node_, op_, [&] { execute(ctx); });
  }

 private:
  struct Variant {
    dnnl::convolution_forward prim;
    dnnl::memory weights;  // packed constant weights (empty handle when not constant)
    dnnl::memory::desc src_md, dst_md, pad_md;
    bool reorder_src = false, reorder_dst = false;
    dnnl::reorder src_in, dst_out, residual_in;
    // Residual / activation applied after the convolution (see make_variant).
    dnnl::primitive epilogue;
    bool has_epilogue = false;
    size_t pad_bytes = 0, src_off = 0, dst_off = 0, scratch_total = 0;
    std::string impl;  // oneDNN's implementation name and the layout
  };

  // The primitive for the chosen layout, falling back to kAny and then
  // kPlain when oneDNN has only its reference kernel for it.
  dnnl::convolution_forward::primitive_desc make_pd(const dnnl::primitive_attr& attr, std::string* what) const {
    auto with = [&](const dnnl::memory::desc& d, tag t) { return dnnl::memory::desc(d.get_dims(), dt::f32, t); };
    const tag blk = blocked_tag(spec_.x.size());
    const bool small_c = spec_.x[1] < channel_block();
    std::vector<Layout> order;
    if (layout_ != Layout::kPlain) order.push_back(layout_);
    if (layout_ == Layout::kBlocked) order.push_back(Layout::kAny);
    order.push_back(Layout::kPlain);
    dnnl::convolution_forward::primitive_desc pd;
    for (size_t i = 0; i < order.size(); ++i) {
      dnnl::memory::desc src = x_plain_, dst = y_plain_;
      if (order[i] == Layout::kBlocked) {
        // Blocked I/O computes on the caller's buffers as they are.
        src = blocked_io_ ? x_user_ : small_c ? x_plain_ : with(x_plain_, blk);
        dst = with(y_plain_, blk);
      } else if (order[i] == Layout::kAny) {
        src = with(x_plain_, tag::any);
        dst = with(y_plain_, tag::any);
      }
      try {
        pd = dnnl::convolution_forward::primitive_desc(
            engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
            const_weights_ ? with(w_user_, tag::any) : w_user_, spec_.has_bias ? b_desc_ : dnnl::memory::desc(),
            dst, strides_, dilates_, pad_l_, pad_r_, attr);
      } catch (const dnnl::error&) {
        if (i + 1 == order.size()) throw;
        continue;
      }
      std::string impl = pd.impl_info_str();
      if (impl.rfind("ref", 0) != 0 || i + 1 == order.size()) {
        const char* names[] = {"plain", "blocked", "any"};
        *what = impl + " (" + names[static_cast<int>(order[i])] + ")";
        break;
      }
    }
    return pd;
  }

  Variant make_variant(const Tensor* wc) const {
    Variant v;
    dnnl::primitive_attr attr = base_attr();
    dnnl::post_ops po;
    if (spec_.has_residual) po.append_sum(1.f);
    append_activation(po, spec_.act);
    attr.set_post_ops(po);
    dnnl::convolution_forward::primitive_desc pd = make_pd(attr, &v.impl);
    const bool has_post = spec_.has_residual || !spec_.act.none();
    if (has_post && v.impl.find("gemm") != std::string::npos) {
      // oneDNN's GEMM-based convolution applies post-ops element by element
      // (measured 6-20x the time of the convolution itself), so run it bare
      // and apply residual + activation in one JIT pass over y afterwards.
      pd = make_pd(base_attr(), &v.impl);
      v.impl += " + epilogue";
      v.has_epilogue = true;
    }
    v.prim = dnnl::convolution_forward(pd);
    if (const_weights_) {
      v.weights = packed_.empty() ? packed_.init(w_user_, wc->data(), pd.weights_desc(), wc->storage())
                                  : packed_.get(pd.weights_desc());
    }
    v.src_md = pd.src_desc();
    v.dst_md = pd.dst_desc();
    v.reorder_src = v.src_md != x_user_;
    v.reorder_dst = v.dst_md != y_user_;
    dnnl::primitive_attr rattr = base_attr();
    size_t pad = pd.scratchpad_desc().get_size();
    auto add_reorder = [&](const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
      dnnl::reorder::primitive_desc rpd(engine(), from, engine(), to, rattr);
      pad = std::max(pad, rpd.scratchpad_desc().get_size());
      return dnnl::reorder(rpd);
    };
    if (v.reorder_src) v.src_in = add_reorder(x_user_, v.src_md);
    if (v.reorder_dst) {
      v.dst_out = add_reorder(v.dst_md, y_user_);
      if (spec_.has_residual && !v.has_epilogue) v.residual_in = add_reorder(y_user_, v.dst_md);
    }
    if (v.has_epilogue) {  // in place on the caller's y (plain, or blocked)
      dnnl::primitive_attr eattr = base_attr();
      if (spec_.has_residual) {
        dnnl::post_ops po;
        append_activation(po, spec_.act);
        eattr.set_post_ops(po);
        dnnl::binary::primitive_desc bpd(engine(), dnnl::algorithm::binary_add, y_user_, y_user_, y_user_, eattr);
        pad = std::max(pad, bpd.scratchpad_desc().get_size());
        v.epilogue = dnnl::binary(bpd);
      } else {
        EltwiseParams e = eltwise_params(spec_.act);
        dnnl::eltwise_forward::primitive_desc epd(engine(), dnnl::prop_kind::forward_inference, e.alg, y_user_,
                                                  y_user_, e.alpha, e.beta, eattr);
        pad = std::max(pad, epd.scratchpad_desc().get_size());
        v.epilogue = dnnl::eltwise_forward(epd);
      }
    }
    // Scratch layout: [oneDNN scratchpad | blocked src | blocked dst]. The
    // reorders and the convolution run one after another on one stream, so
    // they share the scratchpad region.
    v.pad_bytes = align_up(pad);
    if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
    v.src_off = v.pad_bytes;
    v.dst_off = v.src_off + (v.reorder_src ? align_up(v.src_md.get_size()) : 0);
    v.scratch_total = v.dst_off + (v.reorder_dst ? align_up(v.dst_md.get_size()) : 0);
    return v;
  }

  void execute(KernelContext& ctx) const {
    ThreadScope threads(ctx.num_threads);
    const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(nullptr); });
    char* scratch = run_scratch(ctx, declared_scratch_, v.scratch_total);
    const dnnl::engine& eng = engine();
    dnnl::stream s(eng);

    dnnl::memory x_user(x_user_, eng, ctx.inputs[0].data);
    dnnl::memory y_user(y_user_, eng, ctx.outputs[0].data);
    dnnl::memory src = v.reorder_src ? dnnl::memory(v.src_md, eng, scratch + v.src_off) : x_user;
    dnnl::memory dst = v.reorder_dst ? dnnl::memory(v.dst_md, eng, scratch + v.dst_off) : y_user;
    // The scratchpad argument is given only when some primitive needs one.
    dnnl::memory pad_mem = v.pad_bytes ? dnnl::memory(v.pad_md, eng, scratch) : dnnl::memory();
    auto with_pad = [&](std::unordered_map<int, dnnl::memory> args) {
      if (v.pad_bytes) args[DNNL_ARG_SCRATCHPAD] = pad_mem;
      return args;
    };
    if (v.has_epilogue && spec_.has_residual && ctx.inputs[3].data == ctx.outputs[0].data)
      throw Error(ErrorKind::kRuntime, "the residual shares y's buffer, which the epilogue's form cannot take");
    if (v.reorder_src)
      v.src_in.execute(s, with_pad({{DNNL_ARG_FROM, x_user}, {DNNL_ARG_TO, src}}));
    if (spec_.has_residual && !v.has_epilogue) {
      const TensorView& r = ctx.inputs[3];
      if (v.reorder_dst) {
        dnnl::memory r_user(y_user_, eng, r.data);
        v.residual_in.execute(s, with_pad({{DNNL_ARG_FROM, r_user}, {DNNL_ARG_TO, dst}}));
      } else if (r.data != ctx.outputs[0].data) {
        // y_user_'s size: a blocked residual includes its channel padding.
        std::memcpy(ctx.outputs[0].data, r.data, y_user_.get_size());
      }
    }
    auto args = with_pad({{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    args[DNNL_ARG_WEIGHTS] = const_weights_ ? v.weights : dnnl::memory(w_user_, eng, ctx.inputs[1].data);
    if (spec_.has_bias) args[DNNL_ARG_BIAS] = dnnl::memory(b_desc_, eng, ctx.inputs[2].data);
    v.prim.execute(s, args);
    if (v.reorder_dst)
      v.dst_out.execute(s, with_pad({{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, y_user}}));
    if (v.has_epilogue) {
      if (spec_.has_residual)
        v.epilogue.execute(s, with_pad({{DNNL_ARG_SRC_0, y_user},
                                        {DNNL_ARG_SRC_1, dnnl::memory(y_user_, eng, ctx.inputs[3].data)},
                                        {DNNL_ARG_DST, y_user}}));
      else
        v.epilogue.execute(s, with_pad({{DNNL_ARG_SRC, y_user}, {DNNL_ARG_DST, y_user}}));
    }
    s.wait();
  }

  ConvSpec spec_;
  std::string node_, op_;
  bool empty_ = false, const_weights_ = false;
  bool residual_in_place_ = false;  // output_may_take_input: the residual (input 3)
  bool blocked_io_ = false;  // com.twinfer.blocked::Conv: the caller's x (see x_user_) and y are blocked
  Layout layout_ = Layout::kPlain;
  std::string impl_ = "onednn conv";
  dnnl::memory::desc x_plain_, y_plain_, b_desc_;
  dnnl::memory::desc w_user_;  // the node's weights: plain, or KRSC for channels_last
  dnnl::memory::desc x_user_, y_user_;  // the caller's buffers: plain, or blocked for blocked_io_
  dnnl::memory::dims strides_, dilates_, pad_l_, pad_r_;
  mutable PackedWeights packed_;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i) {
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      *why = std::string("oneDNN Conv supports float32 only, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  }
  if (info.input_shape(0).size() > 5) {
    *why = "oneDNN Conv supports 1-3 spatial dims";
    return false;
  }
  return true;
}

// The blocked form takes what oneDNN runs with a JIT kernel on blocked memory
// (the layout pass asks this before it rewrites a Conv): constant weights,
// and groups that are whole channels (depthwise) or whole blocks.
bool supports_blocked(const KernelBuildInfo& info, std::string* why) {
  if (!supports(info, why)) return false;
  const Shape x = info.input_shape(0), w = info.input_shape(1);
  if (x.size() < 3) {
    *why = "blocked Conv needs 1-3 spatial dims";
    return false;
  }
  if (!info.input_constant(1)) {
    *why = "blocked Conv needs constant weights";
    return false;
  }
  const int64_t group = info.node().attr_int("group", 1), blk = channel_block();
  if (group < 1 || x[1] % group || w[0] % group) {
    *why = "blocked Conv: channels do not divide into groups";
    return false;
  }
  const int64_t cg = x[1] / group, mg = w[0] / group;
  if (group > 1 && !(cg == 1 && mg == 1) && (cg % blk || mg % blk)) {
    *why = "blocked Conv: groups are neither depthwise nor whole channel blocks";
    return false;
  }
  if (info.node().attr_int("plain_input", 0) && x[1] >= blk) {
    *why = "blocked Conv reads a plain input only below one channel block";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 10, supports, make_kernel<OnednnConv>);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 10, supports, make_kernel<OnednnConv>, kTwinferDomain);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 10, supports_blocked, make_kernel<OnednnConv>, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCPU, 10, supports, make_kernel<OnednnConv>, kChannelsLastDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
