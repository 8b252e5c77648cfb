// Slice (opset 10+ form: starts, ends, optional axes and steps as inputs;
// before 10, starts/ends/axes attributes and no steps),
// with ONNX's clamping and negative steps. The copy is a strided walk: the
// start is an offset, each step a (possibly negative) stride.
#include <algorithm>

#include "ops/tensor/strided_copy.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// Start and length along one dim of size d, clamped as the spec says.
void slice_axis(int64_t d, int64_t start, int64_t end, int64_t step, int64_t* first, int64_t* len) {
  // |step| >= d takes at most one element; clamping keeps -step and the
  // strides derived from it from overflowing (step = INT64_MIN).
  step = std::clamp<int64_t>(step, -std::max<int64_t>(d, 1), std::max<int64_t>(d, 1));
  if (d == 0) {
    *first = 0;
    *len = 0;
    return;
  }
  if (start < 0) start += d;
  if (end < 0) end += d;
  int64_t diff;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, d);
    end = std::clamp<int64_t>(end, 0, d);
    diff = end - start;
  } else {
    start = std::clamp<int64_t>(start, 0, d - 1);
    end = std::clamp<int64_t>(end, -1, d - 1);
    diff = start - end;
    step = -step;
  }
  *first = start;
  *len = diff <= 0 ? 0 : (diff - 1) / step + 1;
}

// The per-axis arguments, checked; axes normalised (default 0..n-1), steps
// default 1.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

template <typename Ctx>
SliceArgs check_args(const Ctx& c, SliceArgs a, int64_t rank) {
  const size_t n = a.starts.size();
  if (a.ends.size() != n)
    c.fail(ErrorKind::kShape, "starts has " + std::to_string(n) + " values, ends " + std::to_string(a.ends.size()));
  if (a.axes.empty() && !c.has_input(3))
    for (size_t i = 0; i < n; ++i) a.axes.push_back(static_cast<int64_t>(i));
  if (a.axes.size() != n)
    c.fail(ErrorKind::kShape, "axes has " + std::to_string(a.axes.size()) + " values, starts " + std::to_string(n));
  a.axes = normalize_axes(c, a.axes, rank);
  if (a.steps.empty() && !c.has_input(4)) a.steps.assign(n, 1);
  if (a.steps.size() != n)
    c.fail(ErrorKind::kShape, "steps has " + std::to_string(a.steps.size()) + " values, starts " + std::to_string(n));
  for (int64_t s : a.steps)
    if (s == 0) c.fail(ErrorKind::kShape, "a step of 0");
  return a;
}

// Opsets 1-9: the arguments are attributes.
template <typename Ctx>
SliceArgs attr_args(const Ctx& c) {
  SliceArgs a;
  a.starts = c.node().attr_ints("starts");
  a.ends = c.node().attr_ints("ends");
  a.axes = c.node().attr_ints("axes");
  return a;
}

// Reads inputs 1..4 when every present one is constant.
bool const_args(const KernelBuildInfo& info, SliceArgs* a) {
  if (info.opset() < 10) {
    *a = attr_args(info);
    return true;
  }
  return const_ints(info, 1, &a->starts) && const_ints(info, 2, &a->ends) &&
         (!info.has_input(3) || const_ints(info, 3, &a->axes)) &&
         (!info.has_input(4) || const_ints(info, 4, &a->steps));
}

// Slicing a whole symbolic dim ([0, huge) step 1) keeps its symbol.
bool slices_all(int64_t start, int64_t end, int64_t step) {
  return start == 0 && step == 1 && end >= (int64_t(1) << 31) - 1;
}

