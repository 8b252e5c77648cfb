// Cast and CastLike apart from any backend's kernel: the target type named
// by the `to` attribute, E8M0's rounding mode, which dtypes convert at all,
// and the exact decoding of an 8-bit float source. The conversions
// themselves are ew::cast_value (scalar.h), core/float8.h and core/subbyte.h.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float8.h"
#include "graph/ir.h"
#include "ops/elementwise/typeset.h"

namespace twinfer::ew {

inline DType cast_target(const graph::Node& n) {
  const graph::Attribute& a = n.required_attr("to");
  return dtype_from_onnx(static_cast<int32_t>(a.i));
}

inline bool castable(DType t) { return in_typeset(kAllTypes, t) || dtype_is_float8(t) || dtype_is_subbyte(t); }

inline E8M0Round parse_round_mode(const graph::Node& n) {
  const std::string m = n.attr_string("round_mode", "up");
  if (m == "up") return E8M0Round::kUp;
  if (m == "down") return E8M0Round::kDown;
  if (m == "nearest") return E8M0Round::kNearest;
  throw Error(ErrorKind::kInvalidArgument, "round_mode must be 'up', 'down' or 'nearest', got '" + m + "'",
              n.name, n.op_type);
}

// An 8-bit float source as float (exact).
TWINFER_HD float float8_value(DType dt, uint8_t b) {
  switch (dt) {
    case DType::kFloat8E4M3FN: return float8_to_float(b, Float8Traits<float8_e4m3fn_t>::fmt());
    case DType::kFloat8E4M3FNUZ: return float8_to_float(b, Float8Traits<float8_e4m3fnuz_t>::fmt());
    case DType::kFloat8E5M2: return float8_to_float(b, Float8Traits<float8_e5m2_t>::fmt());
    case DType::kFloat8E5M2FNUZ: return float8_to_float(b, Float8Traits<float8_e5m2fnuz_t>::fmt());
    default: return e8m0_to_float(b);
  }
}

}  // namespace twinfer::ew
