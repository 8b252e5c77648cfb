// The com.twinfer.blocked ops that are not a convolution or a pooling (those
// live in onednn_conv.cc / onednn_pool.cc): the reorders at a blocked
// region's edges and the elementwise ops and Concat inside it, each one
// oneDNN primitive on channel-blocked memory (nChw16c on AVX-512, nChw8c
// otherwise). graph/passes/blocked_layout.h explains the layout and which
// nodes become these ops.
//
//   ToBlocked(x) -> y      plain NCHW -> blocked (oneDNN zero-fills y's channel padding)
//   FromBlocked(x) -> y    blocked -> plain NCHW
//   Relu / LeakyRelu / Clip / Sigmoid / Tanh / HardSigmoid / HardSwish(x) -> y
//                          the unary op as an eltwise primitive; the pass has
//                          put it in `activation` / `activation_params`
//   Add / Mul(a, b) -> y   same shapes, or one operand [N or 1, C, 1, 1]
//                          (a per-channel scale as in squeeze-excitation)
//   Concat(x...) -> y      on the channel axis; every input but the last has
//                          whole channel blocks, so each lands on a block edge
//
// Padding channels never reach a real channel: convolution weights are
// zero-padded, pools and elementwise ops are per channel, and FromBlocked
// drops them. They only need to stay finite: oneDNN primitives write their
// destination's padding (zeros, or f(0) for an eltwise), and every op here
// maps finite to finite.
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "graph/domains.h"
#include "ops/schema.h"

namespace twinfer::cpu::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// One primitive (and its scratchpad size) per thread budget; see onednn_common.h.
struct Prim {
  dnnl::primitive prim;
  dnnl::memory::desc pad_md;
  size_t pad_bytes = 0;
  std::string impl;  // oneDNN's implementation name ("jit:avx512_core", "ref:any"...)
};

// Base of the kernels below: builds the primitive per thread budget through
// a subclass's make(), runs it with the inputs/outputs bound to argument ids.
class BlockedKernel : public Kernel {
 public:
  explicit BlockedKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {}

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    if (empty_) return;
    guarded(node_, op_, [&] {
      ThreadScope threads(ctx.num_threads);
      const Prim& p = prims_.get(threads.threads(), [&] { return make(); });
      const dnnl::engine& eng = engine();
      std::unordered_map<int, dnnl::memory> args;
      bind(ctx, eng, &args);
      if (p.pad_bytes)
        args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(p.pad_md, eng, run_scratch(ctx, declared_scratch_, p.pad_bytes));
      dnnl::stream s(eng);
      p.prim.execute(s, args);
      s.wait();
    });
  }

 protected:
  // Subclasses call this at the end of their constructor (make() is virtual).
  void init(const std::string& what) {
    if (empty_) return;
    guarded(node_, op_, [&] {
      const Prim& p = prims_.get(current_threads(), [&] { return make(); });
      declared_scratch_ = p.pad_bytes;
      impl_ = "onednn " + what + " " + p.impl;
    });
  }
  template <typename PD, typename P>
  static Prim finish(const PD& pd) {
    Prim p;
    p.prim = P(pd);
    p.impl = pd.impl_info_str();
    p.pad_bytes = align_up(pd.scratchpad_desc().get_size());
    if (p.pad_bytes) p.pad_md = dnnl::memory::desc({static_cast<int64_t>(p.pad_bytes)}, dt::u8, tag::a);
    return p;
  }
  virtual Prim make() const = 0;
  virtual void bind(const KernelContext& ctx, const dnnl::engine& eng,
                    std::unordered_map<int, dnnl::memory>* args) const = 0;

  std::string node_, op_;
  bool empty_ = false;

 private:
  ByThreads<Prim> prims_;
  size_t declared_scratch_ = 0;
  std::string impl_;
};

