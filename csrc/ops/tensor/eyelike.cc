// EyeLike(input 2-D) -> a matrix of the input's shape with ones on the k-th
// diagonal (k > 0 above the main one) and zeros elsewhere, of dtype `dtype`
// (an ONNX type code; the input's dtype when absent).
#include <cstring>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kEyeTypes = ew::kAllTypes;

template <typename Ctx>
DType eyelike_dtype(const Ctx& c, DType in) {
  if (!c.node().has_attr("dtype")) return in;
  const DType dt = dtype_from_onnx(static_cast<int32_t>(c.node().attr_int("dtype", 1)));
  if (!ew::in_typeset(kEyeTypes, dt))
    c.fail(ErrorKind::kDType, "EyeLike does not support dtype code " + std::to_string(c.node().attr_int("dtype", 1)));
  return dt;
}

void eyelike_infer(InferContext& c) {
  const DType dt = eyelike_dtype(c, c.input_dtype(0));
  if (!(ew::in_typeset(kEyeTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("EyeLike does not support ") + dtype_name(dt));
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).size() == 2))
      c.fail(ErrorKind::kShape, "input " + sym_shape_str(c.input_shape(0)) + " must be 2-D");
  if (!c.input_has_shape(0)) return c.set_output(0, dt, unknown_dims(2));
  c.set_output(0, dt, c.input_shape(0));
}

class EyeLikeKernel final : public Kernel {
 public:
  explicit EyeLikeKernel(const KernelBuildInfo& info) : k_(info.node().attr_int("k", 0)) {}
  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    std::memset(y.data, 0, y.bytes());
    const int64_t rows = y.shape[0], cols = y.shape[1];
    ew::dispatch_typeset<kEyeTypes>(y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = y.as<T>();
      T one;
      if constexpr (ew::is_half_v<T>) one = ew::store<T>(1.0f);
      else one = static_cast<T>(1);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t j = i + k_;
        if (j >= 0 && j < cols) p[i * cols + j] = one;
      }
    });
  }

 private:
  int64_t k_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("EyeLike", eyelike_infer);
TWINFER_REGISTER_KERNEL("EyeLike", Backend::kCPU, 0, nullptr, make_kernel<EyeLikeKernel>);

}  // namespace twinfer::tensor
