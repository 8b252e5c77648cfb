// MaxPool / AveragePool on oneDNN, float32 (MaxPool also int8 / uint8),
// plain NCHW in and out (oneDNN's JIT pooling reads NCHW directly). On ResNet-50's 3x3/2 MaxPool
// (64x112x112, 1 thread) it took 0.19 ms, pool.cc's loops 0.38 ms (average,
// separable) and 5.3 ms (max, generic).
//
// ONNX's window rules map onto oneDNN's explicit right padding: with
// ceil_mode the right padding is whatever makes the last window fit
// (max and exclude-pad averages ignore padding anyway). count_include_pad
// averages divide by the window clipped to [-pad_begin, in + pad_end), which
// equals oneDNN's full-kernel divisor only when no window reaches past
// pad_end; other cases, and MaxPool's Indices output, stay on pool.cc.
//
// The com.twinfer.blocked forms (graph/passes/blocked_layout.h) run the same
// primitive on channel-blocked x and y, and GlobalAveragePool /
// GlobalMaxPool become a pooling whose window is the whole map: pool.cc's
// global reductions read plain NCHW only.
#include <unordered_map>

#include "backends/cpu/onednn_common.h"
#include "graph/domains.h"
#include "ops/nn/pool.h"

namespace twinfer::cpu::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Right padding oneDNN needs for the ONNX output size, per spatial dim.
// Negative where the last window ends before the input does (a 3x3 stride-2
// window over an even size without padding): oneDNN's output size floors
// (in + pl + pr - k) / stride, so 0 gives the same windows there, the input's
// last elements unread, as ONNX has it.
dnnl::memory::dims exact_right_pads(const nn::PoolSpec& ps) {
  dnnl::memory::dims pr;
  for (size_t i = 0; i < ps.win.nsp; ++i) {
    const int64_t ek = ps.win.effective_kernel(i), in = ps.x[2 + i], pl = ps.win.pad_begin[i];
    const int64_t exact = (ps.y[2 + i] - 1) * ps.win.stride[i] + ek - in - pl;
    const bool floors_to_y = exact < 0 && in + pl - ek >= 0 && (in + pl - ek) / ps.win.stride[i] + 1 == ps.y[2 + i];
    pr.push_back(floors_to_y ? 0 : exact);
  }
  return pr;
}

// A global pool as a windowed one: the window is the whole map.
nn::PoolSpec global_pool_spec(const KernelBuildInfo& info) {
  nn::PoolSpec ps;
  ps.is_max = info.node().op_type == "GlobalMaxPool";
  ps.x = info.input_shape(0);
  ps.y = info.output_shape(0);
  if (ps.x.size() < 3) info.fail(ErrorKind::kShape, "input must have rank >= 3, got " + shape_str(ps.x));
  ps.win.nsp = ps.x.size() - 2;
  for (size_t i = 0; i < ps.win.nsp; ++i) {
    ps.win.kernel.push_back(ps.x[2 + i]);
    ps.win.stride.push_back(1);
    ps.win.dilation.push_back(1);
    ps.win.pad_begin.push_back(0);
    ps.win.pad_end.push_back(0);
  }
  return ps;
}

bool is_global(const KernelBuildInfo& info) { return info.node().op_type.rfind("Global", 0) == 0; }

