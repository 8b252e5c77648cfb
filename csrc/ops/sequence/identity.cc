// Identity of a sequence or optional. The array Identity copies bytes into a
// planned buffer; these values have no bytes, so this kernel (preferred when
// the input is one) hands on the same items in a new list.
#include "ops/sequence/sequence_util.h"

namespace twinfer::sequence {
namespace {

bool container_input(const KernelBuildInfo& info, std::string* why_not) {
  if (info.has_input(0) && dtype_is_container(info.input_dtype(0))) return true;
  if (why_not) *why_not = "input is not a sequence or optional";
  return false;
}

class ContainerIdentityKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override { return {keep(ctx.inputs[0])}; }
};

}  // namespace

TWINFER_REGISTER_KERNEL("Identity", Backend::kCPU, 100, container_input, make_kernel<ContainerIdentityKernel>);

}  // namespace twinfer::sequence
