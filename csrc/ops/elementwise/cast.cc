// Cast and CastLike between float32/64, float16, bfloat16, the integer types,
// bool and the 8-bit floats. Conversions are ew::cast_value (scalar.h): float
// -> int truncates toward zero, NaN -> 0, out-of-range values saturate;
// narrowing integer casts wrap; -> bool is x != 0; 16-bit floats round to
// nearest even. 8-bit floats (core/float8.h) decode exactly to float and are
// encoded from the exact value with round-to-nearest-even and the `saturate`
// attribute (default 1); FLOAT8E8M0 goes through float32 and honours
// `round_mode` ("up", the default, "down", "nearest"), as the ONNX reference.
#include <algorithm>
#include <cstring>

#include "ops/elementwise/binary_kernel.h"

namespace twinfer::ew {
namespace {

DType cast_target(const graph::Node& n) {
  const graph::Attribute& a = n.required_attr("to");
  return dtype_from_onnx(static_cast<int32_t>(a.i));
}

void cast_infer(InferContext& c) {
  DType to = cast_target(c.node());
  c.check(to != DType::kUndefined && to != DType::kString, ErrorKind::kUnsupportedOp,
          "Cast to ONNX type " + std::to_string(c.node().required_attr("to").i) + " is not supported");
  const auto& v = c.input(0);
  if (v.has_shape)
    c.set_output(0, to, v.shape);
  else
    c.set_output_rank_unknown(0, to);
}

void castlike_infer(InferContext& c) {
  const auto& v = c.input(0);
  DType to = c.input_dtype(1);
  if (v.has_shape)
    c.set_output(0, to, v.shape);
  else
    c.set_output_rank_unknown(0, to);
}

bool castable(DType t) { return in_typeset(kAllTypes, t) || dtype_is_float8(t); }

bool cast_supports(const KernelBuildInfo& info, std::string* why) {
  DType from = info.input_dtype(0), to = info.output(0).dtype;
  if (!castable(from)) {
    if (why) *why = std::string("Cast from ") + dtype_name(from) + " is not supported";
    return false;
  }
  if (castable(to)) return true;
  if (why) *why = std::string("Cast to ") + dtype_name(to) + " is not supported";
  return false;
}

E8M0Round parse_round_mode(const graph::Node& n) {
  const std::string m = n.attr_string("round_mode", "up");
  if (m == "up") return E8M0Round::kUp;
  if (m == "down") return E8M0Round::kDown;
  if (m == "nearest") return E8M0Round::kNearest;
  throw Error(ErrorKind::kInvalidArgument, "round_mode must be 'up', 'down' or 'nearest', got '" + m + "'",
              n.name, n.op_type);
}

// An 8-bit float source as float (exact).
float float8_value(DType dt, uint8_t b) {
  switch (dt) {
    case DType::kFloat8E4M3FN: return float8_to_float(b, Float8Traits<float8_e4m3fn_t>::fmt);
    case DType::kFloat8E4M3FNUZ: return float8_to_float(b, Float8Traits<float8_e4m3fnuz_t>::fmt);
    case DType::kFloat8E5M2: return float8_to_float(b, Float8Traits<float8_e5m2_t>::fmt);
    case DType::kFloat8E5M2FNUZ: return float8_to_float(b, Float8Traits<float8_e5m2fnuz_t>::fmt);
    default: return e8m0_to_float(b);
  }
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelBuildInfo& info)
      : from_(info.input_dtype(0)), to_(info.output(0).dtype),
        saturate_(info.node().attr_int("saturate", 1) != 0), round_(parse_round_mode(info.node())) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const int64_t n = x.numel();
    if (from_ == to_) {
      if (x.data != y.data) std::memcpy(y.data, x.data, x.bytes());
      return;
    }
    if (dtype_is_float8(from_)) {
      // Decode to float, then on as a float cast (to float8 again, or not).
      const uint8_t* src = x.as<const uint8_t>();
      cpu::parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        float tmp[256];
        for (int64_t i = b; i < e; i += 256) {
          const int64_t m = std::min<int64_t>(256, e - i);
          for (int64_t j = 0; j < m; ++j) tmp[j] = float8_value(from_, src[i + j]);
          store_from(tmp, m, y, i);
        }
      });
      return;
    }
    dispatch_typeset<kAllTypes>(from_, [&](auto tf) {
      using From = typename decltype(tf)::type;
      const From* src = x.as<const From>();
      if (dtype_is_float8(to_)) {
        cpu::parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
          encode_float8(src + b, e - b, y.as<uint8_t>() + b);
        });
        return;
      }
      dispatch_typeset<kAllTypes>(to_, [&](auto tt) {
        using To = typename decltype(tt)::type;
        To* dst = y.as<To>();
        cpu::parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) dst[i] = cast_value<To>(src[i]);
        });
      });
    });
  }

 private:
  // m floats into y[at .. at+m) of the output type.
  void store_from(const float* v, int64_t m, const TensorView& y, int64_t at) const {
    if (dtype_is_float8(to_)) {
      encode_float8(v, m, y.as<uint8_t>() + at);
      return;
    }
    dispatch_typeset<kAllTypes>(to_, [&](auto tt) {
      using To = typename decltype(tt)::type;
      To* dst = y.as<To>() + at;
      for (int64_t j = 0; j < m; ++j) dst[j] = cast_value<To>(v[j]);
    });
  }

  template <typename From>
  void encode_float8(const From* src, int64_t m, uint8_t* dst) const {
    if (to_ == DType::kFloat8E8M0) {
      // Through float32, as the reference (to_float8e8m0) does.
      for (int64_t i = 0; i < m; ++i) dst[i] = float_to_e8m0(cast_value<float>(src[i]), round_, saturate_);
      return;
    }
    dispatch_float8(to_, [&](auto t8) {
      constexpr Float8Format fmt = Float8Traits<typename decltype(t8)::type>::fmt;
      for (int64_t i = 0; i < m; ++i) dst[i] = float_to_float8(static_cast<double>(load(src[i])), fmt, saturate_);
    });
  }

  DType from_, to_;
  bool saturate_;
  E8M0Round round_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Cast", cast_infer);
TWINFER_REGISTER_KERNEL("Cast", Backend::kCPU, 0, cast_supports, make_kernel<CastKernel>);
TWINFER_REGISTER_SCHEMA("CastLike", castlike_infer);
TWINFER_REGISTER_KERNEL("CastLike", Backend::kCPU, 0, cast_supports, make_kernel<CastKernel>);

}  // namespace twinfer::ew
