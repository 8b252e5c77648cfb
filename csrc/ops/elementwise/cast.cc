// Cast and CastLike between float32/64, float16, bfloat16, the integer types,
// bool, the 8-bit floats and the 4-/2-bit types. Conversions are
// ew::cast_value (scalar.h): float -> int truncates toward zero, NaN -> 0,
// out-of-range values saturate; narrowing integer casts wrap; -> bool is
// x != 0; 16-bit floats round to nearest even. 8-bit floats (core/float8.h)
// decode exactly to float and are encoded from the exact value with
// round-to-nearest-even and the `saturate` attribute (default 1); FLOAT8E8M0
// goes through float32 and honours `round_mode` ("up", the default, "down",
// "nearest"), as the ONNX reference. The 4-/2-bit types (core/subbyte.h,
// stored one per byte) decode exactly (to int8/uint8 or float) and encode as
// the reference's ml_dtypes does: integer targets wrap, FLOAT4E2M1 rounds to
// nearest even and always saturates.
#include <algorithm>
#include <cstring>

#include "core/subbyte.h"
#include "ops/elementwise/binary_kernel.h"
#include "ops/elementwise/cast_ops.h"
#include "ops/elementwise/cast_rows.h"
#include "ops/elementwise/half_rows.h"

namespace twinfer::ew {
namespace {

void cast_infer(InferContext& c) {
  DType to = cast_target(c.node());
  if (!(to != DType::kUndefined))
    c.fail(ErrorKind::kUnsupportedOp,
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
    // 1-byte storage types without a C++ arithmetic type: decode to float
    // (exact) or to int8/uint8, then go on from those values.
    if (dtype_is_float8(from_) || from_ == DType::kFloat4E2M1) {
      decode_then_store<float>(x, y, ctx, [this](uint8_t b) {
        return from_ == DType::kFloat4E2M1 ? float4_e2m1_value(b) : float8_value(from_, b);
      });
      return;
    }
    if (from_ == DType::kInt4 || from_ == DType::kInt2) {
      const bool four = from_ == DType::kInt4;
      decode_then_store<int8_t>(x, y, ctx, [four](uint8_t b) { return four ? int4_value(b) : int2_value(b); });
      return;
    }
    if (from_ == DType::kUInt4 || from_ == DType::kUInt2) {
      const bool four = from_ == DType::kUInt4;
      decode_then_store<uint8_t>(x, y, ctx, [four](uint8_t b) { return four ? uint4_value(b) : uint2_value(b); });
      return;
    }
    // float32 <-> float16, a model's inputs and outputs around a 16-bit graph:
    // vectorised rows (half_rows.h), the same values as cast_value's.
    if (from_ == DType::kFloat32 && to_ == DType::kFloat16) {
      parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        floats_to_halves(x.as<const float>() + b, y.as<uint16_t>() + b, e - b);
      });
      return;
    }
    if (from_ == DType::kFloat16 && to_ == DType::kFloat32) {
      parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        halves_to_floats(x.as<const uint16_t>() + b, y.as<float>() + b, e - b);
      });
      return;
    }
    // float32 <-> int32 and float32 -> bool (a mask, an index): vectorised
    // rows (cast_rows.h), the same values.
    if (from_ == DType::kFloat32 && (to_ == DType::kInt32 || to_ == DType::kBool)) {
      const float* src = x.as<const float>();
      parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        if (to_ == DType::kInt32)
          floats_to_int32(src + b, y.as<int32_t>() + b, e - b);
        else
          floats_to_bool(src + b, y.as<bool>() + b, e - b);
      });
      return;
    }
    if (from_ == DType::kBool && to_ == DType::kFloat32) {
      parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        bools_to_floats(x.as<const uint8_t>() + b, y.as<float>() + b, e - b);
      });
      return;
    }
    if (from_ == DType::kInt32 && to_ == DType::kFloat32) {
      parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
        int32_to_floats(x.as<const int32_t>() + b, y.as<float>() + b, e - b);
      });
      return;
    }
    dispatch_typeset<kAllTypes>(from_, [&](auto tf) {
      using From = typename decltype(tf)::type;
      const From* src = x.as<const From>();
      if (dtype_is_float8(to_) || dtype_is_subbyte(to_)) {
        parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
          store_from(src + b, e - b, y, b);
        });
        return;
      }
      dispatch_typeset<kAllTypes>(to_, [&](auto tt) {
        using To = typename decltype(tt)::type;
        To* dst = y.as<To>();
        parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) dst[i] = cast_value<To>(src[i]);
        });
      });
    });
  }

 private:
  // Decodes x's bytes with `dec` into V values, 256 at a time, and stores them.
  template <typename V, typename Dec>
  void decode_then_store(const TensorView& x, const TensorView& y, KernelContext& ctx, Dec dec) const {
    const uint8_t* src = x.as<const uint8_t>();
    parallel_for(x.numel(), ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
      V tmp[256];
      for (int64_t i = b; i < e; i += 256) {
        const int64_t m = std::min<int64_t>(256, e - i);
        for (int64_t j = 0; j < m; ++j) tmp[j] = dec(src[i + j]);
        store_from(tmp, m, y, i);
      }
    });
  }

  // m values into y[at .. at+m) of the output type.
  template <typename V>
  void store_from(const V* v, int64_t m, const TensorView& y, int64_t at) const {
    if (dtype_is_float8(to_)) {
      encode_float8(v, m, y.as<uint8_t>() + at);
      return;
    }
    if (dtype_is_subbyte(to_)) {
      encode_subbyte(v, m, y.as<uint8_t>() + at);
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
      constexpr Float8Format fmt = Float8Traits<typename decltype(t8)::type>::fmt();
      for (int64_t i = 0; i < m; ++i) dst[i] = float_to_float8(static_cast<double>(load(src[i])), fmt, saturate_);
    });
  }

  // Into a 4-/2-bit type: integers (and bool) wrap, floats truncate then
  // wrap, FLOAT4E2M1 rounds (core/subbyte.h). `saturate` does not apply.
  template <typename From>
  void encode_subbyte(const From* src, int64_t m, uint8_t* dst) const {
    if (to_ == DType::kFloat4E2M1) {
      for (int64_t i = 0; i < m; ++i) dst[i] = float_to_float4_e2m1(static_cast<double>(load(src[i])));
      return;
    }
    const int bits = dtype_bits(to_);
    for (int64_t i = 0; i < m; ++i) {
      if constexpr (std::is_integral_v<From>)
        dst[i] = wrap_subbyte(static_cast<int64_t>(src[i]), bits);
      else
        dst[i] = float_to_subbyte_int(static_cast<double>(load(src[i])), bits);
    }
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
