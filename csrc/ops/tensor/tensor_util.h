// Helpers shared by the shape / data-movement ops (csrc/ops/tensor/) and the
// reductions (csrc/ops/reduce/): reading small int inputs (axes, shapes,
// pads) from constants or from run-time views, symbolic dim arithmetic for
// shape rules, and the plain byte copy most "view" ops reduce to.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::tensor {

// ---- dtypes ------------------------------------------------------------------

// Data-movement ops copy elements by their byte width, so they take every
// fixed-size dtype; strings and undefined types have no kernel.
bool is_movable_dtype(DType dt);
bool check_movable(const KernelBuildInfo& info, size_t i, std::string* why);
// Input i is int32 or int64 (indices, shapes, axes).
bool check_index_dtype(const KernelBuildInfo& info, size_t i, std::string* why);

// ---- int lists -------------------------------------------------------------------

// Reads an int32/int64 tensor as int64 values; throws kDType for other types.
std::vector<int64_t> view_ints(const TensorView& t);
// Reads one integer (any integer dtype, or a float truncated) from a
// one-element view: scalar inputs like Trilu's k or CumSum's axis.
int64_t view_scalar_int(const TensorView& t);
// A constant int input of the node being built; false when not constant.
bool const_ints(const KernelBuildInfo& info, size_t i, std::vector<int64_t>* out);

// The axes of an op that moved its attribute "axes" to an input at
// `input_since` (Squeeze/Unsqueeze 13, ReduceSum 13, other Reduce* 18).
// Sets *known = false when the input exists but is not a constant.
// *present = whether any axes were given at all.
template <typename Ctx>
std::vector<int64_t> axes_attr_or_input(const Ctx& c, size_t input, int64_t input_since,
                                        bool* known, bool* present) {
  *known = true;
  *present = false;
  std::vector<int64_t> axes;
  if (c.opset() < input_since) {
    if (c.node().has_attr("axes")) {
      *present = true;
      axes = c.node().attr_ints("axes");
    }
    return axes;
  }
  if (!c.has_input(input)) return axes;
  *present = true;
  if constexpr (std::is_same_v<Ctx, InferContext>) {
    *known = c.constant_ints(input, &axes);
  } else {
    *known = const_ints(c, input, &axes);
  }
  return axes;
}

// Normalises axes against `rank`, failing (kShape, naming the node) when one
// is out of range or repeated.
template <typename Ctx>
std::vector<int64_t> normalize_axes(const Ctx& c, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> r;
  r.reserve(axes.size());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      c.fail(ErrorKind::kShape, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    int64_t n = a < 0 ? a + rank : a;
    for (int64_t p : r)
      if (p == n) c.fail(ErrorKind::kShape, "axis " + std::to_string(a) + " is repeated");
    r.push_back(n);
  }
  return r;
}

// ---- symbolic dims -----------------------------------------------------------

// The product of dims: known when every factor is, a symbol when exactly one
// factor is symbolic and the rest multiply to 1 (or any factor is 0 -> 0),
// else unknown.
Dim dim_product(const SymShape& s, size_t begin, size_t end);
inline Dim dim_product(const SymShape& s) { return dim_product(s, 0, s.size()); }
// A vector of n unknown dims.
inline SymShape unknown_dims(size_t n) { return SymShape(n); }

// ---- copies ------------------------------------------------------------------

// memcpy split over threads (skipped when dst == src: the planner may alias).
void copy_bytes(void* dst, const void* src, size_t bytes, int threads);

// One kernel for every op whose output is its input's bytes unchanged
// (Reshape, Flatten, Squeeze, Unsqueeze): only the shape differs.
class CopyInput0Kernel final : public Kernel {
 public:
  explicit CopyInput0Kernel(const KernelBuildInfo&) {}
  void run(KernelContext& ctx) const override;
};

// Elements per thread below which a copy loop stays on one thread.
constexpr int64_t kCopyGrain = 1 << 16;

}  // namespace twinfer::tensor
