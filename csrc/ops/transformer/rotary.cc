// RotaryEmbedding (opset 23): rotates the first rotary_embedding_dim values
// of every head (halves, or interleaved pairs) by the angle whose cos / sin
// the caches hold for the token's position:
//   real = cos * x1 - sin * x2,  imag = sin * x1 + cos * x2
// X is [B, H, S, D] or [B, S, H*D] (num_heads given). With position_ids
// [B, S] the caches are [max_pos, rot/2] tables indexed by position; without,
// they are [B, S, rot/2] (or [S, rot/2], shared by the batch).
#include <algorithm>
#include <type_traits>

#include "core/parallel.h"
#include "ops/transformer/rotary_math.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

void infer_rotary(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("RotaryEmbedding needs a float input, got ") + dtype_name(dt));
  if (!(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2)))
    c.fail(ErrorKind::kModelFormat, "RotaryEmbedding needs X, cos_cache and sin_cache");
  check_same_dtype_as(c, 1, dt);
  check_same_dtype_as(c, 2, dt);
  if (c.has_input(3))
    if (!(c.input_dtype(3) == DType::kInt64 || c.input_dtype(3) == DType::kInt32))
      c.fail(ErrorKind::kDType, "position_ids must be int64");
  if (c.input_has_shape(0)) {
    const size_t r = c.input_shape(0).size();
    if (!(r == 3 || r == 4))
      c.fail(ErrorKind::kShape, "RotaryEmbedding input must be 3-D or 4-D, got " + sym_shape_str(c.input_shape(0)));
    if (r == 3)
      if (!(c.node().attr_int("num_heads", 0) > 0))
        c.fail(ErrorKind::kModelFormat, "3-D RotaryEmbedding input needs the num_heads attribute");
  }
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("RotaryEmbedding", infer_rotary);

class RotaryKernel final : public Kernel {
 public:
  explicit RotaryKernel(const KernelBuildInfo& info) : g_(rotary_geom(info)) {}
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T, compute_t<T>>(ctx);
    });
  }

 private:
  template <typename T, typename C>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    const T* cosc = ctx.inputs[1].as<T>();
    const T* sinc = ctx.inputs[2].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const RotaryGeom& g = g_;
    const int64_t S = g.S, D = g.D, half = g.rot / 2;
    std::vector<int64_t> pos;
    if (g.has_pos) {
      const TensorView& p = ctx.inputs[3];
      pos.resize(g.B * S);
      for (int64_t i = 0; i < g.B * S; ++i) {
        const int64_t v = p.dtype == DType::kInt32 ? p.as<int32_t>()[i] : p.as<int64_t>()[i];
        if (v < 0 || v >= g.max_pos)
          throw Error(ErrorKind::kInvalidArgument, "position_ids value " + std::to_string(v) +
                                                       " is outside the cache [0, " + std::to_string(g.max_pos) + ")");
        pos[i] = v;
      }
    }
    parallel_for(g.B * S * g.H, ctx.num_threads, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, D)),
                 [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        // r enumerates (b, s, h).
        const int64_t bs = r / g.H, s = bs % S, b = bs / S;
        const int64_t off = g.row_offset(r);
        const int64_t crow = g.has_pos ? pos[bs] : b * g.cache_batch_stride + s;
        const T* cr = cosc + crow * half;
        const T* sr = sinc + crow * half;
        const T* xr = x + off;
        T* yr = y + off;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = g.first(i), i2 = g.second(i);
          rotary_pair<T, C>(load(cr[i]), load(sr[i]), load(xr[i1]), load(xr[i2]), yr[i1], yr[i2]);
        }
        if (yr != xr) std::copy(xr + g.rot, xr + D, yr + g.rot);
      }
    });
  }

  RotaryGeom g_;
};

bool supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2}, why); }

TWINFER_REGISTER_KERNEL("RotaryEmbedding", Backend::kCPU, 0, supports, make_kernel<RotaryKernel>);

}  // namespace
}  // namespace twinfer::tx
