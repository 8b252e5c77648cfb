// QuantizeLinear, DequantizeLinear (opsets 10-25: per tensor, per axis,
// blocked; int8/uint8/int16/uint16/int32, the 8-bit floats and the 4-/2-bit
// types int4/uint4/int2/uint2/float4e2m1, stored one per byte: core/subbyte.h)
// and DynamicQuantizeLinear. Arithmetic follows the ONNX reference
// (onnx/reference/ops/op_quantize_linear.py etc.):
//
//   QuantizeLinear:   q = x / scale in the division precision (the
//                     `precision` attribute, else float64 when x or scale is
//                     int32, else their common type: float16 / bfloat16
//                     divisions round to that type), then integers:
//                     clip(round_half_even(q) + zero_point), 8-bit floats:
//                     q rounded to nearest even with `saturate`, FLOAT4E2M1:
//                     rounded to nearest even, always saturating (no inf).
//   DequantizeLinear: (x - zero_point) * scale in float (double for int32 x),
//                     rounded once into the output type.
//
// Zero points of 8-bit and 4-bit float types must be zero (the reference
// rejects nonzero float8 ones in DequantizeLinear and ignores them in
// QuantizeLinear; for float4 it adds them in QuantizeLinear and ignores them
// in DequantizeLinear, so the pair would not round-trip); a nonzero one is an
// error here. NaN quantizes to the zero point for integer outputs;
// values beyond int32 saturate (NumPy's cast would wrap them).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/parallel.h"
#include "core/subbyte.h"
#include "ops/quant/quant_util.h"
#include "ops/quant/quantize_fast.h"

