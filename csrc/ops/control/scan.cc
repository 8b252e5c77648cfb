// Scan (opset 9+): body(states..., slices...) -> (states..., parts...), run
// once per position along each scan input's axis (forward or reverse); the
// parts stack along each scan output's axis. The sequence length comes from
// the input shapes, so plans stay static.
//
// Scan-8 is batched: an optional sequence_lens input first, states
// [batch, ...] and scan inputs [batch, seq, ...] (scan axis 1), one opset-9
// scan per batch item over its own length; scan outputs are
// [batch, max seq, ...], zero past an item's length (the spec leaves those
// values undefined).
#include <algorithm>
#include <cstring>

#include "ops/control/control_util.h"

namespace twinfer::control {
namespace {

struct ScanAttrs {
  size_t states = 0, scan_in = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

// Inputs before the states: Scan-8's sequence_lens slot.
size_t lead_inputs(int64_t opset) { return opset < 9 ? 1 : 0; }

ScanAttrs scan_attrs(const graph::Node& n, size_t explicit_inputs, size_t body_outputs, int64_t opset) {
  ScanAttrs a;
  const size_t lead = lead_inputs(opset);
  if (explicit_inputs < lead)
    throw Error(ErrorKind::kModelFormat, "Scan-8 needs its sequence_lens input slot (empty when absent)", n.name,
                n.op_type);
  explicit_inputs -= lead;
  a.scan_in = static_cast<size_t>(n.required_attr("num_scan_inputs").i);
  if (a.scan_in > explicit_inputs)
    throw Error(ErrorKind::kModelFormat, "num_scan_inputs exceeds the inputs", n.name, n.op_type);
  a.states = explicit_inputs - a.scan_in;
  const size_t scan_out = body_outputs >= a.states ? body_outputs - a.states : 0;
  // Scan-8: per batch item, each scan input's axis is its first; directions
  // are "directions".
  a.in_axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(a.scan_in, 0));
  a.in_dirs = n.attr_ints(opset < 9 ? "directions" : "scan_input_directions", std::vector<int64_t>(a.scan_in, 0));
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

// Scan-8's batch axis: dropped from an input's type, or put back in front.
ValueType drop_batch(ValueType t) {
  if (t.has_shape && !t.shape.empty()) t.shape.erase(t.shape.begin());
  return t;
}

void scan_infer(InferContext& c) {
  const auto& body = c.node().required_attr("body");
  if (!(body.g != nullptr)) c.fail(ErrorKind::kModelFormat, "body must be a graph");
  const int64_t opset = c.opset();
  const bool batched = opset < 9;
  const size_t lead = lead_inputs(opset);
  const ScanAttrs a = scan_attrs(c.node(), graph::explicit_input_count(c.node()), body.g->outputs.size(), opset);
  std::vector<ValueType> in;
  Dim batch;
  bool batch_set = false;
  auto note_batch = [&](const ValueType& t) {
    if (batched && !batch_set && t.has_shape && !t.shape.empty()) {
      batch = t.shape[0];
      batch_set = true;
    }
  };
  for (size_t i = 0; i < a.states; ++i) {
    const ValueType t = input_type(c, lead + i);
    note_batch(t);
    in.push_back(batched ? drop_batch(t) : t);
  }
  Dim seq;
  bool seq_set = false;
  for (size_t j = 0; j < a.scan_in; ++j) {
    ValueType t = input_type(c, lead + a.states + j);
    note_batch(t);
    if (batched) t = drop_batch(t);
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
  auto with_batch = [&](ValueType t) {
    if (batched && t.has_shape) t.shape.insert(t.shape.begin(), batch);
    return t;
  };
  for (size_t i = 0; i < a.states; ++i) set_output_type(c, i, with_batch(merge_types(c, in[i], out[i], i)));
  for (size_t k = 0; k < a.out_axes.size(); ++k) {
    ValueType t = out[a.states + k];
    if (t.has_shape) {
      const int64_t ax = norm(a.out_axes[k], t.shape.size() + 1, c.node());
      t.shape.insert(t.shape.begin() + ax, seq);
    }
    set_output_type(c, a.states + k, with_batch(t));
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
  explicit ScanKernel(const KernelBuildInfo& info)
      : node_(info.node().name), body_(info, "body"), lead_(lead_inputs(info.opset())) {
    a_ = scan_attrs(info.node(), graph::explicit_input_count(info.node()), body_.graph().outputs.size(),
                    info.opset());
    has_lens_ = lead_ > 0 && info.has_input(0);
    // An empty scan output takes the body's declared type, or, where the
    // body leaves it out (ONNX lets inference supply it), the node's.
    for (size_t k = 0; k < a_.out_axes.size(); ++k) {
      const graph::Value& body_out = body_.graph().values[body_.graph().outputs[a_.states + k]];
      DType t = body_out.dtype;
      if (t == DType::kUndefined && info.has_output(a_.states + k)) t = info.output(a_.states + k).dtype;
      empty_types_.push_back(t);
      // The axes the scan adds to a part: Scan-8's batch and sequence, else
      // the output's scan axis (negative ones count in the output's rank).
      std::vector<int64_t> added{0, 1};
      if (!lead_) {
        int64_t ax = a_.out_axes[k];
        if (ax < 0 && info.has_output(a_.states + k) && info.output(a_.states + k).has_shape)
          ax += static_cast<int64_t>(info.output(a_.states + k).shape.size());
        else if (ax < 0 && body_out.has_shape)
          ax += static_cast<int64_t>(body_out.shape.size()) + 1;
        added = {ax};
      }
      empty_parts_.push_back(empty_part_shape(info, a_.states + k, added, body_out));
    }
    // Scan-8 with a batch of 0: the states' item shapes, which no item shows.
    for (size_t i = 0; lead_ && i < a_.states; ++i) {
      const graph::Value& body_out = body_.graph().values[body_.graph().outputs[i]];
      empty_states_.push_back(empty_part_shape(info, i, {0}, body_out));
      state_types_.push_back(info.has_output(i) && info.output(i).dtype != DType::kUndefined ? info.output(i).dtype
                                                                                             : body_out.dtype);
    }
  }
  void run(KernelContext& ctx) const override { copy_to_outputs(run_dynamic(ctx), ctx, node_, "Scan"); }
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    if (lead_) return run_batched(ctx);
    std::vector<Tensor> states, xs;
    for (size_t i = 0; i < a_.states; ++i) states.push_back(borrow_view(ctx.inputs[i]).clone());
    for (size_t j = 0; j < a_.scan_in; ++j) xs.push_back(borrow_view(ctx.inputs[a_.states + j]));
    return scan(std::move(states), xs, -1, ctx);
  }
  const char* impl_name() const override { return "subgraph"; }

 private:
  // One scan: the states, then the scan inputs along their axes, over the
  // first `len` positions (len < 0: all of them).
  std::vector<Tensor> scan(std::vector<Tensor> states, const std::vector<Tensor>& xs, int64_t len,
                           KernelContext& ctx) const {
    int64_t seq = -1;
    std::vector<int64_t> axes;
    for (size_t j = 0; j < a_.scan_in; ++j) {
      const Tensor& x = xs[j];
      const int64_t ax = norm_axis(a_.in_axes[j], x.shape().size());
      axes.push_back(ax);
      if (seq < 0) seq = x.shape()[ax];
      if (x.shape()[ax] != seq)
        throw Error(ErrorKind::kShape, "scan inputs have different lengths (" + std::to_string(seq) + " and " +
                                           std::to_string(x.shape()[ax]) + ")", node_, "Scan");
    }
    if (seq < 0) seq = 0;
    if (len >= 0) seq = std::min(seq, len);
    std::vector<std::vector<Tensor>> parts(a_.out_axes.size());
    for (int64_t t = 0; t < seq; ++t) {
      std::vector<Tensor> in = states;
      for (size_t j = 0; j < a_.scan_in; ++j) {
        const int64_t pos = a_.in_dirs[j] ? seq - 1 - t : t;
        in.push_back(slice(xs[j].view(), axes[j], pos));
      }
      std::vector<Tensor> out = body_.run(in, ctx);
      for (size_t i = 0; i < a_.states; ++i) states[i] = out[i];
      for (size_t k = 0; k < parts.size(); ++k) parts[k].push_back(out[a_.states + k]);
    }
    std::vector<Tensor> result = states;
    for (size_t k = 0; k < parts.size(); ++k) result.push_back(stack(parts[k], k, seq));
    return result;
  }

  // Scan-8: one scan per batch item over its own length; the results stacked
  // along a new batch axis, scan outputs zero-padded to the longest length.
  std::vector<Tensor> run_batched(KernelContext& ctx) const {
    int64_t batch = -1, max_seq = -1;
    auto note = [&](const TensorView& v, bool scan_input) {
      if (v.rank() < (scan_input ? 2u : 1u))
        throw Error(ErrorKind::kShape, std::string("Scan-8 ") + (scan_input ? "scan inputs need [batch, seq, ...]"
                                                                            : "states need [batch, ...]"),
                    node_, "Scan");
      if (batch >= 0 && v.shape[0] != batch)
        throw Error(ErrorKind::kShape, "Scan-8 inputs have different batch sizes (" + std::to_string(batch) +
                                           " and " + std::to_string(v.shape[0]) + ")", node_, "Scan");
      batch = v.shape[0];
      if (scan_input) max_seq = v.shape[1];
    };
    for (size_t i = 0; i < a_.states + a_.scan_in; ++i) note(ctx.inputs[lead_ + i], i >= a_.states);
    if (batch < 0) batch = 0;
    if (max_seq < 0) max_seq = 0;
    std::vector<int64_t> lens(static_cast<size_t>(batch), max_seq);
    if (has_lens_) {
      const TensorView& l = ctx.inputs[0];
      if (l.dtype != DType::kInt64 || l.numel() != batch)
        throw Error(ErrorKind::kShape, "sequence_lens must be int64 [" + std::to_string(batch) + "]", node_, "Scan");
      for (int64_t b = 0; b < batch; ++b) {
        lens[b] = static_cast<const int64_t*>(l.data)[b];
        if (lens[b] < 0 || lens[b] > max_seq)
          throw Error(ErrorKind::kInvalidArgument, "sequence_lens[" + std::to_string(b) + "] is " +
                                                       std::to_string(lens[b]) + ", outside 0.." + std::to_string(max_seq),
                      node_, "Scan");
      }
    }
    std::vector<std::vector<Tensor>> per_item;  // [batch][output]
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> states, xs;
      for (size_t i = 0; i < a_.states; ++i) states.push_back(slice(ctx.inputs[lead_ + i], 0, b));
      for (size_t j = 0; j < a_.scan_in; ++j) xs.push_back(slice(ctx.inputs[lead_ + a_.states + j], 0, b));
      per_item.push_back(scan(std::move(states), xs, lens[b], ctx));
    }
    const size_t outputs = a_.states + a_.out_axes.size();
    std::vector<Tensor> result;
    for (size_t o = 0; o < outputs; ++o) {
      const bool scan_out = o >= a_.states;
      // One item's element shape and type (an item of length 0 has none for
      // a scan output: another item's, or the body's declaration).
      const Tensor* like = nullptr;
      for (const auto& r : per_item)
        if (!scan_out || r[o].shape()[0] > 0) {
          like = &r[o];
          break;
        }
      Shape elem;
      DType dt = scan_out ? empty_types_[o - a_.states] : DType::kFloat32;
      if (like) {
        elem = like->shape();
        if (scan_out) elem.erase(elem.begin());
        dt = like->dtype();
      } else if (!per_item.empty()) {
        elem = per_item[0][o].shape();
        if (scan_out) elem.erase(elem.begin());
      } else {
        elem = scan_out ? empty_parts_[o - a_.states] : empty_states_[o];
        if (!scan_out) dt = state_types_[o];
      }
      Shape s = elem;
      if (scan_out) s.insert(s.begin(), max_seq);
      s.insert(s.begin(), batch);
      Tensor out = Tensor::empty(dt, s);
      if (out.bytes()) std::memset(out.data(), 0, out.bytes());
      const size_t item_bytes = out.bytes() / static_cast<size_t>(std::max<int64_t>(batch, 1));
      for (int64_t b = 0; b < batch; ++b) {
        const Tensor& r = per_item[b][o];
        Shape want = elem;
        if (scan_out) want.insert(want.begin(), lens[b]);
        if (r.shape() != want || r.dtype() != dt)
          throw Error(ErrorKind::kShape, "Scan-8 output " + std::to_string(o) + " differs between batch items",
                      node_, "Scan");
        if (r.bytes()) std::memcpy(static_cast<char*>(out.data()) + b * item_bytes, r.data(), r.bytes());
      }
      result.push_back(std::move(out));
    }
    return result;
  }

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
      Shape s = empty_parts_[k];
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
  size_t lead_ = 0;        // Scan-8: sequence_lens comes first
  bool has_lens_ = false;  // ... and is given
  ScanAttrs a_;
  std::vector<DType> empty_types_;
  std::vector<Shape> empty_parts_;   // per scan output: a part's shape when there are none (empty_part_shape)
  std::vector<Shape> empty_states_;  // Scan-8: per state, an item's shape when the batch is 0
  std::vector<DType> state_types_;   // ... and its type
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Scan", scan_infer);
TWINFER_REGISTER_KERNEL("Scan", Backend::kCPU, 0, nullptr, make_kernel<ScanKernel>);

}  // namespace twinfer::control
