// com.twinfer::AttentionSoftmax (attention_softmax.h): the shape rule.
#include "ops/nn/attention_softmax.h"

#include "graph/domains.h"
#include "ops/schema.h"

namespace twinfer::nn {
namespace {

void infer_attention_softmax(InferContext& c) {
  if (!(c.input_dtype(0) == DType::kFloat32))
    c.fail(ErrorKind::kDType, std::string("AttentionSoftmax x must be float32, got ") + dtype_name(c.input_dtype(0)));
  if (c.has_input(1)) {
    if (!(c.input_dtype(1) == DType::kFloat32))
      c.fail(ErrorKind::kDType,
             std::string("AttentionSoftmax mask must be float32, got ") + dtype_name(c.input_dtype(1)));
    if (c.input_has_shape(0) && c.input_has_shape(1)) {
      const SymShape& x = c.input_shape(0);
      const SymShape& m = c.input_shape(1);
      if (!(m.size() <= x.size()))
        c.fail(ErrorKind::kShape,
               "AttentionSoftmax mask " + sym_shape_str(m) + " has a higher rank than x " + sym_shape_str(x));
      const SymShape b = broadcast_sym_shapes(x, m);
      for (size_t d = 0; d < x.size(); ++d)
        if (!(!(x[d].known() && b[d].known()) || x[d].value == b[d].value))
          c.fail(ErrorKind::kShape, "AttentionSoftmax mask " + sym_shape_str(m) + " widens x " + sym_shape_str(x));
    }
  }
  if (c.input_has_shape(0))
    if (!(!c.input_shape(0).empty())) c.fail(ErrorKind::kShape, "AttentionSoftmax x must have rank >= 1");
  infer_same_as_input0(c);
}

}  // namespace

TWINFER_REGISTER_SCHEMA(kAttentionSoftmaxOp, infer_attention_softmax, kTwinferDomain);

}  // namespace twinfer::nn
