// com.twinfer::FusedElementwise on the CPU: its program and geometry
// (fused_chain_node.h), its shape rule, and the CPU kernel. The CPU runs it
// for the simulated device and for a device plan's host fallback; CPU plans
// do not fuse (their single-op kernels are vectorised already).
//
// The kernel works a block of output elements at a time: the inputs of the
// block are loaded into float buffers, then each step runs as one loop over
// the block (one switch per step and block, not per element, so the loops
// vectorise), and the last buffer is stored.
#include "ops/elementwise/fused_chain_node.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/parallel.h"
#include "graph/domains.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::ew {

namespace {

struct OpName {
  ChainOp op;
  const char* name;
};
constexpr OpName kOpNames[] = {
#define TWINFER_CHAIN_NAME(n) {ChainOp::k##n, #n},
#define TWINFER_CHAIN_NAME_P(n, f) {ChainOp::k##n, #n},
    TWINFER_CHAIN_UNARY(TWINFER_CHAIN_NAME) TWINFER_CHAIN_BINARY(TWINFER_CHAIN_NAME)
        TWINFER_CHAIN_PARAM(TWINFER_CHAIN_NAME_P)
#undef TWINFER_CHAIN_NAME
#undef TWINFER_CHAIN_NAME_P
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == static_cast<size_t>(ChainOp::kCount),
              "every chain op has a name");

[[noreturn]] void bad(const graph::Node& n, const std::string& msg) {
  throw Error(ErrorKind::kModelFormat, "FusedElementwise: " + msg, n.name, n.op_type);
}

}  // namespace

const char* chain_op_name(ChainOp op) {
  for (const auto& e : kOpNames)
    if (e.op == op) return e.name;
  return "?";
}

bool chain_op_from_name(const std::string& name, ChainOp* op) {
  for (const auto& e : kOpNames)
    if (name == e.name) {
      *op = e.op;
      return true;
    }
  return false;
}

ChainProgram chain_program(const graph::Node& n) {
  const graph::Attribute* ops_attr = n.attr("ops");
  const std::vector<std::string> ops = ops_attr ? ops_attr->strings : std::vector<std::string>{};
  const std::vector<int64_t> args = n.attr_ints("args");
  const std::vector<float> params = n.attr_floats("params");
  ChainProgram p;
  p.num_inputs = static_cast<int32_t>(n.inputs.size());
  p.num_steps = static_cast<int32_t>(ops.size());
  if (p.num_inputs < 1 || p.num_inputs > kChainMaxInputs)
    bad(n, "takes 1 to " + std::to_string(kChainMaxInputs) + " inputs, got " + std::to_string(p.num_inputs));
  if (p.num_steps < 1 || p.num_steps > kChainMaxSteps)
    bad(n, "takes 1 to " + std::to_string(kChainMaxSteps) + " ops, got " + std::to_string(p.num_steps));
  if (args.size() != 2 * ops.size() || params.size() != 2 * ops.size())
    bad(n, "'args' and 'params' need two entries per op (" + std::to_string(ops.size()) + " ops, " +
               std::to_string(args.size()) + " args, " + std::to_string(params.size()) + " params)");
  for (int k = 0; k < p.num_steps; ++k) {
    ChainStep& s = p.steps[k];
    if (!chain_op_from_name(ops[k], &s.op)) bad(n, "unknown op '" + ops[k] + "' in step " + std::to_string(k));
    const int64_t a = args[2 * k], b = args[2 * k + 1], limit = p.num_inputs + k;  // registers so far
    if (a < 0 || a >= limit) bad(n, "step " + std::to_string(k) + " reads register " + std::to_string(a));
    if (chain_binary(s.op) ? (b < 0 || b >= limit) : b != -1)
      bad(n, "step " + std::to_string(k) + " (" + ops[k] + ") has a wrong second operand " + std::to_string(b));
    s.a = static_cast<int32_t>(a);
    s.b = static_cast<int32_t>(b);
    s.p0 = params[2 * k];
    s.p1 = params[2 * k + 1];
  }
  for (int i = 0; i < p.num_inputs; ++i)
    if (n.inputs[i] < 0) bad(n, "input " + std::to_string(i) + " is missing");
  return p;
}

std::string chain_summary(const ChainProgram& p) {
  std::string s;
  for (int k = 0; k < p.num_steps; ++k) s += (k ? ", " : "") + std::string(chain_op_name(p.steps[k].op));
  return s;
}

