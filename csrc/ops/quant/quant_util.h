// Helpers shared by the quantization ops (csrc/ops/quant/): reading scales and
// zero points of any of their dtypes as float / int32, the quantization
// granularity (per tensor, per axis, blocked) of QuantizeLinear and
// DequantizeLinear, and rounding to a 16-bit float precision.
#pragma once
#include <math.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/float8.h"
#include "core/half.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::quant {

// Element i of a view of a float, integer or 8-bit float dtype, as double.
double load_double(DType dt, const void* p, int64_t i);
// All elements of a view as float / int32 (zero points are at most 16-bit
// or int32, so int32 holds them exactly).
void load_floats(const TensorView& t, float* out);
void load_int32s(const TensorView& t, int32_t* out);

// 8-bit float bits -> float (the five FLOAT8 types).
float float8_bits_to_float(DType dt, uint8_t b);
// double -> 8-bit float bits (the four sign/exponent/mantissa types).
uint8_t float_to_float8_bits(DType dt, double v, bool saturate);

// Rounds a float to the precision of dt (float16 / bfloat16 round to nearest
// even; other types leave it as it is).
inline float round_to(DType dt, float v) {
  if (dt == DType::kFloat16) return half_to_float(float_to_half(v));
  if (dt == DType::kBFloat16) return bf16_to_float(float_to_bf16(v));
  return v;
}

// Round half to even without depending on the FP environment.
inline double round_even(double v) {
  double r = floor(v);
  const double d = v - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0)) r += 1;
  return r;
}

// Integer range of a quantized integer type.
bool quant_int_range(DType dt, int64_t* lo, int64_t* hi);

// How QuantizeLinear / DequantizeLinear's scale maps onto x, viewed as
// [outer, dim, inner] around `axis`: scale index of element (o, d, i) is
//   per tensor: 0;  per axis: d;  blocked: (o * nblocks + d / block) * inner + i.
struct Granularity {
  enum Kind { kTensor, kAxis, kBlocked } kind = kTensor;
  int64_t outer = 1, dim = 1, inner = 1, block = 0, nblocks = 1;
};

// Checks scale's shape against x's (zero point must equal scale's shape:
// checked by the caller). `what` names the scale input in errors.
// Throws via fail (an InferContext or KernelBuildInfo).
template <typename Ctx>
Granularity granularity(const Ctx& c, const Shape& x, const Shape& scale, int64_t axis, int64_t block,
                        const char* what) {
  Granularity g;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t sn = shape_numel(scale);
  if (sn == 1) {  // one element is per tensor whatever its rank (as the ONNX reference reads it)
    for (int64_t d : x) g.outer *= d;
    return g;
  }
  if (axis < -rank || axis >= rank)
    c.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for input rank " +
                                  std::to_string(rank));
  if (axis < 0) axis += rank;
  for (int64_t d = 0; d < axis; ++d) g.outer *= x[d];
  g.dim = x[axis];
  for (int64_t d = axis + 1; d < rank; ++d) g.inner *= x[d];
  if (block <= 0) {
    if (scale.size() != 1 || scale[0] != g.dim)
      c.fail(ErrorKind::kShape, std::string(what) + " has shape " + shape_str(scale) +
                                    "; per-axis quantization needs a 1-D tensor of length " +
                                    std::to_string(g.dim) + " (input " + shape_str(x) + ", axis " +
                                    std::to_string(axis) + ")");
    g.kind = Granularity::kAxis;
    return g;
  }
  g.kind = Granularity::kBlocked;
  g.block = block;
  g.nblocks = (g.dim + block - 1) / block;
  bool ok = static_cast<int64_t>(scale.size()) == rank;
  for (int64_t d = 0; ok && d < rank; ++d) ok = scale[d] == (d == axis ? g.nblocks : x[d]);
  if (!ok)
    c.fail(ErrorKind::kShape, std::string(what) + " has shape " + shape_str(scale) +
                                  "; blocked quantization of input " + shape_str(x) + " along axis " +
                                  std::to_string(axis) + " with block_size " + std::to_string(block) +
                                  " needs the input's shape with " + std::to_string(g.nblocks) +
                                  " at the axis");
  return g;
}

// The zero point has the scale's shape (or both hold one value): throws
// kShape naming both otherwise. Kernels check it when built, since the load
// time rule skips it while a shape is symbolic.
template <typename Ctx>
void check_zero_point(const Ctx& c, const Shape& scale, const Shape& zp, const char* scale_name) {
  if (zp != scale && !(shape_numel(zp) == 1 && shape_numel(scale) == 1))
    c.fail(ErrorKind::kShape, std::string("zero point shape ") + shape_str(zp) + " differs from " + scale_name +
                                  " shape " + shape_str(scale));
}

// Scale index of the row (o, d): add i for blocked granularity.
inline int64_t scale_row(const Granularity& g, int64_t o, int64_t d) {
  switch (g.kind) {
    case Granularity::kTensor: return 0;
    case Granularity::kAxis: return d;
    default: return (o * g.nblocks + d / g.block) * g.inner;
  }
}

}  // namespace twinfer::quant
