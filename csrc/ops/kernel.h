// Kernels: what runs one node on one backend. Registered once, in the op's
// own file, keyed by (op type, backend) with a supports() predicate and a
// priority; the planner takes the highest-priority kernel that supports the
// node. A kernel is built for concrete input shapes and is immutable after
// creation, so many execution contexts (threads) may run it at once.
//
// It lives in ops/ because ops and backends register here and passes ask it
// whether a fused op has a kernel; the runtime (planner) only selects from it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_api.h"
#include "core/tensor.h"
#include "graph/ir.h"

namespace twinfer {

// What a kernel factory sees: the node, and its inputs/outputs with concrete
// shapes and dtypes (after shape inference), including constant inputs.
class KernelBuildInfo {
 public:
  KernelBuildInfo(const graph::Graph& g, const graph::Node& n, int64_t opset, Backend b, Precision p)
      : graph_(g), node_(n), opset_(opset), backend_(b), precision_(p) {}
  const graph::Node& node() const { return node_; }
  // The same node as another backend sees it (a device kernel that reuses a
  // CPU kernel's plan builds that kernel from this).
  KernelBuildInfo for_backend(Backend b) const { return KernelBuildInfo(graph_, node_, opset_, b, precision_); }
  int64_t opset() const { return opset_; }
  Backend backend() const { return backend_; }
  Precision precision() const { return precision_; }
  // Built to run once (constant folding, the eager evaluator): a kernel may
  // skip preparing what pays off only over many runs (weights in another
  // layout), since it would pay for it on every evaluation.
  bool single_run() const { return single_run_; }
  KernelBuildInfo& set_single_run(bool v) {
    single_run_ = v;
    return *this;
  }
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && node_.inputs[i] >= 0; }
  bool has_output(size_t i) const { return i < node_.outputs.size() && node_.outputs[i] >= 0; }
  const graph::Value& input(size_t i) const;
  const graph::Value& output(size_t i) const;
  DType input_dtype(size_t i) const { return input(i).dtype; }
  Shape input_shape(size_t i) const;   // concrete
  Shape output_shape(size_t i) const;  // concrete
  const Tensor* input_constant(size_t i) const {
    return has_input(i) && input(i).is_constant() ? &input(i).constant : nullptr;
  }
  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const;

 private:
  const graph::Graph& graph_;
  const graph::Node& node_;
  int64_t opset_;
  Backend backend_;
  Precision precision_;
  bool single_run_ = false;
};

// Per-run arguments. Missing optional inputs/outputs have data == nullptr.
struct KernelContext {
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  void* scratch = nullptr;        // scratch_bytes() bytes, from the context's arena
  int num_threads = 1;            // CPU: threads this run may use
  // Device kernels: the stream to enqueue on (CUDA kernels launch there; the
  // simulated device runs the CPU kernels in its order). Null on the host.
  Stream* stream = nullptr;
  // `stream` held, where a dynamic-output kernel runs on a device
  // (runtime/staged_tail.h): its outputs are allocated in that stream's
  // order (Tensor::empty_on). Null in plans.
  std::shared_ptr<Stream> stream_ref;
  void* backend_state = nullptr;  // CUDA: the context's kernel error flag (backends/cuda/error_flag.h)
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void run(KernelContext& ctx) const = 0;
  virtual size_t scratch_bytes() const { return 0; }
  // An input whose buffer output 0 may take over (-1: none): the kernel
  // reads that input only before it writes output 0's bytes, or reads each
  // element before writing the same element. A host plan gives output 0 that
  // input's block where no later step reads it (runtime/plan_builder.cc), so
  // the kernel finds ctx.outputs[0].data == ctx.inputs[k].data.
  virtual int output_may_take_input() const { return -1; }
  // Short description for reports ("onednn conv", "reference").
  virtual const char* impl_name() const { return "reference"; }
  // Kernels whose output shapes are known only once they run (If, Loop...)
  // return true and implement run_dynamic: it reads ctx.inputs and returns
  // freshly allocated outputs. Used when a graph is evaluated eagerly.
  virtual bool dynamic_outputs() const { return false; }
  virtual std::vector<Tensor> run_dynamic(KernelContext& ctx) const;
  // A dynamic-output device kernel may also come in two halves, so that the
  // nodes a device runs alone side by side wait once between them
  // (runtime/staged_tail.cc): count() enqueues the work that sizes the
  // outputs, ending with count_slots() int32 counts written to `counts`
  // (device memory, in the stream's order; the returned state keeps its
  // scratch); after the caller's one wait, finish() gets those counts on
  // the host and enqueues the outputs' writing. 0 slots: run_dynamic only.
  virtual int64_t count_slots() const { return 0; }
  virtual std::shared_ptr<void> count(KernelContext& ctx, int32_t* counts) const;
  virtual std::vector<Tensor> finish(KernelContext& ctx, const int32_t* host_counts,
                                     const std::shared_ptr<void>& state) const;
};

