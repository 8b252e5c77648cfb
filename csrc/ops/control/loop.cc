// Loop: body(iteration, cond, carried...) -> (cond, carried..., scan parts...)
// repeated while iteration < M and cond. Carried values keep their types when
// the body keeps them; scan outputs stack one part per iteration, so their
// length is known only by running (the plan then evaluates eagerly).
#include <cstring>
#include <limits>

#include "ops/control/control_util.h"

namespace twinfer::control {
namespace {

size_t num_carried(const InferContext& c) { return graph::explicit_input_count(c.node()) - 2; }

void loop_infer(InferContext& c) {
  const auto& body = c.node().required_attr("body");
  if (!(body.g != nullptr)) c.fail(ErrorKind::kModelFormat, "body must be a graph");
  const size_t n = num_carried(c);
  if (!(body.g->inputs.size() == n + 2))
    c.fail(ErrorKind::kModelFormat,
           "body takes " + std::to_string(body.g->inputs.size()) + " inputs; expected " + std::to_string(n + 2));
  std::vector<ValueType> in{ValueType{DType::kInt64, true, {}}, ValueType{DType::kBool, true, {}}};
  for (size_t i = 0; i < n; ++i) in.push_back(input_type(c, 2 + i));
  auto out = infer_subgraph(c, *body.g, in);
  if (!(out.size() >= n + 1)) c.fail(ErrorKind::kModelFormat, "body must output cond and every carried value");
  for (size_t i = 0; i < n; ++i) {
    // A carried sequence/optional takes the body's type: ONNX lets an
    // optional(T) go in and a T come out (loop16_seq_none).
    const bool container = dtype_is_container(in[2 + i].dtype) || dtype_is_container(out[1 + i].dtype);
    if (container && out[1 + i].dtype != DType::kUndefined) set_output_type(c, i, out[1 + i]);
    else set_output_type(c, i, merge_types(c, in[2 + i], out[1 + i], i));
  }
  for (size_t k = n + 1; k < out.size(); ++k) {
    ValueType t{out[k].dtype, out[k].has_shape, {}};
    if (t.has_shape) {
      t.shape.push_back(Dim());  // iterations: known once run
      t.shape.insert(t.shape.end(), out[k].shape.begin(), out[k].shape.end());
    }
    set_output_type(c, n + (k - (n + 1)), t);
  }
}

Tensor stack(const std::vector<Tensor>& parts, DType dtype, const Shape& part_shape) {
  Shape shape{static_cast<int64_t>(parts.size())};
  shape.insert(shape.end(), part_shape.begin(), part_shape.end());
  Tensor out = Tensor::empty(dtype, shape);
  char* dst = static_cast<char*>(out.data());
  for (const auto& p : parts) {
    std::memcpy(dst, p.data(), p.bytes());
    dst += p.bytes();
  }
  return out;
}

class LoopKernel final : public Kernel {
 public:
  explicit LoopKernel(const KernelBuildInfo& info) : node_(info.node().name), body_(info, "body") {
    carried_ = graph::explicit_input_count(info.node()) - 2;
    for (size_t k = carried_ + 1; k < body_.graph().outputs.size(); ++k) {
      const auto& v = body_.graph().values[body_.graph().outputs[k]];
      // The body may leave the type out (inference supplies it): the node's then.
      const size_t out = carried_ + (k - (carried_ + 1));
      scan_types_.push_back(v.dtype == DType::kUndefined && info.has_output(out) ? info.output(out).dtype : v.dtype);
      scan_shapes_.push_back(empty_part_shape(info, out, {0}, v));  // for zero trips
    }
  }
  void run(KernelContext& ctx) const override { copy_to_outputs(run_dynamic(ctx), ctx, node_, "Loop"); }
  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    int64_t trips = std::numeric_limits<int64_t>::max();
    if (ctx.inputs[0].data) trips = read_int(ctx.inputs[0]);
    bool cond = true;
    if (ctx.inputs[1].data) cond = *static_cast<const bool*>(ctx.inputs[1].data);
    std::vector<Tensor> carried;
    for (size_t i = 0; i < carried_; ++i) carried.push_back(borrow_view(ctx.inputs[2 + i]).clone());
    std::vector<std::vector<Tensor>> parts(scan_types_.size());
    for (int64_t it = 0; it < trips && cond; ++it) {
      Tensor iter = Tensor::empty(DType::kInt64, {});
      *iter.data_as<int64_t>() = it;
      Tensor c = Tensor::empty(DType::kBool, {});
      *c.data_as<bool>() = cond;
      std::vector<Tensor> in{iter, c};
      in.insert(in.end(), carried.begin(), carried.end());
      std::vector<Tensor> out = body_.run(in, ctx);
      if (out[0].numel() != 1 || out[0].dtype() != DType::kBool)
        throw Error(ErrorKind::kShape, "the body's cond output must be one bool", node_, "Loop");
      cond = *out[0].data_as<bool>();
      for (size_t i = 0; i < carried_; ++i) carried[i] = out[1 + i];
      for (size_t k = 0; k < parts.size(); ++k) {
        const Tensor& p = out[1 + carried_ + k];
        if (!parts[k].empty() && p.shape() != parts[k][0].shape())
          throw Error(ErrorKind::kShape, "scan output " + std::to_string(k) + " changed shape from " +
                                             shape_str(parts[k][0].shape()) + " to " + shape_str(p.shape()),
                      node_, "Loop");
        parts[k].push_back(p);
      }
    }
    std::vector<Tensor> result = carried;
    for (size_t k = 0; k < parts.size(); ++k)
      result.push_back(parts[k].empty() ? stack({}, scan_types_[k], scan_shapes_[k])
                                        : stack(parts[k], parts[k][0].dtype(), parts[k][0].shape()));
    return result;
  }
  const char* impl_name() const override { return "subgraph"; }

 private:
  static int64_t read_int(const TensorView& v) {
    if (v.numel() != 1) throw Error(ErrorKind::kShape, "M must hold one element", "", "Loop");
    return v.dtype == DType::kInt32 ? *v.as<const int32_t>() : *v.as<const int64_t>();
  }
  std::string node_;
  Body body_;
  size_t carried_ = 0;
  std::vector<DType> scan_types_;
  std::vector<Shape> scan_shapes_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Loop", loop_infer);
TWINFER_REGISTER_KERNEL("Loop", Backend::kCPU, 0, nullptr, make_kernel<LoopKernel>);

}  // namespace twinfer::control
