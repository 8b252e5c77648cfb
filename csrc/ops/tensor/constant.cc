// Constant (every value_* attribute form) and ConstantOfShape. Both normally
// disappear at load time: constant folding runs these kernels once and keeps
// the result as a constant value.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// The one tensor a Constant node stands for, built from whichever value_*
// attribute it carries. Fails (naming the node) for sparse values.
template <typename Ctx>
Tensor constant_value(const Ctx& c) {
  const graph::Node& n = c.node();
  using AT = graph::Attribute::Type;
  static const char* kForms[] = {"value", "value_float", "value_floats", "value_int", "value_ints",
                                 "value_string", "value_strings", "sparse_value"};
  const graph::Attribute* a = nullptr;
  std::string form;
  for (const char* f : kForms)
    if (const graph::Attribute* x = n.attr(f)) {
      if (a) c.fail(ErrorKind::kModelFormat, "has more than one value attribute ('" + form + "', '" + f + "')");
      a = x;
      form = f;
    }
  if (!a) c.fail(ErrorKind::kModelFormat, "has no value attribute");
  if (form == "value_string") {
    if (a->type != AT::kString) c.fail(ErrorKind::kModelFormat, "attribute 'value_string' must be a string");
    return Tensor::strings({}, {a->s});
  }
  if (form == "value_strings") {
    if (a->type != AT::kStrings) c.fail(ErrorKind::kModelFormat, "attribute 'value_strings' must be strings");
    return Tensor::strings({static_cast<int64_t>(a->strings.size())}, a->strings);
  }
  if (form == "sparse_value") c.fail(ErrorKind::kUnsupportedOp, "sparse constants are not supported");
  if (form == "value") {
    if (a->type != AT::kTensor) c.fail(ErrorKind::kModelFormat, "attribute 'value' must be a tensor");
    if (a->t.dtype() != DType::kString && !is_movable_dtype(a->t.dtype()))
      c.fail(ErrorKind::kDType, std::string("unsupported dtype ") + dtype_name(a->t.dtype()) + " of the constant");
    return a->t;
  }
  if (form == "value_float" || form == "value_floats") {
    std::vector<float> v = n.attr_floats(form);
    Tensor t = Tensor::empty(DType::kFloat32, form == "value_float" ? Shape{} : Shape{int64_t(v.size())});
    if (form == "value_float" && v.size() != 1) c.fail(ErrorKind::kModelFormat, "value_float must be one float");
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
    return t;
  }
  std::vector<int64_t> v = n.attr_ints(form);
  Tensor t = Tensor::empty(DType::kInt64, form == "value_int" ? Shape{} : Shape{int64_t(v.size())});
  if (form == "value_int" && v.size() != 1) c.fail(ErrorKind::kModelFormat, "value_int must be one int");
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

void constant_infer(InferContext& c) {
  Tensor t = constant_value(c);
  c.set_output(0, t.dtype(), sym_shape_from(t.shape()));
}

class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(const KernelBuildInfo& info) : value_(constant_value(info)) {}
  void run(KernelContext& ctx) const override {
    if (value_.dtype() == DType::kString) {  // objects: assigned, not copied as bytes
      std::copy_n(value_.data_as<const std::string>(), value_.numel(), ctx.outputs[0].as<std::string>());
      return;
    }
    copy_bytes(ctx.outputs[0].data, value_.data(), value_.bytes(), ctx.num_threads);
  }

 private:
  Tensor value_;
};

// ---- ConstantOfShape ---------------------------------------------------------------

// The fill value: the 'value' attribute (one element, any dtype), default float32 0.
template <typename Ctx>
Tensor fill_value(const Ctx& c) {
  const graph::Attribute* a = c.node().attr("value");
  if (!a) {
    Tensor t = Tensor::empty(DType::kFloat32, Shape{});
    *t.template data_as<float>() = 0.f;
    return t;
  }
  if (a->type != graph::Attribute::Type::kTensor || a->t.numel() != 1)
    c.fail(ErrorKind::kModelFormat, "attribute 'value' must be a one-element tensor");
  if (!is_movable_dtype(a->t.dtype()))
    c.fail(ErrorKind::kDType, std::string("unsupported dtype ") + dtype_name(a->t.dtype()) + " of the value");
  return a->t;
}

void constant_of_shape_infer(InferContext& c) {
  const DType dt = fill_value(c).dtype();
  DType sdt = c.input_dtype(0);
  if (!(sdt == DType::kInt64 || sdt == DType::kInt32))
    c.fail(ErrorKind::kDType, std::string("the shape input must be int64, got ") + dtype_name(sdt));
  std::vector<std::optional<int64_t>> dims;  // known in part: graph/passes/partial_values.h
  if (c.partial_ints(0, &dims)) {
    SymShape s;
    for (const auto& d : dims) {
      if (!(!d || *d >= 0))
        c.fail(ErrorKind::kShape, "negative dim " + std::to_string(d.value_or(0)) + " in the shape input");
      s.push_back(d ? Dim(*d) : Dim());
    }
    return c.set_output(0, dt, s);
  }
  if (c.input_has_shape(0) && c.input_shape(0).size() == 1 && c.input_shape(0)[0].known())
    return c.set_output(0, dt, unknown_dims(c.input_shape(0)[0].value));
  c.set_output_rank_unknown(0, dt);
}

class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelBuildInfo& info) : value_(fill_value(info)) {}
  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    dispatch_bytes(y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      std::memcpy(&v, value_.data(), sizeof(T));
      T* p = y.as<T>();
      parallel_for(y.numel(), ctx.num_threads, kCopyGrain, [&](int64_t b, int64_t e) {
        std::fill(p + b, p + e, v);
      });
    });
  }

 private:
  Tensor value_;
};

bool constant_of_shape_supports(const KernelBuildInfo& info, std::string* why) {
  return check_index_dtype(info, 0, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Constant", constant_infer);
TWINFER_REGISTER_STRING_KERNEL("Constant", 0, nullptr, make_kernel<ConstantKernel>, "");
TWINFER_REGISTER_SCHEMA("ConstantOfShape", constant_of_shape_infer);
TWINFER_REGISTER_KERNEL("ConstantOfShape", Backend::kCPU, 0, constant_of_shape_supports,
                        make_kernel<ConstantOfShapeKernel>);

}  // namespace twinfer::tensor
