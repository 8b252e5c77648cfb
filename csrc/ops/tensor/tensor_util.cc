#include "ops/tensor/tensor_util.h"

#include <cstring>

#include "core/parallel.h"

namespace twinfer::tensor {

bool is_movable_dtype(DType dt) { return dt != DType::kString && dt != DType::kUndefined; }

bool check_movable(const KernelBuildInfo& info, size_t i, std::string* why) {
  DType dt = info.input_dtype(i);
  if (is_movable_dtype(dt)) return true;
  if (why) *why = info.node().op_type + " does not support dtype " + dtype_name(dt);
  return false;
}

bool check_index_dtype(const KernelBuildInfo& info, size_t i, std::string* why) {
  DType dt = info.input_dtype(i);
  if (dt == DType::kInt64 || dt == DType::kInt32) return true;
  if (why)
    *why = info.node().op_type + " needs int32 or int64 for input " + std::to_string(i) + ", got " +
           dtype_name(dt);
  return false;
}

std::vector<int64_t> view_ints(const TensorView& t) {
  const int64_t n = t.numel();
  if (t.dtype == DType::kInt64) return std::vector<int64_t>(t.as<const int64_t>(), t.as<const int64_t>() + n);
  if (t.dtype == DType::kInt32) return std::vector<int64_t>(t.as<const int32_t>(), t.as<const int32_t>() + n);
  throw Error(ErrorKind::kDType, std::string("expected int32/int64 values, got ") + dtype_name(t.dtype));
}

int64_t view_scalar_int(const TensorView& t) {
  if (t.numel() != 1) throw Error(ErrorKind::kShape, "expected a one-element tensor, got shape " + shape_str(t.shape));
  int64_t v = 0;
  if (t.dtype == DType::kBool) return *t.as<const bool>() ? 1 : 0;
  if (dtype_is_integer(t.dtype)) {
    dispatch_integer(t.dtype, [&](auto tag) { v = static_cast<int64_t>(*t.as<const typename decltype(tag)::type>()); });
    return v;
  }
  double d = 0;
  switch (t.dtype) {
    case DType::kFloat32: d = *t.as<const float>(); break;
    case DType::kFloat64: d = *t.as<const double>(); break;
    case DType::kFloat16: d = half_to_float(t.as<const half_t>()->bits); break;
    case DType::kBFloat16: d = bf16_to_float(t.as<const bfloat16_t>()->bits); break;
    default: dispatch_unsupported(t.dtype, "a scalar integer input");
  }
  // A float to int64 cast of NaN, inf or past 2^63 is undefined in C++.
  if (!(d > -9.2e18 && d < 9.2e18))
    throw Error(ErrorKind::kInvalidArgument, "a scalar used as an integer is " + std::to_string(d) +
                                                 ", which no integer is");
  return static_cast<int64_t>(d);
}

bool const_ints(const KernelBuildInfo& info, size_t i, std::vector<int64_t>* out) {
  const Tensor* t = info.input_constant(i);
  if (!t) return false;
  if (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)
    info.fail(ErrorKind::kDType, std::string("expected an int64 input, got ") + dtype_name(t->dtype()));
  *out = view_ints(t->view());
  return true;
}

Dim dim_product(const SymShape& s, size_t begin, size_t end) {
  int64_t known = 1;
  int symbolic = 0;
  const Dim* sym = nullptr;
  for (size_t i = begin; i < end; ++i) {
    if (s[i].known()) {
      known *= s[i].value;
    } else {
      ++symbolic;
      sym = &s[i];
    }
  }
  if (symbolic == 0 || known == 0) return Dim(known);
  if (symbolic == 1 && known == 1) return *sym;
  return Dim();
}

void copy_bytes(void* dst, const void* src, size_t bytes, int threads) {
  if (dst == src || bytes == 0) return;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  parallel_for(static_cast<int64_t>(bytes), threads, int64_t(1) << 20,
               [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
}

void CopyInput0Kernel::run(KernelContext& ctx) const {
  copy_bytes(ctx.outputs[0].data, ctx.inputs[0].data, ctx.outputs[0].bytes(), ctx.num_threads);
}

}  // namespace twinfer::tensor