namespace twinfer::quant {
namespace {

constexpr int64_t kGrain = 16384;

bool is_quant_output(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16 || t == DType::kUInt16 ||
         (dtype_is_float8(t) && t != DType::kFloat8E8M0) || dtype_is_subbyte(t);
}

// The sub-byte integer types (int4/uint4/int2/uint2).
bool is_subbyte_int(DType t) { return dtype_is_subbyte(t) && t != DType::kFloat4E2M1; }

// A stored sub-byte integer byte -> its value.
int32_t subbyte_int_value(DType t, uint8_t b) {
  switch (t) {
    case DType::kInt4: return int4_value(b);
    case DType::kUInt4: return uint4_value(b);
    case DType::kInt2: return int2_value(b);
    default: return uint2_value(b);
  }
}

// Value range of an integer quantized type, the sub-byte ones included.
void int_range(DType t, int64_t* lo, int64_t* hi) {
  if (!is_subbyte_int(t)) {
    quant_int_range(t, lo, hi);
    return;
  }
  const int bits = dtype_bits(t);
  const bool is_signed = t == DType::kInt4 || t == DType::kInt2;
  *lo = is_signed ? -(int64_t(1) << (bits - 1)) : 0;
  *hi = is_signed ? (int64_t(1) << (bits - 1)) - 1 : (int64_t(1) << bits) - 1;
}

// A float-typed quantized value (8-bit or 4-bit float) as float.
float float_q_value(DType t, uint8_t b) {
  return t == DType::kFloat4E2M1 ? float4_e2m1_value(b) : float8_bits_to_float(t, b);
}

// Zero points into int32 (of x's / y's type `t`): integers by value; float
// types must be all zero (see top), `what` names the input in the error.
void load_zero_points(DType t, const TensorView& z, int64_t n, int32_t* zp, const std::string& node,
                      const char* op, const char* what) {
  if (dtype_is_float8(t) || t == DType::kFloat4E2M1) {
    const uint8_t* b = z.as<const uint8_t>();
    for (int64_t i = 0; i < n; ++i)
      if (float_q_value(t, b[i]) != 0.f)
        throw Error(ErrorKind::kInvalidArgument,
                    std::string(what) + " of " + dtype_name(t) + " data must be zero", node, op);
    std::fill(zp, zp + n, 0);
  } else if (is_subbyte_int(t)) {
    const uint8_t* b = z.as<const uint8_t>();
    for (int64_t i = 0; i < n; ++i) zp[i] = subbyte_int_value(t, b[i]);
  } else {
    load_int32s(z, zp);
  }
}

// Tags for go<>'s output / input kinds that have no C++ arithmetic type.
struct SubIntTag {};     // int4/uint4/int2/uint2: the value's low bits
struct Float4Tag {};     // FLOAT4E2M1
struct Float8Tag {};     // any 8-bit float, encoded / decoded by its DType

bool is_dequant_input(DType t) { return is_quant_output(t) || t == DType::kInt32; }

bool is_scale_type(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// The shapes of scale and zero point agree, and the scale fits x.
template <typename Ctx>
void check_params(const Ctx& c, const Shape& x, const Shape& scale, const Shape* zp, int64_t axis, int64_t block,
                  const char* scale_name) {
  if (zp) check_zero_point(c, scale, *zp, scale_name);
  granularity(c, x, scale, axis, block, scale_name);
}

int64_t block_size_of(const graph::Node& n, int64_t opset) { return opset >= 21 ? n.attr_int("block_size", 0) : 0; }
int64_t axis_of(const graph::Node& n, int64_t opset) { return opset >= 13 ? n.attr_int("axis", 1) : 1; }

// Checks shapes of x / scale / zero point at load time when all are known.
void infer_params(InferContext& c, int64_t axis, int64_t block, const char* scale_name) {
  if (!(block >= 0)) c.fail(ErrorKind::kModelFormat, "block_size must be >= 0");
  if (!c.input_known(0) || !c.input_known(1)) return;
  if (c.has_input(2) && !c.input_known(2)) return;
  const Shape x = c.input_values_shape(0), s = c.input_values_shape(1);
  Shape z;
  if (c.has_input(2)) z = c.input_values_shape(2);
  if (block == 0 && c.opset() < 21 && s.size() > 1)
    c.fail(ErrorKind::kShape, std::string(scale_name) + " must be a scalar or 1-D tensor, got " + shape_str(s));
  check_params(c, x, s, c.has_input(2) ? &z : nullptr, axis, block, scale_name);
}

void set_like_input0(InferContext& c, DType dt) {
  if (c.input_has_shape(0))
    c.set_output(0, dt, c.input_shape(0));
  else
    c.set_output_rank_unknown(0, dt);
}

// ---- QuantizeLinear --------------------------------------------------------------

DType quantize_output_type(const graph::Node& n, int64_t opset, bool has_zp, DType zp_type,
                           std::string* err) {
  DType attr = DType::kUndefined;
  const int64_t od = opset >= 21 ? n.attr_int("output_dtype", 0) : 0;
  if (od != 0) {
    attr = dtype_from_onnx(static_cast<int32_t>(od));
    if (!is_quant_output(attr)) {
      *err = "output_dtype " + std::to_string(od) + " is not a supported quantized type";
      return DType::kUndefined;
    }
  }
  if (has_zp) {
    if (attr != DType::kUndefined && attr != zp_type) {
      *err = std::string("output_dtype ") + dtype_name(attr) + " differs from the zero point's dtype " +
             dtype_name(zp_type);
      return DType::kUndefined;
    }
    return zp_type;
  }
  return attr != DType::kUndefined ? attr : DType::kUInt8;
}

void quantize_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType xt = c.input_dtype(0), st = c.input_dtype(1);
  if (!(is_scale_type(xt) || xt == DType::kInt32))
    c.fail(ErrorKind::kDType,
           std::string("QuantizeLinear input must be float32/float16/bfloat16/int32, got ") + dtype_name(xt));
  if (!(is_scale_type(st) || st == DType::kInt32))
    c.fail(ErrorKind::kDType, std::string("y_scale must be float32/float16/bfloat16/int32, got ") + dtype_name(st));
  std::string err;
  const DType out = quantize_output_type(n, c.opset(), c.has_input(2), c.has_input(2) ? c.input_dtype(2) : DType::kUndefined, &err);
  if (!(err.empty())) c.fail(ErrorKind::kDType, err);
  if (!(is_quant_output(out)))
    c.fail(ErrorKind::kDType, std::string("QuantizeLinear to ") + dtype_name(out) + " is not supported");
  const int64_t prec = c.opset() >= 23 ? n.attr_int("precision", 0) : 0;
  if (prec != 0) {
    const DType p = dtype_from_onnx(static_cast<int32_t>(prec));
    if (!(is_scale_type(p) || p == DType::kFloat64))
      c.fail(ErrorKind::kDType, "precision " + std::to_string(prec) + " is not a float type");
  }
  infer_params(c, axis_of(n, c.opset()), block_size_of(n, c.opset()), "y_scale");
  set_like_input0(c, out);
}

template <typename X> inline double load_x(X v) {
  if constexpr (std::is_same_v<X, half_t>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<X, bfloat16_t>) return bf16_to_float(v.bits);
  else return static_cast<double>(v);
}

class QuantizeKernel final : public Kernel {
 public:
  explicit QuantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), st_(info.input_dtype(1)), out_(info.output(0).dtype),
        has_zp_(info.has_input(2)), node_(info.node().name) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(0), s = info.input_shape(1);
    Shape z;
    if (has_zp_) z = info.input_shape(2);
    check_params(info, x, s, has_zp_ ? &z : nullptr, axis_of(n, info.opset()), block_size_of(n, info.opset()),
                 "y_scale");
    g_ = granularity(info, x, s, axis_of(n, info.opset()), block_size_of(n, info.opset()), "y_scale");
    if (g_.kind == Granularity::kTensor) {
      g_.inner = g_.outer;
      g_.outer = 1;
    }
    scale_n_ = shape_numel(s);
    saturate_ = info.opset() >= 19 ? n.attr_int("saturate", 1) != 0 : true;
    const int64_t prec = info.opset() >= 23 ? n.attr_int("precision", 0) : 0;
    if (prec != 0)
      prec_ = dtype_from_onnx(static_cast<int32_t>(prec));
    else if (xt_ == DType::kInt32 || st_ == DType::kInt32)
      prec_ = DType::kFloat64;
    else
      prec_ = xt_ == st_ ? xt_ : DType::kFloat32;
    int_range(out_, &lo_, &hi_);
  }

