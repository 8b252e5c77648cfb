// One copy engine for every op whose output element (i0, ..., in) is the
// input element at offset + sum(ik * stride_k): Transpose (permuted strides),
// Slice (start offset, stepped and negative strides), Expand and Tile (zero
// strides), DepthToSpace / SpaceToDepth (a 6-d transpose). The plan is built
// once per kernel; run() only walks it.
//
// The plan drops size-1 dims and merges neighbours that are contiguous in the
// input too, so e.g. Transpose perm [0, 2, 1, 3] becomes rows of contiguous
// memcpy, and NCHW -> NHWC becomes a batched 2-d transpose. Two walks:
//  - rows: the innermost output dim is copied as one run per row (memcpy when
//    its input stride is 1, a fill when 0, a strided loop otherwise);
//  - tiles: when the innermost output dim is strided in the input but some
//    other dim is contiguous there (a transpose), the two are walked in
//    square tiles so both the reads and the writes stay in cache;
//  - interleaved rows: when the innermost dim is 2-4 long and strided and
//    the one before it contiguous (DepthToSpace), a row is the last two
//    dims, written from 2-4 contiguous input runs.
#pragma once
#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "ops/kernel.h"

namespace twinfer::tensor {

struct StridedPlan {
  Shape dims;                        // output dims after merging (row-major, contiguous)
  std::vector<int64_t> in_strides;   // input stride of each dim, in elements
  int64_t in_offset = 0;             // input element of output element 0
  int64_t numel = 0;
  int tile_dim = -1;                 // dim contiguous in the input (tile walk), or -1
  // The last dim is short (2-4) and strided while the one before it is
  // contiguous in the input (DepthToSpace, PixelShuffle): rows are the last
  // two dims, each the interleave of the last dim's input rows.
  bool interleave = false;
};

// out_dims: the output shape; in_strides: the input stride (elements) that
// each output dim advances; in_offset: where output element 0 reads from.
StridedPlan make_strided_plan(const Shape& out_dims, const std::vector<int64_t>& in_strides,
                              int64_t in_offset);

// Copies elements of `elem_size` bytes (1, 2, 4, 8 or any other width).
void strided_copy(const StridedPlan& plan, size_t elem_size, const void* in, void* out, int threads);

// The CPU kernel of an op whose whole work is one strided copy of input 0
// with a plan fixed when the kernel is built. Another backend runs the same
// copy from plan() (backends/cuda/movement.cu), so each op's index
// arithmetic is written once.
class StridedCopyKernel : public Kernel {
 public:
  void run(KernelContext& ctx) const override {
    strided_copy(plan_, elem_, ctx.inputs[0].data, ctx.outputs[0].data, ctx.num_threads);
  }
  // False when the plan depends on run-time values (a Slice with computed
  // starts): then plan() is not the copy.
  virtual bool fixed_plan() const { return true; }
  const StridedPlan& plan() const { return plan_; }
  size_t elem_size() const { return elem_; }

 protected:
  explicit StridedCopyKernel(size_t elem) : elem_(elem) {}
  size_t elem_;
  StridedPlan plan_;
};

}  // namespace twinfer::tensor
