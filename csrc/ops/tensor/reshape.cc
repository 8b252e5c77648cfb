// Reshape, Flatten, Squeeze, Unsqueeze: the bytes stay as they are, only the
// shape changes, so all four share one copy kernel (a no-op when the planner
// aliases output and input). The work is in the shape rules, which keep
// symbolic dims (e.g. batch "N") wherever the spec lets them through.
#include <algorithm>

#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

bool copy_supports(const KernelBuildInfo& info, std::string* why) { return check_movable(info, 0, why); }

// ---- Reshape ------------------------------------------------------------------

// Output dims from the shape values `spec` and the input dims: 0 copies the
// input dim (unless allowzero), -1 is inferred. Input dims copied by a 0
// cancel against themselves, so [N, 3, 224, 224] -> [0, -1] gives [N, 150528]
// and [N, 768] -> [-1, 768] gives [N, 768].
SymShape reshape_dims(InferContext& c, const std::vector<int64_t>& spec, bool allowzero, const SymShape* in) {
  SymShape out;
  int infer_at = -1;
  bool has_zero = false;
  std::vector<char> copied(in ? in->size() : 0, 0);
  for (size_t i = 0; i < spec.size(); ++i) {
    const int64_t v = spec[i];
    if (v == -1) {
      if (!(infer_at < 0)) c.fail(ErrorKind::kShape, "the shape has more than one -1");
      infer_at = static_cast<int>(i);
      out.push_back(Dim());
    } else if (v == 0 && !allowzero) {
      if (!in) {
        out.push_back(Dim());
        continue;
      }
      if (!(i < in->size()))
        c.fail(ErrorKind::kShape,
               "shape value 0 at index " + std::to_string(i) + " copies a dim the input (rank " +
                   std::to_string(in->size()) + ") does not have");
      out.push_back((*in)[i]);
      copied[i] = 1;
    } else {
      if (!(v >= 0)) c.fail(ErrorKind::kShape, "invalid shape value " + std::to_string(v));
      has_zero |= v == 0;
      out.push_back(Dim(v));
    }
  }
  if (has_zero && infer_at >= 0) {
    // The spec calls a 0 (allowzero = 1) beside a -1 invalid, but
    // torch.onnx's dynamo exporter writes [batch, seq, -1, head_dim] and a
    // batch of 0 makes one; onnxruntime runs it, the -1 from the dims that
    // are not 0 ([0, 5, 32] -> [0, 5, -1, 8] gives 4), and so do we. The
    // input must be empty too.
    if (!in || !sym_shape_known(*in)) return out;
    int64_t in_nonzero = 1, out_nonzero = 1;
    bool in_empty = false;
    for (const Dim& d : *in) {
      in_empty |= d.value == 0;
      if (d.value != 0) in_nonzero *= d.value;
    }
    for (size_t i = 0; i < spec.size(); ++i)
      if (static_cast<int>(i) != infer_at && out[i].known() && out[i].value != 0) out_nonzero *= out[i].value;
    if (!(in_empty && in_nonzero % out_nonzero == 0))
      c.fail(ErrorKind::kShape,
             "the shape has both 0 (allowzero = 1) and -1, and the input " + sym_shape_str(*in) +
                 (in_empty ? "'s non-zero dims do not divide by the others" : " is not empty"));
    out[infer_at] = Dim(in_nonzero / out_nonzero);
    return out;
  }
  if (!in) return out;

  // What is left of the input once the copied dims cancel, against what is
  // left of the output.
  int64_t known_in = 1, known_out = 1;
  std::vector<const Dim*> unknown_in;
  for (size_t i = 0; i < in->size(); ++i) {
    if (copied[i]) continue;
    if ((*in)[i].known())
      known_in *= (*in)[i].value;
    else
      unknown_in.push_back(&(*in)[i]);
  }
  for (size_t i = 0; i < spec.size(); ++i)
    if (static_cast<int>(i) != infer_at && !(spec[i] == 0 && !allowzero)) known_out *= out[i].value;

  const std::string what = "cannot reshape input of shape " + sym_shape_str(*in) + " to " + [&] {
    std::string s = "[";
    for (size_t i = 0; i < spec.size(); ++i) s += (i ? ", " : "") + std::to_string(spec[i]);
    return s + "]";
  }();
  if (unknown_in.empty()) {
    if (infer_at >= 0) {
      if (!(known_out != 0 && known_in % known_out == 0)) c.fail(ErrorKind::kShape, what);
      out[infer_at] = Dim(known_in / known_out);
    } else {
      // A copied dim that is (or may be) 0 makes both sides empty, whatever
      // the rest: [0, 3] -> [0, 5] holds, and [N, 3] -> [0, 5] holds for
      // N = 0, which the plan at concrete shapes checks.
      bool copied_may_be_zero = false;
      for (size_t i = 0; i < in->size(); ++i)
        copied_may_be_zero |= copied[i] && (!(*in)[i].known() || (*in)[i].value == 0);
      if (!(known_in == known_out || copied_may_be_zero)) c.fail(ErrorKind::kShape, what);
    }
  } else if (infer_at >= 0 && unknown_in.size() == 1 && !unknown_in[0]->symbol.empty() && known_in == known_out) {
    out[infer_at] = *unknown_in[0];
  }
  return out;
}