  size_t scratch_bytes() const override { return static_cast<size_t>(scale_n_) * (sizeof(float) + sizeof(int32_t)); }

  void run(KernelContext& ctx) const override {
    float* scale = static_cast<float*>(ctx.scratch);
    int32_t* zp = reinterpret_cast<int32_t*>(scale + scale_n_);
    load_floats(ctx.inputs[1], scale);
    if (!has_zp_)
      std::fill(zp, zp + scale_n_, 0);
    else
      load_zero_points(out_, ctx.inputs[2], scale_n_, zp, node_, "QuantizeLinear", "y_zero_point");
    dispatch_x(ctx, scale, zp);
  }

 private:
  void dispatch_x(KernelContext& ctx, const float* scale, const int32_t* zp) const {
    switch (xt_) {
      case DType::kFloat32: return by_out<float>(ctx, scale, zp);
      case DType::kFloat16: return by_out<half_t>(ctx, scale, zp);
      case DType::kBFloat16: return by_out<bfloat16_t>(ctx, scale, zp);
      case DType::kInt32: return by_out<int32_t>(ctx, scale, zp);
      default: dispatch_unsupported(xt_, "QuantizeLinear");
    }
  }

  template <typename X>
  void by_out(KernelContext& ctx, const float* scale, const int32_t* zp) const {
    switch (out_) {
      case DType::kInt8: return go<X, int8_t>(ctx, scale, zp);
      case DType::kUInt8: return go<X, uint8_t>(ctx, scale, zp);
      case DType::kInt16: return go<X, int16_t>(ctx, scale, zp);
      case DType::kUInt16: return go<X, uint16_t>(ctx, scale, zp);
      case DType::kInt4: case DType::kUInt4: case DType::kInt2: case DType::kUInt2:
        return go<X, SubIntTag>(ctx, scale, zp);
      case DType::kFloat4E2M1: return go<X, Float4Tag>(ctx, scale, zp);
      default: return go<X, Float8Tag>(ctx, scale, zp);  // any 8-bit float: encoded by out_
    }
  }

