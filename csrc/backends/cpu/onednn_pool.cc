// MaxPool / AveragePool on oneDNN, float32, plain NCHW in and out (oneDNN's
// JIT pooling reads NCHW directly). On ResNet-50's 3x3/2 MaxPool
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
dnnl::memory::dims exact_right_pads(const nn::PoolSpec& ps) {
  dnnl::memory::dims pr;
  for (size_t i = 0; i < ps.win.nsp; ++i)
    pr.push_back((ps.y[2 + i] - 1) * ps.win.stride[i] + ps.win.effective_kernel(i) - ps.x[2 + i] -
                 ps.win.pad_begin[i]);
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
    x_md_ = blocked ? blocked_desc(ps_.x) : ps_.channels_last ? channels_last_desc(ps_.x) : plain_desc(ps_.x);
    y_md_ = blocked ? blocked_desc(ps_.y) : ps_.channels_last ? channels_last_desc(ps_.y) : plain_desc(ps_.y);
    guarded(node_, op_, [&] {
      const Variant& v = variants_.get(current_threads(), [&] { return make_variant(); });
      declared_scratch_ = v.pad_bytes;
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
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(x_md_, eng, ctx.inputs[0].data)},
                                                 {DNNL_ARG_DST, dnnl::memory(y_md_, eng, ctx.outputs[0].data)}};
      if (v.pad_bytes)
        args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, run_scratch(ctx, declared_scratch_, v.pad_bytes));
      v.prim.execute(s, args);
      s.wait();
    });
  }

 private:
  struct Variant {
    dnnl::pooling_forward prim;
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
    dnnl::pooling_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, alg, x_md_, y_md_,
                                             strides, kernel, dil, pl, exact_right_pads(ps_), base_attr());
    v.prim = dnnl::pooling_forward(pd);
    v.pad_bytes = align_up(pd.scratchpad_desc().get_size());
    if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
    return v;
  }

  nn::PoolSpec ps_;
  std::string node_, op_;
  dnnl::memory::desc x_md_, y_md_;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32) {
    *why = "oneDNN pooling: float32 only";
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
    if (pr[i] < 0 || pr[i] >= ek || ps.win.pad_begin[i] >= ek) {
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