void reshape_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(c.input_dtype(1) == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("the shape input must be int64, got ") + dtype_name(c.input_dtype(1)));
  const bool allowzero = c.opset() >= 14 && c.node().attr_int("allowzero", 0) != 0;
  std::vector<int64_t> spec;
  std::vector<std::optional<int64_t>> part;
  const bool constant = c.constant_ints(1, &spec);
  if (!constant && c.partial_ints(1, &part)) {
    // A computed shape known in part (graph/passes/partial_values.h): a
    // number it gives is the output's dim, a 0 the input's; an unknown or a
    // -1 (which needs every other dim) stays unknown.
    const SymShape* in = c.input_has_shape(0) ? &c.input_shape(0) : nullptr;
    SymShape out(part.size());
    for (size_t i = 0; i < part.size(); ++i) {
      if (!part[i]) continue;
      if (!(*part[i] >= -1))
        c.fail(ErrorKind::kShape, "invalid dim " + std::to_string(*part[i]) + " in the shape input");
      if (*part[i] > 0 || (*part[i] == 0 && allowzero)) out[i] = Dim(*part[i]);
      else if (*part[i] == 0 && in && i < in->size()) out[i] = (*in)[i];
    }
    return c.set_output(0, dt, out);
  }
  if (!constant) {
    // A computed shape: its length (when known) is the output rank.
    if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known())
      return c.set_output(0, dt, unknown_dims(c.input_shape(1)[0].value));
    return c.set_output_rank_unknown(0, dt);
  }
  const bool has_in = c.input_has_shape(0);
  c.set_output(0, dt, reshape_dims(c, spec, allowzero, has_in ? &c.input_shape(0) : nullptr));
}

// ---- Flatten ------------------------------------------------------------------

void flatten_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!c.input_has_shape(0)) return c.set_output(0, dt, unknown_dims(2));
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  int64_t axis = c.node().attr_int("axis", 1);
  if (!(axis >= -r && axis <= r))
    c.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  c.set_output(0, dt, SymShape{dim_product(in, 0, axis), dim_product(in, axis, r)});
}

// ---- Squeeze / Unsqueeze -----------------------------------------------------------

void squeeze_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  bool known = true, present = false;
  std::vector<int64_t> axes = axes_attr_or_input(c, 1, 13, &known, &present);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  if (!known) {
    if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known() &&
        c.input_shape(1)[0].value > 0)
      return c.set_output(0, dt, unknown_dims(r - c.input_shape(1)[0].value));
    return c.set_output_rank_unknown(0, dt);
  }
  SymShape out;
  if (axes.empty()) {
    // Every dim of size 1 goes; an unknown dim may or may not be 1.
    for (const Dim& d : in) {
      if (!d.known()) return c.set_output_rank_unknown(0, dt);
      if (d.value != 1) out.push_back(d);
    }
    return c.set_output(0, dt, out);
  }
  std::vector<int64_t> ax = normalize_axes(c, axes, r);
  for (int64_t i = 0; i < r; ++i) {
    if (std::find(ax.begin(), ax.end(), i) == ax.end()) {
      out.push_back(in[i]);
    } else {
      if (!(!in[i].known() || in[i].value == 1))
        c.fail(ErrorKind::kShape,
               "cannot squeeze axis " + std::to_string(i) + " of size " + in[i].str() + " (input " +
                   sym_shape_str(in) + ")");
    }
  }
  c.set_output(0, dt, out);
}

void unsqueeze_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  bool known = true, present = false;
  std::vector<int64_t> axes = axes_attr_or_input(c, 1, 13, &known, &present);
  if (!(present)) c.fail(ErrorKind::kModelFormat, "Unsqueeze needs axes");
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  if (!known) {
    if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known())
      return c.set_output(0, dt, unknown_dims(in.size() + c.input_shape(1)[0].value));
    return c.set_output_rank_unknown(0, dt);
  }
  const int64_t out_r = static_cast<int64_t>(in.size() + axes.size());
  std::vector<int64_t> ax = normalize_axes(c, axes, out_r);
  SymShape out;
  size_t next = 0;
  for (int64_t i = 0; i < out_r; ++i) {
    if (std::find(ax.begin(), ax.end(), i) != ax.end())
      out.push_back(Dim(1));
    else
      out.push_back(in[next++]);
  }
  c.set_output(0, dt, out);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Reshape", reshape_infer);
TWINFER_REGISTER_KERNEL("Reshape", Backend::kCPU, 0, copy_supports, make_kernel<CopyInput0Kernel>);
TWINFER_REGISTER_SCHEMA("Flatten", flatten_infer);
TWINFER_REGISTER_KERNEL("Flatten", Backend::kCPU, 0, copy_supports, make_kernel<CopyInput0Kernel>);
TWINFER_REGISTER_SCHEMA("Squeeze", squeeze_infer);
TWINFER_REGISTER_KERNEL("Squeeze", Backend::kCPU, 0, copy_supports, make_kernel<CopyInput0Kernel>);
TWINFER_REGISTER_SCHEMA("Unsqueeze", unsqueeze_infer);
TWINFER_REGISTER_KERNEL("Unsqueeze", Backend::kCPU, 0, copy_supports, make_kernel<CopyInput0Kernel>);

}  // namespace twinfer::tensor