  double divide(double x, float s) const {
    if (prec_ == DType::kFloat64) return x / static_cast<double>(s);
    const float xf = round_to(prec_, static_cast<float>(x)), sf = round_to(prec_, s);
    return round_to(prec_, xf / sf);
  }

  template <typename X, typename Y>
  void go(KernelContext& ctx, const float* scale, const int32_t* zp) const {
    const X* x = ctx.inputs[0].as<const X>();
    const int64_t n = ctx.inputs[0].numel();
    const Granularity g = g_;
    const bool blocked = g.kind == Granularity::kBlocked;
    const int bits = dtype_bits(out_);
    parallel_for(n, ctx.num_threads, kGrain, [&](int64_t b, int64_t e) {
      int64_t row = b / g.inner, i = b % g.inner;
      int64_t base = scale_row(g, row / g.dim, row % g.dim);
      for (int64_t k = b; k < e; ++k) {
        const int64_t si = blocked ? base + i : base;
        const double q = divide(load_x(x[k]), scale[si]);
        if constexpr (std::is_integral_v<Y> || std::is_same_v<Y, SubIntTag>) {
          double v = round_even(q);
          v = v != v ? 0.0 : std::min(std::max(v, -4294967296.0), 4294967296.0);
          const int64_t r = std::min<int64_t>(hi_, std::max<int64_t>(lo_, static_cast<int64_t>(v) + zp[si]));
          if constexpr (std::is_same_v<Y, SubIntTag>)
            ctx.outputs[0].as<uint8_t>()[k] = wrap_subbyte(r, bits);
          else
            ctx.outputs[0].as<Y>()[k] = static_cast<Y>(r);
        } else if constexpr (std::is_same_v<Y, Float4Tag>) {
          ctx.outputs[0].as<uint8_t>()[k] = float_to_float4_e2m1(q);
        } else {
          ctx.outputs[0].as<uint8_t>()[k] = float_to_float8_bits(out_, q, saturate_);
        }
        if (++i == g.inner) {
          i = 0;
          ++row;
          base = scale_row(g, row / g.dim, row % g.dim);
        }
      }
    });
  }

  DType xt_, st_, out_, prec_ = DType::kFloat32;
  bool has_zp_, saturate_ = true;
  Granularity g_;
  int64_t scale_n_ = 1, lo_ = 0, hi_ = 0;
  std::string node_;
};

bool quantize_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.has_input(2) && info.input_dtype(2) != info.output(0).dtype) {
    if (why) *why = "zero point dtype differs from the output dtype";
    return false;
  }
  return true;
}

// ---- DequantizeLinear --------------------------------------------------------------

DType dequantize_output_type(const graph::Node& n, int64_t opset, DType scale_type) {
  const int64_t od = opset >= 23 ? n.attr_int("output_dtype", 0) : 0;
  return od != 0 ? dtype_from_onnx(static_cast<int32_t>(od)) : scale_type;
}

void dequantize_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType xt = c.input_dtype(0), st = c.input_dtype(1);
  if (!(is_dequant_input(xt)))
    c.fail(ErrorKind::kDType, std::string("DequantizeLinear does not support input dtype ") + dtype_name(xt));
  if (!(is_scale_type(st) || st == DType::kFloat8E8M0))
    c.fail(ErrorKind::kDType,
           std::string("x_scale must be float32/float16/bfloat16/float8e8m0, got ") + dtype_name(st));
  if (c.has_input(2))
    if (!(c.input_dtype(2) == xt))
      c.fail(ErrorKind::kDType,
             std::string("x_zero_point dtype ") + dtype_name(c.input_dtype(2)) + " differs from x's " + dtype_name(xt));
  const DType out = dequantize_output_type(n, c.opset(), st);
  if (!(is_scale_type(out)))
    c.fail(ErrorKind::kDType,
           std::string("DequantizeLinear output must be float32/float16/bfloat16, got ") + dtype_name(out) +
               (st == DType::kFloat8E8M0 ? " (set output_dtype with a float8e8m0 scale)" : ""));
  infer_params(c, axis_of(n, c.opset()), block_size_of(n, c.opset()), "x_scale");
  set_like_input0(c, out);
}