void slice_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  for (size_t i = 1; i < 5; ++i)
    if (c.has_input(i))
      if (!(c.input_dtype(i) == DType::kInt64 || c.input_dtype(i) == DType::kInt32))
        c.fail(ErrorKind::kDType,
               "input " + std::to_string(i) + " must be int32/int64, got " + dtype_name(c.input_dtype(i)));
  SliceArgs a;
  if (c.opset() < 10) {
    a = attr_args(c);
    if (!(!a.starts.empty() || c.node().has_attr("starts")))
      c.fail(ErrorKind::kModelFormat, "attribute starts is missing");
  }
  bool known = true;
  if (c.opset() >= 10) {
    // Each input asked for, known or not (no short-circuit): the engine keys
    // plans by the inputs a rule asks for (graph/passes/shape_inputs.h), so
    // starts, ends, axes and steps fed at run time all key one.
    const bool starts = c.constant_ints(1, &a.starts), ends = c.constant_ints(2, &a.ends);
    const bool axes = !c.has_input(3) || c.constant_ints(3, &a.axes);
    const bool steps = !c.has_input(4) || c.constant_ints(4, &a.steps);
    known = starts && ends && axes && steps;
  }
  if (!known) {
    // Dims outside the sliced axes keep theirs when the axes are known.
    std::vector<int64_t> axes;
    SymShape out = in;
    if (c.has_input(3) && c.constant_ints(3, &axes)) {
      for (int64_t ax : normalize_axes(c, axes, r)) out[ax] = Dim();
      return c.set_output(0, dt, out);
    }
    return c.set_output(0, dt, unknown_dims(r));
  }
  a = check_args(c, a, r);
  SymShape out = in;
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const int64_t ax = a.axes[i];
    if (in[ax].known()) {
      int64_t first, len;
      slice_axis(in[ax].value, a.starts[i], a.ends[i], a.steps[i], &first, &len);
      out[ax] = Dim(len);
    } else if (!slices_all(a.starts[i], a.ends[i], a.steps[i])) {
      out[ax] = Dim();
    }
  }
  c.set_output(0, dt, out);
}

class SliceKernel final : public StridedCopyKernel {
 public:
  explicit SliceKernel(const KernelBuildInfo& info)
      : StridedCopyKernel(dtype_size(info.input_dtype(0))), in_(info.input_shape(0)), has_axes_(info.has_input(3)),
        has_steps_(info.has_input(4)) {
    SliceArgs a;
    if (const_args(info, &a)) {
      plan_ = make_plan(check_args(info, a, static_cast<int64_t>(in_.size())));
      constant_ = true;
    }
  }

  bool fixed_plan() const override { return constant_; }

  void run(KernelContext& ctx) const override {
    if (constant_) return strided_copy(plan_, elem_, ctx.inputs[0].data, ctx.outputs[0].data, ctx.num_threads);
    // Computed starts/ends (rare: the output shape was known anyway); the
    // plan is made per run.
    SliceArgs a;
    a.starts = view_ints(ctx.inputs[1]);
    a.ends = view_ints(ctx.inputs[2]);
    if (has_axes_) a.axes = view_ints(ctx.inputs[3]);
    if (has_steps_) a.steps = view_ints(ctx.inputs[4]);
    RunCheck rc{has_axes_, has_steps_};
    StridedPlan p = make_plan(check_args(rc, a, static_cast<int64_t>(in_.size())));
    if (p.numel != ctx.outputs[0].numel())
      throw Error(ErrorKind::kShape, "Slice arguments do not give the planned output shape");
    strided_copy(p, elem_, ctx.inputs[0].data, ctx.outputs[0].data, ctx.num_threads);
  }

 private:
  // check_args' view of a run: which optional inputs exist, failures as plain errors.
  struct RunCheck {
    bool axes, steps;
    bool has_input(size_t i) const { return i == 3 ? axes : i == 4 ? steps : true; }
    [[noreturn]] void fail(ErrorKind k, const std::string& m) const { throw Error(k, m, "", "Slice"); }
  };

  StridedPlan make_plan(const SliceArgs& a) const {
    const Shape strides = contiguous_strides(in_);
    Shape out = in_;
    std::vector<int64_t> in_strides = strides;
    int64_t offset = 0;
    for (size_t i = 0; i < a.axes.size(); ++i) {
      const int64_t ax = a.axes[i];
      int64_t first, len;
      slice_axis(in_[ax], a.starts[i], a.ends[i], a.steps[i], &first, &len);
      out[ax] = len;
      const int64_t lim = std::max<int64_t>(in_[ax], 1);  // as in slice_axis
      in_strides[ax] = strides[ax] * std::clamp<int64_t>(a.steps[i], -lim, lim);
      offset += first * strides[ax];
    }
    return make_strided_plan(out, in_strides, offset);
  }

  Shape in_;
  bool has_axes_, has_steps_;
  bool constant_ = false;
};

bool slice_supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_movable(info, 0, why)) return false;
  for (size_t i = 1; i < 5; ++i)
    if (info.has_input(i) && !check_index_dtype(info, i, why)) return false;
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Slice", slice_infer);
TWINFER_REGISTER_KERNEL("Slice", Backend::kCPU, 0, slice_supports, make_kernel<SliceKernel>);

}  // namespace twinfer::tensor
