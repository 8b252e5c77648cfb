// BitCast(input) -> the same bytes seen as dtype `to` (an ONNX type code of
// the same width); the shape is unchanged.
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

void bitcast_infer(InferContext& c) {
  const DType in = c.input_dtype(0);
  if (!(c.node().has_attr("to"))) c.fail(ErrorKind::kModelFormat, "attribute 'to' is missing");
  const int64_t code = c.node().attr_int("to", 0);
  const DType to = dtype_from_onnx(static_cast<int32_t>(code));
  if (!(is_movable_dtype(in))) c.fail(ErrorKind::kDType, std::string("BitCast does not support ") + dtype_name(in));
  if (!(is_movable_dtype(to)))
    c.fail(ErrorKind::kDType, "BitCast does not support target type code " + std::to_string(code));
  if (!(dtype_size(in) == dtype_size(to)))
    c.fail(ErrorKind::kDType,
           std::string("BitCast needs one bit width: ") + dtype_name(in) + " -> " + dtype_name(to));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, to);
  c.set_output(0, to, c.input_shape(0));
}

}  // namespace

TWINFER_REGISTER_SCHEMA("BitCast", bitcast_infer);
TWINFER_REGISTER_KERNEL("BitCast", Backend::kCPU, 0, nullptr, make_kernel<CopyInput0Kernel>);

}  // namespace twinfer::tensor