// ToBlocked / FromBlocked.
class Reorder final : public BlockedKernel {
 public:
  explicit Reorder(const KernelBuildInfo& info) : BlockedKernel(info) {
    const Shape s = info.input_shape(0);
    empty_ = shape_numel(s) == 0;
    const bool to = info.node().op_type == "ToBlocked";
    from_ = to ? plain_desc(s) : blocked_desc(s);
    to_ = to ? blocked_desc(s) : plain_desc(s);
    init(to ? "reorder to blocked" : "reorder from blocked");
  }

 private:
  Prim make() const override {
    dnnl::reorder::primitive_desc pd(engine(), from_, engine(), to_, base_attr());
    return finish<dnnl::reorder::primitive_desc, dnnl::reorder>(pd);
  }
  void bind(const KernelContext& ctx, const dnnl::engine& eng,
            std::unordered_map<int, dnnl::memory>* args) const override {
    (*args)[DNNL_ARG_FROM] = dnnl::memory(from_, eng, ctx.inputs[0].data);
    (*args)[DNNL_ARG_TO] = dnnl::memory(to_, eng, ctx.outputs[0].data);
  }
  dnnl::memory::desc from_, to_;
};

class Eltwise final : public BlockedKernel {
 public:
  explicit Eltwise(const KernelBuildInfo& info) : BlockedKernel(info), act_(nn::parse_activation(info.node())) {
    const Shape s = info.input_shape(0);
    empty_ = shape_numel(s) == 0;
    if (act_.none()) info.fail(ErrorKind::kModelFormat, "blocked elementwise op without an activation");
    md_ = blocked_desc(s);
    init("eltwise");
  }

 private:
  Prim make() const override {
    EltwiseParams e = eltwise_params(act_);
    dnnl::eltwise_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, e.alg, md_, md_, e.alpha,
                                             e.beta, base_attr());
    return finish<dnnl::eltwise_forward::primitive_desc, dnnl::eltwise_forward>(pd);
  }
  void bind(const KernelContext& ctx, const dnnl::engine& eng,
            std::unordered_map<int, dnnl::memory>* args) const override {
    (*args)[DNNL_ARG_SRC] = dnnl::memory(md_, eng, ctx.inputs[0].data);
    (*args)[DNNL_ARG_DST] = dnnl::memory(md_, eng, ctx.outputs[0].data);
  }
  nn::Activation act_;
  dnnl::memory::desc md_;
};

// Shape b broadcasts into a per channel: [N or 1, C, 1, ...].
bool per_channel_of(const Shape& b, const Shape& a) {
  if (b.size() != a.size() || b.size() < 3 || b[1] != a[1] || (b[0] != a[0] && b[0] != 1)) return false;
  for (size_t i = 2; i < b.size(); ++i)
    if (b[i] != 1) return false;
  return true;
}

class Binary final : public BlockedKernel {
 public:
  explicit Binary(const KernelBuildInfo& info) : BlockedKernel(info) {
    const Shape a = info.input_shape(0), b = info.input_shape(1);
    // oneDNN broadcasts src1 only; Add and Mul commute, so the full-shape
    // operand goes first.
    swap_ = a != b && per_channel_of(a, b);
    const Shape& full = swap_ ? b : a;
    const Shape& other = swap_ ? a : b;
    empty_ = shape_numel(full) == 0;
    src0_ = blocked_desc(full);
    src1_ = blocked_desc(other);
    alg_ = info.node().op_type == "Add" ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul;
    init("binary");
  }

 private:
  Prim make() const override {
    dnnl::binary::primitive_desc pd(engine(), alg_, src0_, src1_, src0_, base_attr());
    return finish<dnnl::binary::primitive_desc, dnnl::binary>(pd);
  }
  void bind(const KernelContext& ctx, const dnnl::engine& eng,
            std::unordered_map<int, dnnl::memory>* args) const override {
    (*args)[DNNL_ARG_SRC_0] = dnnl::memory(src0_, eng, ctx.inputs[swap_ ? 1 : 0].data);
    (*args)[DNNL_ARG_SRC_1] = dnnl::memory(src1_, eng, ctx.inputs[swap_ ? 0 : 1].data);
    (*args)[DNNL_ARG_DST] = dnnl::memory(src0_, eng, ctx.outputs[0].data);
  }
  bool swap_ = false;
  dnnl::algorithm alg_;
  dnnl::memory::desc src0_, src1_;
};

