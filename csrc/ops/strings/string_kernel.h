// What the string ops share. String tensors hold std::string elements
// (core/tensor.h) and live only in eagerly evaluated graphs; their kernels
// are registered with TWINFER_REGISTER_STRING_KERNEL.
#pragma once
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::strings {

// A shape rule's check: input i is a string tensor.
void require_strings(const InferContext& c, size_t i, const char* what);
// supports(): input i is a string tensor.
bool input_is_strings(const KernelBuildInfo& info, size_t i, std::string* why);

class StringKernel : public Kernel {
 public:
  explicit StringKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {}
  const char* impl_name() const override { return "strings"; }

 protected:
  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const { throw Error(kind, msg, node_, op_); }
  std::string node_, op_;
};

// For kernels whose output shapes follow from the values (StringSplit,
// StringNormalizer): run() serves an evaluator that knows the shapes already
// and copies what run_dynamic made into its buffers.
class DynamicStringKernel : public StringKernel {
 public:
  using StringKernel::StringKernel;
  bool dynamic_outputs() const override { return true; }
  void run(KernelContext& ctx) const override;
};

// UTF-8 <-> code points, for the ops that change case. Throws kInvalidArgument
// (naming `node`) for bytes that are not UTF-8.
std::u32string utf8_decode(const std::string& s, const std::string& node, const std::string& op);
std::string utf8_encode(const std::u32string& s);

}  // namespace twinfer::strings
