#include "ops/quant/quant_util.h"

#include <limits>

namespace twinfer::quant {

float float8_bits_to_float(DType dt, uint8_t b) {
  switch (dt) {
    case DType::kFloat8E4M3FN: return float8_to_float(b, Float8Traits<float8_e4m3fn_t>::fmt());
    case DType::kFloat8E4M3FNUZ: return float8_to_float(b, Float8Traits<float8_e4m3fnuz_t>::fmt());
    case DType::kFloat8E5M2: return float8_to_float(b, Float8Traits<float8_e5m2_t>::fmt());
    case DType::kFloat8E5M2FNUZ: return float8_to_float(b, Float8Traits<float8_e5m2fnuz_t>::fmt());
    case DType::kFloat8E8M0: return e8m0_to_float(b);
    default: dispatch_unsupported(dt, "float8 decoding");
  }
}

uint8_t float_to_float8_bits(DType dt, double v, bool saturate) {
  switch (dt) {
    case DType::kFloat8E4M3FN: return float_to_float8(v, Float8Traits<float8_e4m3fn_t>::fmt(), saturate);
    case DType::kFloat8E4M3FNUZ: return float_to_float8(v, Float8Traits<float8_e4m3fnuz_t>::fmt(), saturate);
    case DType::kFloat8E5M2: return float_to_float8(v, Float8Traits<float8_e5m2_t>::fmt(), saturate);
    case DType::kFloat8E5M2FNUZ: return float_to_float8(v, Float8Traits<float8_e5m2fnuz_t>::fmt(), saturate);
    default: dispatch_unsupported(dt, "float8 encoding");
  }
}

double load_double(DType dt, const void* p, int64_t i) {
  switch (dt) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(p)[i];
    case DType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DType::kUInt32: return static_cast<const uint32_t*>(p)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kUInt64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    default:
      if (dtype_is_float8(dt)) return float8_bits_to_float(dt, static_cast<const uint8_t*>(p)[i]);
      dispatch_unsupported(dt, "quantization scale / zero point");
  }
}

void load_floats(const TensorView& t, float* out) {
  const int64_t n = t.numel();
  if (t.dtype == DType::kFloat32) {
    for (int64_t i = 0; i < n; ++i) out[i] = t.as<const float>()[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_double(t.dtype, t.data, i));
}

void load_int32s(const TensorView& t, int32_t* out) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load_double(t.dtype, t.data, i));
}

bool quant_int_range(DType dt, int64_t* lo, int64_t* hi) {
  switch (dt) {
    case DType::kInt8: *lo = -128; *hi = 127; return true;
    case DType::kUInt8: *lo = 0; *hi = 255; return true;
    case DType::kInt16: *lo = -32768; *hi = 32767; return true;
    case DType::kUInt16: *lo = 0; *hi = 65535; return true;
    case DType::kInt32:
      *lo = std::numeric_limits<int32_t>::min();
      *hi = std::numeric_limits<int32_t>::max();
      return true;
    default: return false;
  }
}

}  // namespace twinfer::quant
