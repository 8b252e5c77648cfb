// Transpose: output dim i is input dim perm[i]. The copy is the strided walk
// of strided_copy.h, whose merged plans give the fast paths: perm [0, 2, 1, 3]
// (attention heads) copies contiguous rows, a 2-d / NCHW<->NHWC transpose
// walks cache tiles, and any other permutation runs the general walk.
#include "ops/tensor/strided_copy.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// The permutation (default: reversed dims), checked to be one.
template <typename Ctx>
std::vector<int64_t> transpose_perm(const Ctx& c, int64_t rank) {
  std::vector<int64_t> perm;
  if (c.node().has_attr("perm")) {
    perm = c.node().attr_ints("perm");
    if (static_cast<int64_t>(perm.size()) != rank)
      c.fail(ErrorKind::kShape, "perm has " + std::to_string(perm.size()) + " entries for an input of rank " +
                                    std::to_string(rank));
    perm = normalize_axes(c, perm, rank);
  } else {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return perm;
}

void transpose_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!c.input_has_shape(0)) {
    if (c.node().has_attr("perm")) return c.set_output(0, dt, unknown_dims(c.node().attr_ints("perm").size()));
    return c.set_output_rank_unknown(0, dt);
  }
  const SymShape& in = c.input_shape(0);
  std::vector<int64_t> perm = transpose_perm(c, static_cast<int64_t>(in.size()));
  SymShape out;
  for (int64_t p : perm) out.push_back(in[p]);
  c.set_output(0, dt, out);
}

class TransposeKernel final : public StridedCopyKernel {
 public:
  explicit TransposeKernel(const KernelBuildInfo& info) : StridedCopyKernel(dtype_size(info.input_dtype(0))) {
    const Shape in = info.input_shape(0);
    const std::vector<int64_t> perm = transpose_perm(info, static_cast<int64_t>(in.size()));
    const Shape strides = contiguous_strides(in);
    Shape out;
    std::vector<int64_t> in_strides;
    for (int64_t p : perm) {
      out.push_back(in[p]);
      in_strides.push_back(strides[p]);
    }
    plan_ = make_strided_plan(out, in_strides, 0);
  }
};

bool transpose_supports(const KernelBuildInfo& info, std::string* why) { return check_movable(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Transpose", transpose_infer);
TWINFER_REGISTER_KERNEL("Transpose", Backend::kCPU, 0, transpose_supports, make_kernel<TransposeKernel>);

}  // namespace twinfer::tensor
