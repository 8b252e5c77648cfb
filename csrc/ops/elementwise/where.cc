// Where(cond, X, Y): 3-way numpy broadcasting; picks elements by bytes, so
// one instantiation per element width serves every dtype.
#include "ops/elementwise/binary_kernel.h"

namespace twinfer::ew {
namespace {

void where_infer(InferContext& c) {
  SymShape s;
  for (size_t i = 0; i < 3; ++i) {
    if (!c.input_has_shape(i)) return c.set_output_rank_unknown(0, c.input_dtype(1));
    try {
      s = i == 0 ? c.input_shape(0) : broadcast_sym_shapes(s, c.input_shape(i));
    } catch (const Error& e) {
      c.fail(ErrorKind::kShape, e.what());
    }
  }
  c.set_output(0, c.input_dtype(1), s);
}

bool where_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kBool, why) && check_input_dtype(info, 1, kAllTypes, why) &&
         check_same_dtype(info, {1, 2}, why);
}

class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(1)), plan_(plan_for_node(info, {0, 1, 2})) {}

  void run(KernelContext& ctx) const override {
    const bool* c = ctx.inputs[0].as<const bool>();
    const std::array<int64_t, 3>& s = plan_.inner_stride;
    const bool contiguous = s[0] && s[1] && s[2];
    dispatch_bytes(dtype_, [&](auto tag) {
      using U = typename decltype(tag)::type;
      const U* x = ctx.inputs[1].as<const U>();
      const U* y = ctx.inputs[2].as<const U>();
      U* out = ctx.outputs[0].as<U>();
      broadcast_for_each(plan_, ctx.num_threads, kGrainCheap,
                         [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
                           const bool* pc = c + off[0];
                           const U* px = x + off[1];
                           const U* py = y + off[2];
                           U* po = out + o;
                           if (contiguous) {
                             for (int64_t j = 0; j < n; ++j) po[j] = pc[j] ? px[j] : py[j];
                           } else {
                             for (int64_t j = 0; j < n; ++j)
                               po[j] = pc[j * s[0]] ? px[j * s[1]] : py[j * s[2]];
                           }
                         });
    });
  }

 private:
  DType dtype_;
  BroadcastPlan plan_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Where", where_infer);
TWINFER_REGISTER_KERNEL("Where", Backend::kCPU, 0, where_supports, make_kernel<WhereKernel>);

}  // namespace twinfer::ew