class DequantizeKernel final : public Kernel {
 public:
  explicit DequantizeKernel(const KernelBuildInfo& info)
      : xt_(info.input_dtype(0)), out_(info.output(0).dtype), has_zp_(info.has_input(2)), node_(info.node().name) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(0), s = info.input_shape(1);
    Shape z;
    if (has_zp_) z = info.input_shape(2);
    const int64_t axis = axis_of(n, info.opset()), block = block_size_of(n, info.opset());
    check_params(info, x, s, has_zp_ ? &z : nullptr, axis, block, "x_scale");
    g_ = granularity(info, x, s, axis, block, "x_scale");
    if (g_.kind == Granularity::kTensor) {
      g_.inner = g_.outer;
      g_.outer = 1;
    }
    scale_n_ = shape_numel(s);
  }

  size_t scratch_bytes() const override { return static_cast<size_t>(scale_n_) * (sizeof(float) + sizeof(int32_t)); }

  void run(KernelContext& ctx) const override {
    float* scale = static_cast<float*>(ctx.scratch);
    int32_t* zp = reinterpret_cast<int32_t*>(scale + scale_n_);
    load_floats(ctx.inputs[1], scale);
    if (!has_zp_)
      std::fill(zp, zp + scale_n_, 0);
    else
      load_zero_points(xt_, ctx.inputs[2], scale_n_, zp, node_, "DequantizeLinear", "x_zero_point");
    switch (out_) {
      case DType::kFloat32: return by_x<float>(ctx, scale, zp);
      case DType::kFloat16: return by_x<half_t>(ctx, scale, zp);
      case DType::kBFloat16: return by_x<bfloat16_t>(ctx, scale, zp);
      default: dispatch_unsupported(out_, "DequantizeLinear");
    }
  }

 private:
  template <typename Y>
  void by_x(KernelContext& ctx, const float* scale, const int32_t* zp) const {
    switch (xt_) {
      case DType::kInt8: return go<int8_t, Y>(ctx, scale, zp);
      case DType::kUInt8: return go<uint8_t, Y>(ctx, scale, zp);
      case DType::kInt16: return go<int16_t, Y>(ctx, scale, zp);
      case DType::kUInt16: return go<uint16_t, Y>(ctx, scale, zp);
      case DType::kInt32: return go<int32_t, Y>(ctx, scale, zp);
      case DType::kInt4: case DType::kUInt4: case DType::kInt2: case DType::kUInt2:
        return go<SubIntTag, Y>(ctx, scale, zp);
      default: return go<Float8Tag, Y>(ctx, scale, zp);  // 8-bit floats and FLOAT4E2M1: decoded by xt_
    }
  }

  template <typename X, typename Y>
  void go(KernelContext& ctx, const float* scale, const int32_t* zp) const {
    using XS = std::conditional_t<std::is_integral_v<X>, X, uint8_t>;  // storage
    const XS* x = ctx.inputs[0].as<const XS>();
    Y* y = ctx.outputs[0].as<Y>();
    const int64_t n = ctx.inputs[0].numel();
    const Granularity g = g_;
    const bool blocked = g.kind == Granularity::kBlocked;
    float lut[256];      // 8-/4-bit float decode table
    int32_t ilut[256];   // sub-byte integer decode table
    if constexpr (std::is_same_v<X, Float8Tag>)
      for (int b = 0; b < 256; ++b) lut[b] = float_q_value(xt_, static_cast<uint8_t>(b));
    if constexpr (std::is_same_v<X, SubIntTag>)
      for (int b = 0; b < 256; ++b) ilut[b] = subbyte_int_value(xt_, static_cast<uint8_t>(b));
    parallel_for(n, ctx.num_threads, kGrain, [&](int64_t b, int64_t e) {
      int64_t row = b / g.inner, i = b % g.inner;
      int64_t base = scale_row(g, row / g.dim, row % g.dim);
      for (int64_t k = b; k < e; ++k) {
        const int64_t si = blocked ? base + i : base;
        float v;
        if constexpr (std::is_same_v<X, int32_t>) {
          // The reference: float32(x) - zp in float64, times the scale.
          const double d = static_cast<double>(static_cast<float>(x[k])) - zp[si];
          v = static_cast<float>(d * static_cast<double>(scale[si]));
        } else if constexpr (std::is_integral_v<X>) {
          v = static_cast<float>(static_cast<int32_t>(x[k]) - zp[si]) * scale[si];
        } else if constexpr (std::is_same_v<X, SubIntTag>) {
          v = static_cast<float>(ilut[x[k]] - zp[si]) * scale[si];
        } else {
          v = lut[x[k]] * scale[si];
        }
        if constexpr (std::is_same_v<Y, float>) y[k] = v;
        else if constexpr (std::is_same_v<Y, half_t>) y[k] = half_t{float_to_half(v)};
        else y[k] = bfloat16_t{float_to_bf16(v)};
        if (++i == g.inner) {
          i = 0;
          ++row;
          base = scale_row(g, row / g.dim, row % g.dim);
        }
      }
    });
  }

  DType xt_, out_;
  bool has_zp_;
  Granularity g_;
  int64_t scale_n_ = 1;
  std::string node_;
};

