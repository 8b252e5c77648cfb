// Expand (broadcast to a shape) and Tile (repeat): both are strided walks
// with stride 0 along the repeated dims. Tile views its output as
// [r0, d0, r1, d1, ...] reading input strides [0, s0, 0, s1, ...]. Their
// kernels need only the concrete input and output shapes.
#include "ops/tensor/strided_copy.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

bool movable_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

void check_int64_input(InferContext& c, size_t i) {
  if (!(c.input_dtype(i) == DType::kInt64))
    c.fail(ErrorKind::kDType, "input " + std::to_string(i) + " must be int64, got " + dtype_name(c.input_dtype(i)));
}

// Length of a 1-d input when its shape says so, else -1.
int64_t known_length(InferContext& c, size_t i) {
  if (!c.input_has_shape(i) || c.input_shape(i).size() != 1 || !c.input_shape(i)[0].known()) return -1;
  return c.input_shape(i)[0].value;
}

// ---- Expand ------------------------------------------------------------------

void expand_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  check_int64_input(c, 1);
  std::vector<std::optional<int64_t>> spec;
  const bool has_in = c.input_has_shape(0);
  // A target known in part (graph/passes/partial_values.h): its unknown
  // elements broadcast as unknown dims.
  if (c.partial_ints(1, &spec)) {
    SymShape target;
    for (const auto& v : spec) {
      if (!(!v || *v >= 0))
        c.fail(ErrorKind::kShape, "negative dim " + std::to_string(v.value_or(0)) + " in the shape input");
      target.push_back(v ? Dim(*v) : Dim());
    }
    if (!has_in) return c.set_output_rank_unknown(0, dt);
    try {
      return c.set_output(0, dt, broadcast_sym_shapes(c.input_shape(0), target));
    } catch (const Error& e) {
      c.fail(ErrorKind::kShape, e.what());
    }
  }
  const int64_t len = known_length(c, 1);
  if (!has_in || len < 0) return c.set_output_rank_unknown(0, dt);
  // The shape values are unknown, but an input dim > 1 survives broadcasting.
  const SymShape& in = c.input_shape(0);
  const size_t r = std::max<size_t>(in.size(), static_cast<size_t>(len));
  SymShape out(r);
  for (size_t i = 0; i < in.size(); ++i) {
    const Dim& d = in[in.size() - 1 - i];
    if (d.known() && d.value != 1) out[r - 1 - i] = d;
  }
  c.set_output(0, dt, out);
}

class ExpandKernel final : public StridedCopyKernel {
 public:
  explicit ExpandKernel(const KernelBuildInfo& info) : StridedCopyKernel(dtype_size(info.input_dtype(0))) {
    const Shape out = info.output_shape(0);
    Shape in = info.input_shape(0);
    in.insert(in.begin(), out.size() - in.size(), 1);
    const Shape st = contiguous_strides(in);
    std::vector<int64_t> strides(out.size());
    for (size_t d = 0; d < out.size(); ++d) strides[d] = in[d] == out[d] ? st[d] : 0;
    plan_ = make_strided_plan(out, strides, 0);
  }
};

// ---- Tile --------------------------------------------------------------------

void tile_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  check_int64_input(c, 1);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  std::vector<int64_t> reps;
  if (!c.constant_ints(1, &reps)) return c.set_output(0, dt, unknown_dims(in.size()));
  if (!(reps.size() == in.size()))
    c.fail(ErrorKind::kShape,
           "repeats has " + std::to_string(reps.size()) + " values for an input of rank " + std::to_string(in.size()));
  SymShape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!(reps[i] >= 0)) c.fail(ErrorKind::kShape, "negative repeat " + std::to_string(reps[i]));
    if (in[i].known())
      out.push_back(Dim(in[i].value * reps[i]));
    else if (reps[i] == 1)
      out.push_back(in[i]);
    else
      out.push_back(reps[i] == 0 ? Dim(0) : Dim());
  }
  c.set_output(0, dt, out);
}

class TileKernel final : public StridedCopyKernel {
 public:
  explicit TileKernel(const KernelBuildInfo& info) : StridedCopyKernel(dtype_size(info.input_dtype(0))) {
    const Shape in = info.input_shape(0), out = info.output_shape(0);
    const Shape st = contiguous_strides(in);
    Shape dims;
    std::vector<int64_t> strides;
    for (size_t d = 0; d < in.size(); ++d) {
      dims.push_back(in[d] == 0 ? 0 : out[d] / in[d]);
      strides.push_back(0);
      dims.push_back(in[d]);
      strides.push_back(st[d]);
    }
    plan_ = make_strided_plan(dims, strides, 0);
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Expand", expand_infer);
TWINFER_REGISTER_KERNEL("Expand", Backend::kCPU, 0, movable_supports, make_kernel<ExpandKernel>);
TWINFER_REGISTER_SCHEMA("Tile", tile_infer);
TWINFER_REGISTER_KERNEL("Tile", Backend::kCPU, 0, movable_supports, make_kernel<TileKernel>);

}  // namespace twinfer::tensor