OffsetCalc<kChainMaxInputs> chain_offsets(const std::vector<Shape>& inputs, const Shape& out, bool* fits) {
  OffsetCalc<kChainMaxInputs> c;
  *fits = inputs.size() <= static_cast<size_t>(kChainMaxInputs);
  if (!*fits) return c;
  const size_t nin = inputs.size(), rank = out.size();
  if (shape_numel(out) == 0) {  // nothing is indexed
    c.rank = 1;
    return c;
  }
  // Each input's element strides along the output's dims (right-aligned, 0
  // where it broadcasts), innermost dim first.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, kChainMaxInputs>> strides;
  std::vector<int64_t> running(nin, 1);  // each input's contiguous stride so far
  for (size_t r = 0; r < rank; ++r) {
    const size_t d = rank - 1 - r;
    std::array<int64_t, kChainMaxInputs> st{};
    for (size_t k = 0; k < nin; ++k) {
      const Shape& in = inputs[k];
      const int64_t dim = r < in.size() ? in[in.size() - 1 - r] : 1;
      st[k] = dim == 1 ? 0 : running[k];
      running[k] *= dim;
    }
    if (out[d] == 1) continue;
    if (!sizes.empty()) {  // merge into the inner dim when every input allows
      bool merge = true;
      for (size_t k = 0; k < nin && merge; ++k) merge = st[k] == strides.back()[k] * sizes.back();
      if (merge) {
        sizes.back() *= out[d];
        continue;
      }
    }
    sizes.push_back(out[d]);
    strides.push_back(st);
  }
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    strides.push_back({});
  }
  if (sizes.size() > static_cast<size_t>(kMaxOffsetDims)) {
    *fits = false;
    return c;
  }
  c.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < c.rank; ++d) {
    c.sizes[d] = FastDivmod(static_cast<uint64_t>(sizes[d]));
    for (size_t k = 0; k < nin; ++k) c.strides[d][k] = strides[d][k];
  }
  return c;
}

std::vector<int> chain_flat_kinds(const std::vector<Shape>& inputs, const Shape& out) {
  const int64_t n = shape_numel(out);
  std::vector<int> kinds;
  for (const Shape& s : inputs) {
    const int64_t m = shape_numel(s);
    // An input that broadcasts to `out` with as many elements is `out`
    // with leading 1s: same order.
    kinds.push_back(m == n ? 1 : (m == 1 ? 0 : -1));
  }
  return kinds;
}

namespace {

// Shape rule: the inputs broadcast (PRelu's slope included: it broadcasts
// into X), float inputs of one dtype, and a program that reads well.
void infer_fused_elementwise(InferContext& c) {
  const ChainProgram p = chain_program(c.node());
  (void)p;
  const DType dt = c.input_dtype(0);
  if (!(dt == DType::kFloat32 || dt == DType::kFloat16 || dt == DType::kBFloat16))
    c.fail(ErrorKind::kDType,
           std::string("FusedElementwise takes float32, float16 or bfloat16, got ") + dtype_name(dt));
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (!(c.input_dtype(i) == dt))
      c.fail(ErrorKind::kDType,
             "FusedElementwise: input " + std::to_string(i) + " is " + dtype_name(c.input_dtype(i)) + ", input 0 is " +
                 dtype_name(dt));
  infer_broadcast(c);
}

constexpr unsigned kChainTypes = kF32 | kF16 | kBF16;
constexpr int64_t kBlock = 512;

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_input_dtype(info, 0, kChainTypes, why)) return false;
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (!check_same_dtype(info, {0, i}, why)) return false;
  return true;
}

// One step over a block: the switch is outside the loops.
void step_block(const ChainStep& s, const float* a, const float* b, float* y, int64_t n) {
  const float p0 = s.p0, p1 = s.p1;
  (void)p1;
  switch (s.op) {
#define TWINFER_CHAIN_LOOP1(nm)                          \
  case ChainOp::k##nm:                                   \
    for (int64_t i = 0; i < n; ++i) y[i] = nm{}(a[i]);   \
    return;
#define TWINFER_CHAIN_LOOP2(nm)                              \
  case ChainOp::k##nm:                                       \
    for (int64_t i = 0; i < n; ++i) y[i] = nm{}(a[i], b[i]); \
    return;
#define TWINFER_CHAIN_LOOPP(nm, f)                     \
  case ChainOp::k##nm: {                               \
    const auto fn = f;                                 \
    for (int64_t i = 0; i < n; ++i) y[i] = fn(a[i]);   \
    return;                                            \
  }
    TWINFER_CHAIN_UNARY(TWINFER_CHAIN_LOOP1)
    TWINFER_CHAIN_BINARY(TWINFER_CHAIN_LOOP2)
    TWINFER_CHAIN_PARAM(TWINFER_CHAIN_LOOPP)
#undef TWINFER_CHAIN_LOOP1
#undef TWINFER_CHAIN_LOOP2
#undef TWINFER_CHAIN_LOOPP
    default:
      return;
  }
}

