// Scan (opset 9+): body(states..., slices...) -> (states..., parts...), run
// once per position along each scan input's axis (forward or reverse); the
// parts stack along each scan output's axis. The sequence length comes from
// the input shapes, so plans stay static.
#include <cstring>

#include "ops/control/control_util.h"

namespace twinfer::control {
namespace {

struct ScanAttrs {
  size_t states = 0, scan_in = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

ScanAttrs scan_attrs(const graph::Node& n, size_t explicit_inputs, size_t body_outputs) {
  ScanAttrs a;
  a.scan_in = static_cast<size_t>(n.required_attr("num_scan_inputs").i);
  if (a.scan_in > explicit_inputs)
    throw Error(ErrorKind::kModelFormat, "num_scan_inputs exceeds the inputs", n.name, n.op_type);
  a.states = explicit_inputs - a.scan_in;
  const size_t scan_out = body_outputs >= a.states ? body_outputs - a.states : 0;
  a.in_axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(a.scan_in, 0));
  a.in_dirs = n.attr_ints("scan_input_directions", std::vector<int64_t>(a.scan_in, 0));
  a.out_axes = n.attr_ints("scan_output_axes", std::vector<int64_t>(scan_out, 0));
  a.out_dirs = n.attr_ints("scan_output_directions", std::vector<int64_t>(scan_out, 0));
  if (a.in_axes.size() != a.scan_in || a.in_dirs.size() != a.scan_in || a.out_axes.size() != scan_out ||
      a.out_dirs.size() != scan_out)
    throw Error(ErrorKind::kModelFormat, "scan axes/directions lists do not match the scan inputs/outputs",
                n.name, n.op_type);
  return a;
}

int64_t norm(int64_t axis, size_t rank, const graph::Node& n) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw Error(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r),
                n.name, n.op_type);
  return axis < 0 ? axis + r : axis;
}

void scan_infer(InferContext& c) {
  c.check(c.opset() >= 9, ErrorKind::kUnsupportedOp, "Scan before opset 9 (batched, with sequence_lens) is not supported");
  const auto& body = c.node().required_attr("body");
  c.check(body.g != nullptr, ErrorKind::kModelFormat, "body must be a graph");
  const ScanAttrs a = scan_attrs(c.node(), graph::explicit_input_count(c.node()), body.g->outputs.size());
  std::vector<ValueType> in;
  for (size_t i = 0; i < a.states; ++i) in.push_back(input_type(c, i));
  Dim seq;
  bool seq_set = false;
  for (size_t j = 0; j < a.scan_in; ++j) {
    ValueType t = input_type(c, a.states + j);
    if (t.has_shape) {
      const int64_t ax = norm(a.in_axes[j], t.shape.size(), c.node());
      if (!seq_set) {
        seq = t.shape[ax];
        seq_set = true;
      }
      t.shape.erase(t.shape.begin() + ax);
    }
    in.push_back(t);
  }
  auto out = infer_subgraph(c, *body.g, in);
  for (size_t i = 0; i < a.states; ++i) set_output_type(c, i, merge_types(c, in[i], out[i], i));
  for (size_t k = 0; k < a.out_axes.size(); ++k) {
    ValueType t = out[a.states + k];
    if (t.has_shape) {
      const int64_t ax = norm(a.out_axes[k], t.shape.size() + 1, c.node());
      t.shape.insert(t.shape.begin() + ax, seq);
    }
    set_output_type(c, a.states + k, t);
  }
}

// Splits a shape around `axis`: elements before it, its length, bytes after.
struct Around {
  int64_t outer = 1, len = 0;
  size_t inner_bytes = 0;
};
Around around(const Shape& s, int64_t axis, DType dt) {
  Around r;
  for (int64_t d = 0; d < axis; ++d) r.outer *= s[d];
  r.len = s[axis];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  r.inner_bytes = static_cast<size_t>(inner) * dtype_size(dt);
  return r;
}