// ---- DynamicQuantizeLinear -----------------------------------------------------------

void dynamic_quantize_infer(InferContext& c) {
  const DType xt = c.input_dtype(0);
  if (!(xt == DType::kFloat32))
    c.fail(ErrorKind::kDType, std::string("DynamicQuantizeLinear needs a float32 input, got ") + dtype_name(xt));
  set_like_input0(c, DType::kUInt8);
  if (c.has_output(1)) c.set_output(1, DType::kFloat32, {});
  if (c.has_output(2)) c.set_output(2, DType::kUInt8, {});
}

class DynamicQuantizeKernel final : public Kernel {
 public:
  explicit DynamicQuantizeKernel(const KernelBuildInfo&) {}

  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    const int64_t n = ctx.inputs[0].numel();
    // Range including 0, in float32 as the reference.
    float mn = 0.f, mx = 0.f;
    min_max_with_zero(x, n, ctx.num_threads, &mn, &mx);
    // An all-zero x gives scale 1 as onnxruntime does (the reference gives 1/255; y is 0 either way).
    const float scale = mx == mn ? 1.f : (mx - mn) / 255.f;
    float zpf = 0.f - mn / scale;
    zpf = std::min(255.f, std::max(0.f, zpf));
    const double zp = round_even(zpf);
    // Then as QuantizeLinear: the same float32 division and rounding, vectorised.
    quantize_to_u8(x, ctx.outputs[0].as<uint8_t>(), n, scale, static_cast<int32_t>(zp), ctx.num_threads);
    if (ctx.outputs.size() > 1 && ctx.outputs[1].data) *ctx.outputs[1].as<float>() = scale;
    if (ctx.outputs.size() > 2 && ctx.outputs[2].data) *ctx.outputs[2].as<uint8_t>() = static_cast<uint8_t>(zp);
  }
};

}  // namespace

TWINFER_REGISTER_SCHEMA("QuantizeLinear", quantize_infer);
TWINFER_REGISTER_KERNEL("QuantizeLinear", Backend::kCPU, 0, quantize_supports, make_kernel<QuantizeKernel>);
TWINFER_REGISTER_SCHEMA("DequantizeLinear", dequantize_infer);
TWINFER_REGISTER_KERNEL("DequantizeLinear", Backend::kCPU, 0, nullptr, make_kernel<DequantizeKernel>);
TWINFER_REGISTER_SCHEMA("DynamicQuantizeLinear", dynamic_quantize_infer);
TWINFER_REGISTER_KERNEL("DynamicQuantizeLinear", Backend::kCPU, 0, nullptr, make_kernel<DynamicQuantizeKernel>);

}  // namespace twinfer::quant