class OnednnPool final : public Kernel {
 public:
  explicit OnednnPool(const KernelBuildInfo& info)
      : ps_(is_global(info) ? global_pool_spec(info) : nn::pool_spec(info)),
        node_(info.node().name),
        op_(info.node().op_type) {
    if (shape_numel(ps_.y) == 0) return;
    const bool blocked = info.node().domain == kBlockedDomain;
    const DType t = info.input_dtype(0);
    x_md_ = blocked ? blocked_desc(ps_.x, t) : ps_.channels_last ? channels_last_desc(ps_.x, t) : plain_desc(ps_.x, t);
    y_md_ = blocked ? blocked_desc(ps_.y, t) : ps_.channels_last ? channels_last_desc(ps_.y, t) : plain_desc(ps_.y, t);
    // oneDNN pools 8-bit integers fast only channels-last (its JIT int8
    // pooling); on plain NCHW it takes its reference loop: 216 ms for
    // ResNet-50's stem MaxPool at batch 8 on two cores. Plain int8 goes
    // through NHWC copies in scratch instead (two reorders of int8 bytes).
    detour_ = t != DType::kFloat32 && !blocked && !ps_.channels_last;
    if (detour_) {
      x_nhwc_ = channels_last_desc(ps_.x, t);
      y_nhwc_ = channels_last_desc(ps_.y, t);
      detour_bytes_ = align_up(x_nhwc_.get_size()) + align_up(y_nhwc_.get_size());
    }
    guarded(node_, op_, [&] {
      const Variant& v = variants_.get(current_threads(), [&] { return make_variant(); });
      declared_scratch_ = detour_bytes_ + v.pad_bytes;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return "onednn pooling"; }

  void run(KernelContext& ctx) const override {
    if (shape_numel(ps_.y) == 0) return;
    guarded(node_, op_, [&] {
      ThreadScope threads(ctx.num_threads);
      const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
      const dnnl::engine& eng = engine();
      dnnl::stream s(eng);
      // Scratch: [x NHWC][y NHWC] (the int8 detour), then oneDNN's scratchpad.
      char* scratch = run_scratch(ctx, declared_scratch_, detour_bytes_ + v.pad_bytes);
      dnnl::memory x(x_md_, eng, ctx.inputs[0].data), y(y_md_, eng, ctx.outputs[0].data);
      dnnl::memory xs = x, ys = y;
      if (detour_) {
        xs = dnnl::memory(x_nhwc_, eng, scratch);
        ys = dnnl::memory(y_nhwc_, eng, scratch + align_up(x_nhwc_.get_size()));
        v.to_nhwc.execute(s, x, xs);
      }
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, xs}, {DNNL_ARG_DST, ys}};
      if (v.pad_bytes) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, scratch + detour_bytes_);
      v.prim.execute(s, args);
      if (detour_) v.from_nhwc.execute(s, ys, y);
      s.wait();
    });
  }

 private:
  struct Variant {
    dnnl::pooling_forward prim;
    dnnl::reorder to_nhwc, from_nhwc;  // the int8 detour's
    dnnl::memory::desc pad_md;
    size_t pad_bytes = 0;
  };

  Variant make_variant() const {
    Variant v;
    const nn::Window& w = ps_.win;
    dnnl::memory::dims strides(w.stride.begin(), w.stride.end()), kernel(w.kernel.begin(), w.kernel.end()),
        dil, pl(w.pad_begin.begin(), w.pad_begin.end());
    for (int64_t d : w.dilation) dil.push_back(d - 1);
    dnnl::algorithm alg = ps_.is_max ? dnnl::algorithm::pooling_max
                          : ps_.include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::memory::desc& x_md = detour_ ? x_nhwc_ : x_md_;
    const dnnl::memory::desc& y_md = detour_ ? y_nhwc_ : y_md_;
    dnnl::pooling_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, alg, x_md, y_md,
                                             strides, kernel, dil, pl, exact_right_pads(ps_), base_attr());
    v.prim = dnnl::pooling_forward(pd);
    if (detour_) {
      // Library-managed scratchpad (default attributes): a plain <-> nhwc
      // reorder of bytes needs none, and none is passed.
      v.to_nhwc = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), x_md_, engine(), x_nhwc_));
      v.from_nhwc = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), y_nhwc_, engine(), y_md_));
    }
    v.pad_bytes = align_up(pd.scratchpad_desc().get_size());
    if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
    return v;
  }

  nn::PoolSpec ps_;
  std::string node_, op_;
  dnnl::memory::desc x_md_, y_md_;
  bool detour_ = false;               // plain int8: pooled on NHWC copies
  dnnl::memory::desc x_nhwc_, y_nhwc_;
  size_t detour_bytes_ = 0;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  // int8 / uint8 MaxPool too (an int8 network's stem: the maximum of
  // integers is the integer of the maximum, no rounding involved).
  const DType t = info.input_dtype(0);
  const bool max = info.node().op_type == "MaxPool";
  if (t != DType::kFloat32 && !(max && (t == DType::kInt8 || t == DType::kUInt8))) {
    *why = max ? "oneDNN pooling: float32, int8 or uint8 only" : "oneDNN pooling: float32 only";
    return false;
  }
  nn::PoolSpec ps = nn::pool_spec(info);
  if (ps.want_indices) {
    *why = "oneDNN pooling: no Indices output";
    return false;
  }
  dnnl::memory::dims pr = exact_right_pads(ps);
  for (size_t i = 0; i < ps.win.nsp; ++i) {
    const int64_t ek = ps.win.effective_kernel(i);
    // oneDNN wants every window to touch the input: pads below the kernel.
    if (pr[i] < 0) {
      *why = "oneDNN pooling: the last window ends before the input does";
      return false;
    }
    if (pr[i] >= ek || ps.win.pad_begin[i] >= ek) {
      *why = "oneDNN pooling: padding as large as the window";
      return false;
    }
    if (ps.include_pad && pr[i] > ps.win.pad_end[i]) {
      *why = "oneDNN pooling: count_include_pad with a ceil_mode window past the padding";
      return false;
    }
  }
  return true;
}

bool supports_global_blocked(const KernelBuildInfo& info, std::string* why) {
  const Shape x = info.input_shape(0);
  if (info.input_dtype(0) != DType::kFloat32 || x.size() < 3 || x.size() > 5) {
    *why = "blocked global pooling: float32 with 1-3 spatial dims only";
    return false;
  }
  return true;
}

bool supports_blocked(const KernelBuildInfo& info, std::string* why) {
  if (info.input_shape(0).size() > 5) {
    *why = "blocked pooling: 1-3 spatial dims only";
    return false;
  }
  return supports(info, why);
}

TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCPU, 10, supports, make_kernel<OnednnPool>);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCPU, 10, supports, make_kernel<OnednnPool>);
TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCPU, 10, supports_blocked, make_kernel<OnednnPool>, kBlockedDomain);
TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCPU, 10, supports, make_kernel<OnednnPool>, kChannelsLastDomain);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCPU, 10, supports, make_kernel<OnednnPool>, kChannelsLastDomain);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCPU, 10, supports_blocked, make_kernel<OnednnPool>,
                        kBlockedDomain);
TWINFER_REGISTER_KERNEL("GlobalAveragePool", Backend::kCPU, 10, supports_global_blocked, make_kernel<OnednnPool>,
                        kBlockedDomain);
TWINFER_REGISTER_KERNEL("GlobalMaxPool", Backend::kCPU, 10, supports_global_blocked, make_kernel<OnednnPool>,
                        kBlockedDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
