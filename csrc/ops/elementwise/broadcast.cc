#include "ops/elementwise/broadcast.h"

#include "core/error.h"
#include "ops/elementwise/binary_kernel.h"
#include "ops/elementwise/binary_ops.h"

namespace twinfer::ew {

BroadcastPlan make_broadcast_plan(const std::vector<Shape>& inputs, const Shape& out) {
  const int nin = static_cast<int>(inputs.size());
  TWINFER_CHECK(nin >= 1 && nin <= kMaxBroadcastInputs, ErrorKind::kRuntime,
                "broadcast plan needs 1 to 3 inputs");
  const size_t rank = out.size();
  BroadcastPlan p;
  p.num_inputs = nin;
  p.total = shape_numel(out);

  // Per output dim: its size and each input's element stride (0 = broadcast).
  std::vector<std::array<int64_t, kMaxBroadcastInputs>> strides(rank);  // zero-filled
  for (int k = 0; k < nin; ++k) {
    const Shape& s = inputs[k];
    TWINFER_CHECK(s.size() <= rank, ErrorKind::kShape,
                  "cannot broadcast " + shape_str(s) + " to " + shape_str(out));
    const size_t lead = rank - s.size();
    int64_t st = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t dim = d < lead ? 1 : s[d - lead];
      TWINFER_CHECK(dim == out[d] || dim == 1, ErrorKind::kShape,
                    "cannot broadcast " + shape_str(s) + " to " + shape_str(out));
      strides[d][k] = dim == 1 ? 0 : st;
      st *= dim;
    }
  }

  // Keep dims of size > 1 and merge a dim into the one before it when every
  // input steps through both as one run: stride[prev] == stride[cur] * size[cur].
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, kMaxBroadcastInputs>> dstr;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < nin; ++k)
        merge = merge && dstr.back()[k] == strides[d][k] * out[d];
      if (merge) {
        dims.back() *= out[d];
        dstr.back() = strides[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    dstr.push_back(strides[d]);
  }
  for (auto& s : dstr)
    for (int k = nin; k < kMaxBroadcastInputs; ++k) s[k] = 0;

  if (dims.empty()) {  // a single element (or an empty tensor with rank 0 dims)
    p.inner = 1;
    p.inner_stride = {0, 0, 0};
    return p;
  }
  p.inner = dims.back();
  p.inner_stride = dstr.back();
  dims.pop_back();
  dstr.pop_back();
  p.outer = std::move(dims);
  p.outer_stride = std::move(dstr);
  return p;
}

}  // namespace twinfer::ew

namespace twinfer::ew {

BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins) {
  std::vector<Shape> shapes;
  for (size_t i : ins) shapes.push_back(info.input_shape(i));
  const graph::Node& n = info.node();
  if (n.op_type == "PRelu" && n.domain.empty() && shapes.size() == 2)
    shapes[1] = prelu_slope_shape(info.opset(), shapes[0], shapes[1]);
  try {
    return make_broadcast_plan(shapes, info.output_shape(0));
  } catch (const Error& e) {
    info.fail(ErrorKind::kShape, e.what());
  }
}

}  // namespace twinfer::ew
