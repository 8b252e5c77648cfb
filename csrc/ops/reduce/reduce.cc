// ReduceSum / Mean / Max / Min / Prod / L1 / L2 / LogSum / LogSumExp /
// SumSquare: one shape rule and one kernel, the op picked from a functor
// table (reduce_ops.h).
//
// Axes: an attribute before opset 13 (ReduceSum) / 18 (the others), an input
// from then on; empty axes reduce everything unless noop_with_empty_axes.
//
// The kernel merges neighbouring dims that are both kept or both reduced and
// drops size-1 dims, which leaves three walks:
//   rows    [kept, reduced]          contiguous runs, summed in 8 lanes
//   columns [kept, reduced, kept]    running sums over blocks of the inner
//                                    dim (vectorisable across it)
//   general anything else            per-output odometer over reduced dims
#include "ops/elementwise/typeset.h"
#include "ops/reduce/reduce_axes.h"
#include "ops/reduce/reduce_walks.h"

namespace twinfer::reduce {
namespace {

using tensor::normalize_axes;

constexpr unsigned kSumTypes = ew::kFloatTypes | ew::kI32 | ew::kI64 | ew::kU32 | ew::kU64;
constexpr unsigned kMinMaxTypes = kSumTypes | ew::kI8 | ew::kU8 | ew::kBool;  // bool: opset 20

bool is_minmax(const std::string& op) { return op == "ReduceMax" || op == "ReduceMin"; }
unsigned types_of(const std::string& op) { return is_minmax(op) ? kMinMaxTypes : kSumTypes; }

void reduce_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const std::string& op = c.node().op_type;
  if (!(ew::in_typeset(types_of(op), dt)))
    c.fail(ErrorKind::kDType,
           op + " does not support dtype " + dtype_name(dt) + " (supported: " + ew::typeset_str(types_of(op)) + ")");
  const bool keep = c.node().attr_int("keepdims", 1) != 0;
  if (c.opset() >= axes_input_since(op) && c.has_input(1))
    if (!(c.input_dtype(1) == DType::kInt64))
      c.fail(ErrorKind::kDType, std::string("axes must be int64, got ") + dtype_name(c.input_dtype(1)));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  bool noop = false, known = true;
  std::vector<char> red = reduced_dims(c, r, &noop, &known);
  if (!known) {
    if (keep) return c.set_output(0, dt, tensor::unknown_dims(r));
    if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known())
      return c.set_output(0, dt, tensor::unknown_dims(r - c.input_shape(1)[0].value));
    return c.set_output_rank_unknown(0, dt);
  }
  SymShape out;
  for (int64_t d = 0; d < r; ++d) {
    if (!red[d])
      out.push_back(in[d]);
    else if (keep)
      out.push_back(Dim(1));
  }
  c.set_output(0, dt, out);
}

using RunFn = void (*)(const Geom&, const void*, void*, int);

template <template <typename> class OpT>
RunFn pick(DType dt, unsigned types) {
  RunFn fn = nullptr;
  if (types == kMinMaxTypes)
    ew::dispatch_typeset<kMinMaxTypes>(dt, [&](auto tag) { fn = &run_typed<typename decltype(tag)::type, OpT>; });
  else
    ew::dispatch_typeset<kSumTypes>(dt, [&](auto tag) { fn = &run_typed<typename decltype(tag)::type, OpT>; });
  return fn;
}

RunFn pick_op(const std::string& op, DType dt) {
  if (op == "ReduceMax") return pick<OpMax>(dt, kMinMaxTypes);
  if (op == "ReduceMin") return pick<OpMin>(dt, kMinMaxTypes);
  if (op == "ReduceSum") return pick<OpSum>(dt, kSumTypes);
  if (op == "ReduceMean") return pick<OpMean>(dt, kSumTypes);
  if (op == "ReduceProd") return pick<OpProd>(dt, kSumTypes);
  if (op == "ReduceL1") return pick<OpL1>(dt, kSumTypes);
  if (op == "ReduceL2") return pick<OpL2>(dt, kSumTypes);
  if (op == "ReduceLogSum") return pick<OpLogSum>(dt, kSumTypes);
  if (op == "ReduceLogSumExp") return pick<OpLogSumExp>(dt, kSumTypes);
  if (op == "ReduceSumSquare") return pick<OpSumSquare>(dt, kSumTypes);
  throw Error(ErrorKind::kUnsupportedOp, "unknown reduction " + op);
}

class ReduceKernel final : public Kernel {
 public:
  explicit ReduceKernel(const KernelBuildInfo& info) {
    const Shape in = info.input_shape(0);
    bool noop = false, known = true;
    std::vector<char> red = reduced_dims(info, static_cast<int64_t>(in.size()), &noop, &known);
    if (!known) info.fail(ErrorKind::kUnsupportedOp, "axes must be a constant");
    g_ = make_geom(in, red, noop);
    fn_ = pick_op(info.node().op_type, info.input_dtype(0));
  }
  void run(KernelContext& ctx) const override {
    fn_(g_, ctx.inputs[0].data, ctx.outputs[0].data, ctx.num_threads);
  }

 private:
  Geom g_;
  RunFn fn_ = nullptr;
};

bool reduce_supports(const KernelBuildInfo& info, std::string* why) {
  const std::string& op = info.node().op_type;
  if (!ew::check_input_dtype(info, 0, types_of(op), why)) return false;
  if (info.opset() >= axes_input_since(op) && info.has_input(1) && !info.input_constant(1)) {
    if (why) *why = op + " with computed axes is not supported (axes must be a constant)";
    return false;
  }
  return true;
}

}  // namespace

#define TWINFER_REDUCE_OP(name)            \
  TWINFER_REGISTER_SCHEMA(name, reduce_infer); \
  TWINFER_REGISTER_KERNEL(name, Backend::kCPU, 0, reduce_supports, make_kernel<ReduceKernel>)
TWINFER_REDUCE_OP("ReduceSum");
TWINFER_REDUCE_OP("ReduceMean");
TWINFER_REDUCE_OP("ReduceMax");
TWINFER_REDUCE_OP("ReduceMin");
TWINFER_REDUCE_OP("ReduceProd");
TWINFER_REDUCE_OP("ReduceL1");
TWINFER_REDUCE_OP("ReduceL2");
TWINFER_REDUCE_OP("ReduceLogSum");
TWINFER_REDUCE_OP("ReduceLogSumExp");
TWINFER_REDUCE_OP("ReduceSumSquare");
#undef TWINFER_REDUCE_OP

}  // namespace twinfer::reduce
