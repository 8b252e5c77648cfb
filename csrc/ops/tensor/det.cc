// Det(X [..., M, M]) -> [...]: determinants by LU factorisation with partial
// pivoting (det_lu.h), in double precision, stored in the input's float type.
#include <vector>

#include "ops/elementwise/scalar.h"
#include "ops/tensor/det_lu.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

void det_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Det does not support ") + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& s = c.input_shape(0);
  if (!(s.size() >= 2)) c.fail(ErrorKind::kShape, "input " + sym_shape_str(s) + " must have rank >= 2");
  const Dim &a = s[s.size() - 2], &b = s[s.size() - 1];
  if (!(!(a.known() && b.known()) || a.value == b.value))
    c.fail(ErrorKind::kShape, "input " + sym_shape_str(s) + " must end in square matrices");
  c.set_output(0, dt, SymShape(s.begin(), s.end() - 2));
}

class DetKernel final : public Kernel {
 public:
  explicit DetKernel(const KernelBuildInfo& info) {
    const Shape s = info.input_shape(0);
    m_ = s.back();
    if (s[s.size() - 2] != m_) info.fail(ErrorKind::kShape, "input " + shape_str(s) + " must end in square matrices");
    batch_ = shape_numel(Shape(s.begin(), s.end() - 2));
  }
  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      T* y = ctx.outputs[0].as<T>();
      const int64_t m = m_;
      std::vector<double> a(static_cast<size_t>(m * m));
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t i = 0; i < m * m; ++i) a[i] = static_cast<double>(ew::load(x[b * m * m + i]));
        const double det = lu_determinant(a.data(), m);
        y[b] = ew::store<T>(static_cast<ew::compute_t<T>>(det));
      }
    });
  }

 private:
  int64_t m_ = 0, batch_ = 1;
};

bool det_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, ew::kFloatTypes, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Det", det_infer);
TWINFER_REGISTER_KERNEL("Det", Backend::kCPU, 0, det_supports, make_kernel<DetKernel>);

}  // namespace twinfer::tensor
