// CUDA Cast / CastLike with the CPU kernel's conversions (ops/elementwise/cast.cc):
// between the standard types (float32/64, float16, bfloat16, the integer
// types, bool) through ew::cast_value (truncation toward zero, NaN -> 0,
// saturation, wrap-around for narrowing integers, != 0 for bool); and to or
// from the one-byte coded types, stored one element per byte: the 8-bit
// floats (core/float8.h: exact decoding, round-to-nearest-even encoding with
// `saturate`, E8M0 through float32 with `round_mode`), FLOAT4E2M1 and the
// 4-/2-bit integers (core/subbyte.h: integer sources wrap, float sources
// truncate then wrap, FLOAT4E2M1 rounds and saturates). All of these are
// __host__ __device__ functions the CPU kernel calls too.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "core/subbyte.h"
#include "ops/elementwise/cast_ops.h"

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

template <typename To>
struct CastTo {
  template <typename From> TWINFER_HD To operator()(From v) const { return cast_value<To>(v); }
};

// A one-byte coded type, as the kernels see it.
struct Coded {
  enum Kind : int { kFloat8, kE8M0, kFloat4, kInt4, kInt2, kUInt4, kUInt2 } kind = kFloat8;
  DType dtype = DType::kUndefined;  // the float8 format (kFloat8)
  int bits = 8;

  static bool of(DType t, Coded* c) {
    c->dtype = t;
    switch (t) {
      case DType::kFloat8E8M0: c->kind = kE8M0; return true;
      case DType::kFloat4E2M1: c->kind = kFloat4; c->bits = 4; return true;
      case DType::kInt4: c->kind = kInt4; c->bits = 4; return true;
      case DType::kInt2: c->kind = kInt2; c->bits = 2; return true;
      case DType::kUInt4: c->kind = kUInt4; c->bits = 4; return true;
      case DType::kUInt2: c->kind = kUInt2; c->bits = 2; return true;
      default:
        if (!dtype_is_float8(t)) return false;
        c->kind = kFloat8;
        return true;
    }
  }
  TWINFER_HD bool integer() const { return kind == kInt4 || kind == kInt2 || kind == kUInt4 || kind == kUInt2; }
  // The byte's value, exact in double (an integer for the integer kinds).
  TWINFER_HD double decode(uint8_t b) const {
    switch (kind) {
      case kFloat8:
      case kE8M0: return float8_value(dtype, b);
      case kFloat4: return float4_e2m1_value(b);
      case kInt4: return int4_value(b);
      case kInt2: return int2_value(b);
      case kUInt4: return uint4_value(b);
      default: return uint2_value(b);
    }
  }
};

// Into a coded type, from a value of a standard type: the CPU kernel's
// encode_float8 / encode_subbyte, per element.
struct Encoder {
  Coded to;
  Float8Format fmt{};
  bool saturate = true;
  E8M0Round round = E8M0Round::kUp;

  template <typename From> TWINFER_HD uint8_t operator()(From v) const {
    switch (to.kind) {
      case Coded::kFloat8: return float_to_float8(static_cast<double>(load(v)), fmt, saturate);
      case Coded::kE8M0: return float_to_e8m0(cast_value<float>(v), round, saturate);
      case Coded::kFloat4: return float_to_float4_e2m1(static_cast<double>(load(v)));
      default:
        if constexpr (std::is_integral<From>::value) return wrap_subbyte(static_cast<int64_t>(v), to.bits);
        else return float_to_subbyte_int(static_cast<double>(load(v)), to.bits);
    }
  }
};

// From a coded type: decoded exactly (to float for the float kinds, to
// int8/uint8 for the integer ones, as the CPU kernel does), then on to a
// standard type or encoded into another coded one.
template <typename To>
struct DecodeTo {
  Coded from;
  TWINFER_HD To operator()(uint8_t b) const {
    const double v = from.decode(b);
    if (from.integer()) return cast_value<To>(static_cast<int64_t>(v));
    return cast_value<To>(static_cast<float>(v));
  }
};
struct Recode {
  Coded from;
  Encoder enc;
  TWINFER_HD uint8_t operator()(uint8_t b) const {
    const double v = from.decode(b);
    if (from.integer()) return enc(static_cast<int64_t>(v));
    return enc(static_cast<float>(v));
  }
};

Float8Format float8_format(DType t) {
  Float8Format f{};
  dispatch_float8(t, [&](auto tag) { f = Float8Traits<typename decltype(tag)::type>::fmt(); });
  return f;
}

bool cast_supports(const KernelBuildInfo& info, std::string* why) {
  Coded c;
  const DType from = info.input_dtype(0), to = info.output(0).dtype;
  if (!in_typeset(kCudaElementwiseTypes, from) && !Coded::of(from, &c)) {
    if (why) *why = std::string("Cast from ") + dtype_name(from) + " has no CUDA kernel";
    return false;
  }
  if (!in_typeset(kCudaElementwiseTypes, to) && !Coded::of(to, &c)) {
    if (why) *why = std::string("Cast to ") + dtype_name(to) + " has no CUDA kernel";
    return false;
  }
  return true;
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelBuildInfo& info) : from_(info.input_dtype(0)), to_(info.output(0).dtype) {
    from_coded_ = Coded::of(from_, &enc_from_);
    if (Coded::of(to_, &enc_.to)) {
      to_coded_ = true;
      if (enc_.to.kind == Coded::kFloat8) enc_.fmt = float8_format(to_);
      enc_.saturate = info.node().attr_int("saturate", 1) != 0;
      if (enc_.to.kind == Coded::kE8M0) enc_.round = parse_round_mode(info.node());
    }
  }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (from_ == to_) {
      check(cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, ctx.inputs[0].bytes(),
                            cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
      return;
    }
    auto go = [&](const auto* x, auto* y, const auto& f) {
      using X = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
      using Y = std::remove_pointer_t<decltype(y)>;
      twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<X, Y>(lc), lc.threads, 0, s>>>(n, x, y, f);
    };
    const auto* xb = ctx.inputs[0].as<const uint8_t>();
    auto* yb = ctx.outputs[0].as<uint8_t>();
    if (from_coded_ && to_coded_) {
      go(xb, yb, Recode{enc_from_, enc_});
    } else if (from_coded_) {
      dispatch_typeset<kCudaElementwiseTypes>(to_, [&](auto tt) {
        using T = typename decltype(tt)::type;
        go(xb, ctx.outputs[0].as<T>(), DecodeTo<T>{enc_from_});
      });
    } else if (to_coded_) {
      dispatch_typeset<kCudaElementwiseTypes>(from_, [&](auto tf) {
        using F = typename decltype(tf)::type;
        go(ctx.inputs[0].as<const F>(), yb, enc_);
      });
    } else {
      dispatch_typeset<kCudaElementwiseTypes>(from_, [&](auto tf) {
        using F = typename decltype(tf)::type;
        dispatch_typeset<kCudaElementwiseTypes>(to_, [&](auto tt) {
          using T = typename decltype(tt)::type;
          go(ctx.inputs[0].as<const F>(), ctx.outputs[0].as<T>(), CastTo<T>{});
        });
      });
    }
    check_launch("Cast kernel launch");
  }
  const char* impl_name() const override { return "cuda cast"; }

 private:
  DType from_, to_;
  bool from_coded_ = false, to_coded_ = false;
  Coded enc_from_;
  Encoder enc_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Cast", Backend::kCUDA, 0, cast_supports, make_kernel<CastKernel>);
TWINFER_REGISTER_KERNEL("CastLike", Backend::kCUDA, 0, cast_supports, make_kernel<CastKernel>);

}  // namespace twinfer::cuda