class Concat final : public BlockedKernel {
 public:
  explicit Concat(const KernelBuildInfo& info) : BlockedKernel(info) {
    const Shape y = info.output_shape(0);
    empty_ = shape_numel(y) == 0;
    for (size_t i = 0; i < info.num_inputs(); ++i) srcs_.push_back(blocked_desc(info.input_shape(i)));
    dst_ = blocked_desc(y);
    init("concat");
  }

 private:
  Prim make() const override {
    dnnl::concat::primitive_desc pd(engine(), dst_, 1, srcs_, base_attr());
    return finish<dnnl::concat::primitive_desc, dnnl::concat>(pd);
  }
  void bind(const KernelContext& ctx, const dnnl::engine& eng,
            std::unordered_map<int, dnnl::memory>* args) const override {
    for (size_t i = 0; i < srcs_.size(); ++i)
      (*args)[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = dnnl::memory(srcs_[i], eng, ctx.inputs[i].data);
    (*args)[DNNL_ARG_DST] = dnnl::memory(dst_, eng, ctx.outputs[0].data);
  }
  std::vector<dnnl::memory::desc> srcs_;
  dnnl::memory::desc dst_;
};

// Max / Min of a blocked activation and a constant scalar (attribute
// "bound"): tf2onnx's tf.maximum(x, -0.4) after a LeakyRelu. A scalar reads
// the same in any layout, so one loop over the whole buffer, channel padding
// included (it stays finite). NaN stays NaN, as onnxruntime's Max keeps it;
// oneDNN's clip would give the bound.
TWINFER_SIMD_CLONES void max_with(const float* __restrict x, float* __restrict y, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < c ? c : x[i];
}
TWINFER_SIMD_CLONES void min_with(const float* __restrict x, float* __restrict y, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > c ? c : x[i];
}

class ScalarBound final : public Kernel {
 public:
  explicit ScalarBound(const KernelBuildInfo& info)
      : max_(info.node().op_type == "Max"),
        bound_(info.node().attr_float("bound", 0.f)),
        n_(static_cast<int64_t>(blocked_desc(info.input_shape(0)).get_size() / sizeof(float))) {}
  const char* impl_name() const override { return max_ ? "blocked max with a scalar" : "blocked min with a scalar"; }
  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    parallel_for(n_, ctx.num_threads, 16384, [&](int64_t b, int64_t e) {
      (max_ ? max_with : min_with)(x + b, y + b, e - b, bound_);
    });
  }

 private:
  bool max_;
  float bound_;
  int64_t n_;  // the buffer's floats, channel padding included
};

// --- what each op accepts (the layout pass asks before it rewrites a node) ---

bool f32_activation(const KernelBuildInfo& info, size_t i, std::string* why) {
  if (!info.has_input(i) || info.input_dtype(i) != DType::kFloat32) {
    *why = "blocked layout: float32 activations only";
    return false;
  }
  const size_t r = info.input_shape(i).size();
  if (r < 3 || r > 5) {
    *why = "blocked layout: rank 3..5 only";
    return false;
  }
  return true;
}

bool supports_unary(const KernelBuildInfo& info, std::string* why) {
  if (!f32_activation(info, 0, why)) return false;
  if (info.node().attr_string("activation", "").empty()) {
    *why = "blocked elementwise op without an activation attribute";
    return false;
  }
  return true;
}

bool supports_binary(const KernelBuildInfo& info, std::string* why) {
  if (info.num_inputs() != 2 || !f32_activation(info, 0, why) || !f32_activation(info, 1, why)) return false;
  const Shape a = info.input_shape(0), b = info.input_shape(1);
  if (a != b && !per_channel_of(b, a) && !per_channel_of(a, b)) {
    *why = "blocked Add/Mul: operands must have equal shapes or one must be per channel";
    return false;
  }
  return true;
}