class ScanKernel final : public Kernel {
 public:
  explicit ScanKernel(const KernelBuildInfo& info) : node_(info.node().name), body_(info, "body") {
    a_ = scan_attrs(info.node(), graph::explicit_input_count(info.node()), body_.graph().outputs.size());
    // An empty scan output takes the body's declared type, or, where the
    // body leaves it out (ONNX lets inference supply it), the node's.
    for (size_t k = 0; k < a_.out_axes.size(); ++k) {
      DType t = body_.graph().values[body_.graph().outputs[a_.states + k]].dtype;
      if (t == DType::kUndefined && info.has_output(a_.states + k)) t = info.output(a_.states + k).dtype;
      empty_types_.push_back(t);
    }
  }
  void run(KernelContext& ctx) const override { copy_to_outputs(run_dynamic(ctx), ctx, node_, "Scan"); }
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    std::vector<Tensor> states;
    for (size_t i = 0; i < a_.states; ++i) states.push_back(borrow_view(ctx.inputs[i]).clone());
    int64_t seq = -1;
    std::vector<int64_t> axes;
    for (size_t j = 0; j < a_.scan_in; ++j) {
      const TensorView& x = ctx.inputs[a_.states + j];
      const int64_t ax = norm_axis(a_.in_axes[j], x.rank());
      axes.push_back(ax);
      if (seq < 0) seq = x.shape[ax];
      if (x.shape[ax] != seq)
        throw Error(ErrorKind::kShape, "scan inputs have different lengths (" + std::to_string(seq) + " and " +
                                           std::to_string(x.shape[ax]) + ")", node_, "Scan");
    }
    if (seq < 0) seq = 0;
    std::vector<std::vector<Tensor>> parts(a_.out_axes.size());
    for (int64_t t = 0; t < seq; ++t) {
      std::vector<Tensor> in = states;
      for (size_t j = 0; j < a_.scan_in; ++j) {
        const TensorView& x = ctx.inputs[a_.states + j];
        const int64_t pos = a_.in_dirs[j] ? seq - 1 - t : t;
        in.push_back(slice(x, axes[j], pos));
      }
      std::vector<Tensor> out = body_.run(in, ctx);
      for (size_t i = 0; i < a_.states; ++i) states[i] = out[i];
      for (size_t k = 0; k < parts.size(); ++k) parts[k].push_back(out[a_.states + k]);
    }
    std::vector<Tensor> result = states;
    for (size_t k = 0; k < parts.size(); ++k) result.push_back(stack(parts[k], k, seq));
    return result;
  }
  const char* impl_name() const override { return "subgraph"; }

 private:
  int64_t norm_axis(int64_t axis, size_t rank) const {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) throw Error(ErrorKind::kShape, "scan axis out of range", node_, "Scan");
    return axis < 0 ? axis + r : axis;
  }
  static Tensor slice(const TensorView& x, int64_t axis, int64_t pos) {
    const Around a = around(x.shape, axis, x.dtype);
    Shape s = x.shape;
    s.erase(s.begin() + axis);
    Tensor out = Tensor::empty(x.dtype, s);
    const char* src = static_cast<const char*>(x.data);
    char* dst = static_cast<char*>(out.data());
    for (int64_t o = 0; o < a.outer; ++o)
      std::memcpy(dst + o * a.inner_bytes, src + (o * a.len + pos) * a.inner_bytes, a.inner_bytes);
    return out;
  }
  Tensor stack(const std::vector<Tensor>& parts, size_t k, int64_t seq) const {
    if (parts.empty()) {
      const auto& v = body_.graph().values[body_.graph().outputs[a_.states + k]];
      Shape s = v.has_shape && sym_shape_known(v.shape) ? sym_shape_values(v.shape) : Shape{};
      const int64_t ax = norm_axis(a_.out_axes[k], s.size() + 1);
      s.insert(s.begin() + ax, 0);
      return Tensor::empty(empty_types_[k], s);
    }
    Shape s = parts[0].shape();
    const int64_t ax = norm_axis(a_.out_axes[k], s.size() + 1);
    s.insert(s.begin() + ax, seq);
    Tensor out = Tensor::empty(parts[0].dtype(), s);
    const Around a = around(s, ax, out.dtype());
    char* dst = static_cast<char*>(out.data());
    for (int64_t t = 0; t < seq; ++t) {
      if (parts[t].shape() != parts[0].shape())
        throw Error(ErrorKind::kShape, "scan output " + std::to_string(k) + " changed shape", node_, "Scan");
      const int64_t pos = a_.out_dirs[k] ? seq - 1 - t : t;
      const char* src = static_cast<const char*>(parts[t].data());
      for (int64_t o = 0; o < a.outer; ++o)
        std::memcpy(dst + (o * seq + pos) * a.inner_bytes, src + o * a.inner_bytes, a.inner_bytes);
    }
    return out;
  }

  std::string node_;
  Body body_;
  ScanAttrs a_;
  std::vector<DType> empty_types_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Scan", scan_infer);
TWINFER_REGISTER_KERNEL("Scan", Backend::kCPU, 0, nullptr, make_kernel<ScanKernel>);

}  // namespace twinfer::control