using SupportsFn = bool (*)(const KernelBuildInfo&, std::string* why_not);
using CreateFn = std::unique_ptr<Kernel> (*)(const KernelBuildInfo&);

struct KernelDef {
  std::string op_type;
  std::string domain;
  Backend backend;
  int priority;          // higher wins among kernels that support a node
  SupportsFn supports;   // nullptr: supports every node of this op
  CreateFn create;
  // Whether the kernel handles string tensors (std::string elements, see
  // core/tensor.h). A node with a string input or output gets only such
  // kernels: every other kernel copies elements as bytes, which would
  // duplicate the strings' owners. Registered with TWINFER_REGISTER_STRING_KERNEL.
  bool strings = false;
  // Optional (TWINFER_REGISTER_ANY_SIZE_KERNEL): a kernel for the node that
  // takes any sizes of its non-constant operands' last two dims at run time
  // (ctx's shapes; ranks, batch dims, dtypes, attributes and constants as in
  // the info), or nullptr where it cannot. The kernel cache asks for it once
  // a node has been built at two such sizes (a decoder's attention products
  // as the past grows: runtime/kernel_cache.h), so that each new plan does
  // not build the node again. Its scratch_bytes() must be 0.
  CreateFn create_any_size = nullptr;
};

// Kernels the eager evaluator may keep from one run to the next
// (runtime/eval_kernels.h). It evaluates a graph whose every value is a
// constant, so a kernel built as it stands would bake that run's data in;
// `per_run[v]` marks the values that are this run's (the graph's inputs and
// what is computed from them) rather than the model's weights. Null: the
// node's kernel is built for this run only.
class KernelReuse {
 public:
  virtual ~KernelReuse() = default;
  virtual std::shared_ptr<const Kernel> kernel(const graph::Graph& g, const graph::Node& n, int64_t opset,
                                               const std::vector<char>& per_run) = 0;
  // A run (one evaluation of the graph) starts: what no recent run used may go.
  virtual void begin_run() {}
};

void register_kernel(const KernelDef& def);
// The best kernel for the node on this backend, or nullptr (why_not says why).
const KernelDef* select_kernel(const KernelBuildInfo& info, std::string* why_not);
bool any_kernel_for(const std::string& domain, const std::string& op_type, Backend backend);
// Every op with a kernel on `backend` ("Add", "com.twinfer::Conv"), sorted.
std::vector<std::string> ops_with_kernels(Backend backend);

template <typename K>
std::unique_ptr<Kernel> make_kernel(const KernelBuildInfo& info) {
  return std::make_unique<K>(info);
}

struct KernelRegistrar {
  KernelRegistrar(const char* op, Backend b, int priority, SupportsFn s, CreateFn c,
                  const char* domain = "", bool strings = false, CreateFn any_size = nullptr) {
    register_kernel(KernelDef{op, domain, b, priority, s, c, strings, any_size});
  }
};

// Whether any present input or output of the node is a string tensor.
bool node_has_strings(const KernelBuildInfo& info);

#define TWINFER_KCONCAT_INNER(a, b) a##b
#define TWINFER_KCONCAT(a, b) TWINFER_KCONCAT_INNER(a, b)
// TWINFER_REGISTER_KERNEL("Relu", Backend::kCPU, 0, supports_fn_or_nullptr, make_kernel<ReluKernel>)
// (__COUNTER__, not __LINE__: an op list such as TWINFER_UNARY_OPS expands
// many registrations on one line.)
#define TWINFER_REGISTER_KERNEL(op, backend, priority, supports, create, ...)          \
  static ::twinfer::KernelRegistrar TWINFER_KCONCAT(kernel_reg_, __COUNTER__)(         \
      op, backend, priority, supports, create, ##__VA_ARGS__)
// A kernel with a variant for any matrix sizes (KernelDef::create_any_size):
// TWINFER_REGISTER_ANY_SIZE_KERNEL("MatMul", Backend::kCPU, 10, supports, create, create_any_size, domain)
#define TWINFER_REGISTER_ANY_SIZE_KERNEL(op, backend, priority, supports, create, any_size, domain) \
  static ::twinfer::KernelRegistrar TWINFER_KCONCAT(kernel_reg_, __COUNTER__)(                   \
      op, backend, priority, supports, create, domain, false, any_size)
// A CPU kernel that may see string tensors (it may also take other types;
// its supports() decides): TWINFER_REGISTER_STRING_KERNEL("Equal", 1, supports, create[, domain])
#define TWINFER_REGISTER_STRING_KERNEL(op, priority, supports, create, domain)          \
  static ::twinfer::KernelRegistrar TWINFER_KCONCAT(kernel_reg_, __COUNTER__)(         \
      op, ::twinfer::Backend::kCPU, priority, supports, create, domain, true)

}  // namespace twinfer
