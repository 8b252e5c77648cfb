// Softmax and LogSoftmax on float32 rows that are contiguous (inner == 1:
// attention scores, classifier and CTC heads) through softmax_rows.h's
// vectorised loops, threaded over rows (oneDNN 3.2's JIT softmax, which
// they replaced, took 1.4-3.5x their time on attention rows); strided rows
// (inner > 1) stay on the reference kernel.
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
  const char* impl_name() const override { return "vectorised float32 rows"; }

  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const int64_t len = g_.len;
    if (g_.outer * len == 0) return;
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
  if (softmax_geom(info).inner != 1) {
    if (why) *why = "vectorised (log) softmax: only the innermost axis";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Softmax", Backend::kCPU, 20, supports, make_kernel<FastSoftmax>);
TWINFER_REGISTER_KERNEL("LogSoftmax", Backend::kCPU, 20, supports, make_kernel<FastSoftmax>);

}  // namespace
}  // namespace twinfer::nn
