// What the sequence and optional ops share. Their values are host objects (a
// TensorList behind a kSequence/kOptional tensor, see core/tensor.h) that
// exist only in eagerly evaluated graphs, so every kernel here has dynamic
// outputs; run() serves the case where the evaluator already knows an output's
// shape (SequenceAt, SequenceLength...) and copies into the buffer it gives.
#pragma once
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::sequence {

// The full type of a value, outermost first ({kSequence, kFloat32}).
std::vector<DType> full_type(DType dtype, const std::vector<DType>& elem_type);
std::vector<DType> full_type(const Tensor& t);
std::string full_type_str(const std::vector<DType>& t);  // "sequence(float32)"; "?" when empty

// The type inside input i when it is a sequence (or an optional, for
// `kind` kOptional): from its value when known, else from its declaration;
// empty when unknown. Throws kDType naming the node when input i is not one.
std::vector<DType> input_elem_type(const InferContext& c, size_t i, DType kind);

// Output i holds a value of type `t` (outermost first; empty: unknown), of
// unknown shape.
void set_output_typed(InferContext& c, size_t i, const std::vector<DType>& t);

// Input i as a position (an int32/int64 scalar).
int64_t read_index(const TensorView& v, const std::string& node, const std::string& op, const char* what);

// A value the kernel may keep past this run: arrays are copied out of the
// view (which may point into an evaluator's temporary); sequences/optionals
// get a new list sharing the items (items are never written once built).
Tensor keep(const TensorView& v);

class SequenceKernel : public Kernel {
 public:
  explicit SequenceKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {}
  void run(KernelContext& ctx) const override;  // run_dynamic, copied into ctx.outputs
  bool dynamic_outputs() const override { return true; }
  const char* impl_name() const override { return "sequence"; }

 protected:
  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const { throw Error(kind, msg, node_, op_); }
  // The list of input i; fails naming the node when it is not a sequence.
  const TensorList& sequence_input(const KernelContext& ctx, size_t i) const;
  std::string node_, op_;
};

}  // namespace twinfer::sequence