bool supports_concat(const KernelBuildInfo& info, std::string* why) {
  if (info.num_inputs() < 1) return false;
  const Shape y = info.output_shape(0);
  int64_t axis = info.node().attr_int("axis", 1);
  if (axis < 0) axis += static_cast<int64_t>(y.size());
  if (axis != 1) {
    *why = "blocked Concat: channel axis only";
    return false;
  }
  for (size_t i = 0; i < info.num_inputs(); ++i) {
    if (!f32_activation(info, i, why)) return false;
    // Every input but the last must end on a block edge, or the next one's
    // channels would start inside a block.
    if (i + 1 < info.num_inputs() && info.input_shape(i)[1] % channel_block()) {
      *why = "blocked Concat: an input's channels are not whole blocks";
      return false;
    }
  }
  return true;
}

bool supports_reorder(const KernelBuildInfo& info, std::string* why) { return f32_activation(info, 0, why); }

// Shapes are logical; only the bytes behind them differ.
void infer_concat_channels(InferContext& c) {
  const SymShape& s0 = c.input_shape(0);
  SymShape y = s0;
  Dim ch = s0[1];
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    const Dim& d = c.input_shape(i)[1];
    ch = ch.known() && d.known() ? Dim(ch.value + d.value) : Dim();
  }
  y[1] = ch;
  c.set_output(0, c.input_dtype(0), y);
}

TWINFER_REGISTER_SCHEMA("ToBlocked", infer_same_as_input0, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("FromBlocked", infer_same_as_input0, kBlockedDomain);
TWINFER_REGISTER_KERNEL("ToBlocked", Backend::kCPU, 10, supports_reorder, make_kernel<Reorder>, kBlockedDomain);
TWINFER_REGISTER_KERNEL("FromBlocked", Backend::kCPU, 10, supports_reorder, make_kernel<Reorder>, kBlockedDomain);

#define TWINFER_BLOCKED_UNARY(op)                                \
  TWINFER_REGISTER_SCHEMA(op, infer_same_as_input0, kBlockedDomain); \
  TWINFER_REGISTER_KERNEL(op, Backend::kCPU, 10, supports_unary, make_kernel<Eltwise>, kBlockedDomain)
TWINFER_BLOCKED_UNARY("Relu");
TWINFER_BLOCKED_UNARY("LeakyRelu");
TWINFER_BLOCKED_UNARY("Clip");
TWINFER_BLOCKED_UNARY("Sigmoid");
TWINFER_BLOCKED_UNARY("Tanh");
TWINFER_BLOCKED_UNARY("HardSigmoid");
TWINFER_BLOCKED_UNARY("HardSwish");
#undef TWINFER_BLOCKED_UNARY
bool supports_scalar_bound(const KernelBuildInfo& info, std::string* why) {
  if (!f32_activation(info, 0, why)) return false;
  if (!info.node().has_attr("bound")) {
    *why = "blocked Max / Min without a scalar bound";
    return false;
  }
  return true;
}
TWINFER_REGISTER_SCHEMA("Max", infer_same_as_input0, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("Min", infer_same_as_input0, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Max", Backend::kCPU, 10, supports_scalar_bound, make_kernel<ScalarBound>, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Min", Backend::kCPU, 10, supports_scalar_bound, make_kernel<ScalarBound>, kBlockedDomain);

TWINFER_REGISTER_SCHEMA("Add", infer_broadcast, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("Mul", infer_broadcast, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Add", Backend::kCPU, 10, supports_binary, make_kernel<Binary>, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Mul", Backend::kCPU, 10, supports_binary, make_kernel<Binary>, kBlockedDomain);

TWINFER_REGISTER_SCHEMA("Concat", infer_concat_channels, kBlockedDomain);
TWINFER_REGISTER_KERNEL("Concat", Backend::kCPU, 10, supports_concat, make_kernel<Concat>, kBlockedDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
