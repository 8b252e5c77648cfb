// Softmax / LogSoftmax on oneDNN (float32, contiguous rows: inner == 1).
// oneDNN's JIT softmax vectorises exp, which the compiler does not do for
// the reference loop; strided reductions (inner > 1) stay on the reference.
#include <unordered_map>

#include "backends/cpu/onednn_common.h"
#include "ops/nn/softmax.h"

namespace twinfer::cpu::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

class OnednnSoftmax final : public Kernel {
 public:
  explicit OnednnSoftmax(const KernelBuildInfo& info)
      : g_(nn::softmax_geom(info)), node_(info.node().name), op_(info.node().op_type) {
    if (g_.outer * g_.len == 0) return;
    md_ = plain_desc({g_.outer, g_.len});
    guarded(node_, op_, [&] {
      declared_scratch_ = variants_.get(current_threads(), [&] { return make_variant(); }).pad_bytes;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return "onednn softmax"; }

  void run(KernelContext& ctx) const override {
    if (g_.outer * g_.len == 0) return;
    guarded(node_, op_, [&] {
      ThreadScope threads(ctx.num_threads);
      const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
      const dnnl::engine& eng = engine();
      dnnl::stream s(eng);
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(md_, eng, ctx.inputs[0].data)},
                                                 {DNNL_ARG_DST, dnnl::memory(md_, eng, ctx.outputs[0].data)}};
      if (v.pad_bytes)
        args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, run_scratch(ctx, declared_scratch_, v.pad_bytes));
      v.prim.execute(s, args);
      s.wait();
    });
  }

 private:
  struct Variant {
    dnnl::softmax_forward prim;
    dnnl::memory::desc pad_md;
    size_t pad_bytes = 0;
  };

  Variant make_variant() const {
    Variant v;
    dnnl::softmax_forward::primitive_desc pd(
        engine(), dnnl::prop_kind::forward_inference,
        g_.log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md_, md_, 1, base_attr());
    v.prim = dnnl::softmax_forward(pd);
    v.pad_bytes = align_up(pd.scratchpad_desc().get_size());
    if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
    return v;
  }

  nn::SoftmaxGeom g_;
  std::string node_, op_;
  dnnl::memory::desc md_;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32) {
    *why = "oneDNN softmax: float32 only";
    return false;
  }
  if (nn::softmax_geom(info).inner != 1) {
    *why = "oneDNN softmax: only the innermost axis";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Softmax", Backend::kCPU, 10, supports, make_kernel<OnednnSoftmax>);
TWINFER_REGISTER_KERNEL("LogSoftmax", Backend::kCPU, 10, supports, make_kernel<OnednnSoftmax>);

}  // namespace
}  // namespace twinfer::cpu::onednn