class FusedChainKernel final : public Kernel {
 public:
  explicit FusedChainKernel(const KernelBuildInfo& info)
      : program_(chain_program(info.node())), dtype_(info.input_dtype(0)) {
    std::vector<Shape> ins;
    for (size_t i = 0; i < info.num_inputs(); ++i) ins.push_back(info.input_shape(i));
    const Shape out = info.output_shape(0);
    n_ = shape_numel(out);
    kinds_ = chain_flat_kinds(ins, out);
    bool fits = true;
    calc_ = chain_offsets(ins, out, &fits);
    flat_ = fits ? std::all_of(kinds_.begin(), kinds_.end(), [](int k) { return k >= 0; }) : false;
    // Beyond kMaxOffsetDims merged dims the CPU still runs it, through the
    // generic broadcast index (strides of the full-rank shapes).
    if (!fits) broadcast_strides(ins, out);
    name_ = "fused elementwise (" + chain_summary(program_) + ")";
  }

  void run(KernelContext& ctx) const override {
    dispatch_typeset<kChainTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      run_typed<S>(ctx);
    });
  }
  const char* impl_name() const override { return name_.c_str(); }

 private:
  // The full-rank fallback of chain_offsets for the CPU: out dims as sizes,
  // one per dim, innermost first.
  void broadcast_strides(const std::vector<Shape>& ins, const Shape& out) {
    full_sizes_.assign(out.rbegin(), out.rend());
    full_strides_.assign(out.size(), {});
    for (size_t k = 0; k < ins.size(); ++k) {
      int64_t running = 1;
      for (size_t r = 0; r < out.size(); ++r) {
        const int64_t dim = r < ins[k].size() ? ins[k][ins[k].size() - 1 - r] : 1;
        full_strides_[r][k] = dim == 1 ? 0 : running;
        running *= dim;
      }
    }
  }

  void offsets(int64_t linear, int64_t (&off)[kChainMaxInputs]) const {
    if (full_sizes_.empty()) {
      calc_.get(static_cast<uint64_t>(linear), off);
      return;
    }
    for (auto& o : off) o = 0;
    for (size_t d = 0; d < full_sizes_.size(); ++d) {
      const int64_t r = linear % full_sizes_[d];
      linear /= full_sizes_[d];
      for (int k = 0; k < program_.num_inputs; ++k) off[k] += r * full_strides_[d][k];
    }
  }

  template <typename S>
  void run_typed(KernelContext& ctx) const {
    const int nin = program_.num_inputs, regs = nin + program_.num_steps;
    S* y = ctx.outputs[0].as<S>();
    parallel_for((n_ + kBlock - 1) / kBlock, ctx.num_threads, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> buf(static_cast<size_t>(regs) * kBlock);
      auto reg = [&](int r) { return buf.data() + static_cast<size_t>(r) * kBlock; };
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t o = blk * kBlock, len = std::min(kBlock, n_ - o);
        for (int k = 0; k < nin; ++k) {
          const S* x = ctx.inputs[k].as<const S>();
          float* r = reg(k);
          if (flat_ && kinds_[k] == 1) {
            for (int64_t i = 0; i < len; ++i) r[i] = static_cast<float>(load(x[o + i]));
          } else if (flat_) {
            std::fill(r, r + len, static_cast<float>(load(x[0])));
          }
        }
        if (!flat_)
          for (int64_t i = 0; i < len; ++i) {
            int64_t off[kChainMaxInputs];
            offsets(o + i, off);
            for (int k = 0; k < nin; ++k) reg(k)[i] = static_cast<float>(load(ctx.inputs[k].as<const S>()[off[k]]));
          }
        for (int k = 0; k < program_.num_steps; ++k) {
          const ChainStep& s = program_.steps[k];
          step_block(s, reg(s.a), s.b >= 0 ? reg(s.b) : nullptr, reg(nin + k), len);
        }
        const float* out = reg(regs - 1);
        for (int64_t i = 0; i < len; ++i) y[o + i] = store<S>(out[i]);
      }
    });
  }

  ChainProgram program_;
  DType dtype_;
  int64_t n_ = 0;
  std::vector<int> kinds_;
  bool flat_ = false;
  OffsetCalc<kChainMaxInputs> calc_;
  std::vector<int64_t> full_sizes_;                                 // only past kMaxOffsetDims
  std::vector<std::array<int64_t, kChainMaxInputs>> full_strides_;  // likewise
  std::string name_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA(kFusedElementwiseOp, infer_fused_elementwise, kTwinferDomain);
TWINFER_REGISTER_KERNEL(kFusedElementwiseOp, Backend::kCPU, 0, supports, make_kernel<FusedChainKernel>,
                        kTwinferDomain);

}  // namespace twinfer::ew
