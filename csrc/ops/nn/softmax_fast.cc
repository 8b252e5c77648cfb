// Softmax and LogSoftmax on float32 through softmax_rows.h's vectorised
// loops: contiguous rows (inner == 1: attention scores, classifier and CTC
// heads) threaded over rows (oneDNN 3.2's JIT softmax, which they replaced,
// took 1.4-3.5x their time on attention rows); another axis (inner > 1:
// [N, classes, positions]) down blocks of columns, threaded over the outer
// index (the reference kernel's strided rows took 4.5x onnxruntime's time).
#include <algorithm>

#include "core/parallel.h"
#include "ops/kernel.h"
#include "ops/nn/softmax.h"
#include "ops/nn/softmax_rows.h"

namespace twinfer::nn {

namespace {

class FastSoftmax final : public Kernel {
 public:
  explicit FastSoftmax(const KernelBuildInfo& info) : g_(softmax_geom(info)) {}
  const char* impl_name() const override {
    return g_.inner > 1 ? "vectorised float32 columns" : "vectorised float32 rows";
  }

  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const int64_t len = g_.len, inner = g_.inner;
    if (g_.outer * len * inner == 0) return;
    if (inner > 1) {  // columns: a task per (outer index, block of 256 columns)
      constexpr int64_t kBlock = 256;
      const int64_t nb = (inner + kBlock - 1) / kBlock;
      parallel_for(g_.outer * nb, ctx.num_threads, std::max<int64_t>(1, 16384 / (len * std::min(inner, kBlock))),
                   [&](int64_t b, int64_t e) {
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t o = t / nb, j0 = (t % nb) * kBlock;
                       softmax_columns(x + o * len * inner, y + o * len * inner, len, inner, j0,
                                       std::min(inner, j0 + kBlock), g_.log);
                     }
                   });
      return;
    }
    parallel_for(g_.outer, ctx.num_threads, std::max<int64_t>(1, 16384 / len), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        if (g_.log) log_softmax_row(x + r * len, y + r * len, len);
        else softmax_row(x + r * len, nullptr, 0, 1.f, y + r * len, len);
      }
    });
  }

 private:
  SoftmaxGeom g_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32) {
    if (why) *why = "vectorised (log) softmax: float32 only";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Softmax", Backend::kCPU, 20, supports, make_kernel<FastSoftmax>);
TWINFER_REGISTER_KERNEL("LogSoftmax", Backend::kCPU, 20, supports, make_kernel<FastSoftmax>);

}  // namespace
}  // namespace twinfer::nn
