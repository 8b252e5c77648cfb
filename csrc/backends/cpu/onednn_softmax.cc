// LogSoftmax (and Softmax, below ops/nn/softmax_fast.cc's vectorised rows,
// which measured 1.4-3x faster than oneDNN 3.2's JIT softmax on attention
// rows) on oneDNN (float32, contiguous rows: inner == 1); strided
// reductions (inner > 1) stay on the reference.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/parallel.h"

#include "backends/cpu/onednn_softmax_rows.h"
#include "ops/nn/softmax.h"

namespace twinfer::cpu::onednn {

SoftmaxRows make_softmax_rows(const dnnl::memory::desc& rows, bool log) {
  SoftmaxRows v;
  dnnl::softmax_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference,
                                           log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate,
                                           rows, rows, 1, base_attr());
  v.prim = dnnl::softmax_forward(pd);
  v.pad_bytes = align_up(pd.scratchpad_desc().get_size());
  if (v.pad_bytes)
    v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dnnl::memory::data_type::u8,
                                  dnnl::memory::format_tag::a);
  return v;
}

void run_softmax_rows(const ByThreads<SoftmaxRows>& variants, const dnnl::memory::desc& rows, const void* src,
                      void* dst, const KernelContext& ctx, size_t declared_scratch, bool log) {
  ThreadScope threads(ctx.num_threads);
  const SoftmaxRows& v = variants.get(threads.threads(), [&] { return make_softmax_rows(rows, log); });
  const dnnl::engine& eng = engine();
  dnnl::stream s(eng);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(rows, eng, const_cast<void*>(src))},
                                             {DNNL_ARG_DST, dnnl::memory(rows, eng, dst)}};
  if (v.pad_bytes)
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, run_scratch(ctx, declared_scratch, v.pad_bytes));
  v.prim.execute(s, args);
  s.wait();
  // A row holding a NaN is NaN throughout (ONNX's reference, onnxruntime and
  // NumPy: its max is NaN); oneDNN gave NaN at that element and 0 (or -inf)
  // elsewhere. Found from the output, which is in cache.
  const dnnl::memory::dims dims = rows.get_dims();
  const int64_t outer = dims[0], len = dims[1];
  float* y = static_cast<float*>(dst);
  parallel_for(outer, ctx.num_threads, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, len)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   float* row = y + r * len;
                   bool nan = false;
                   for (int64_t i = 0; i < len; ++i) nan |= row[i] != row[i];
                   if (nan) std::fill(row, row + len, std::numeric_limits<float>::quiet_NaN());
                 }
               });
}

namespace {

class OnednnSoftmax final : public Kernel {
 public:
  explicit OnednnSoftmax(const KernelBuildInfo& info)
      : g_(nn::softmax_geom(info)), node_(info.node().name), op_(info.node().op_type) {
    if (g_.outer * g_.len == 0) return;
    md_ = plain_desc({g_.outer, g_.len});
    guarded(node_, op_, [&] {
      declared_scratch_ =
          variants_.get(current_threads(), [&] { return make_softmax_rows(md_, g_.log); }).pad_bytes;
    });
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return "onednn softmax"; }

  void run(KernelContext& ctx) const override {
    if (g_.outer * g_.len == 0) return;
    guarded(node_, op_, [&] {
      run_softmax_rows(variants_, md_, ctx.inputs[0].data, ctx.outputs[0].data, ctx, declared_scratch_, g_.log);
    });
  }

 private:
  nn::SoftmaxGeom g_;
  std::string node_, op_;
  dnnl::memory::desc md_;
  ByThreads<SoftmaxRows> variants_;
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
