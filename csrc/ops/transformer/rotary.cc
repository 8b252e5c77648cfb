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
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

void infer_rotary(InferContext& c) {
  const DType dt = c.input_dtype(0);
  c.check(ew::in_typeset(ew::kFloatTypes, dt), ErrorKind::kDType,
          std::string("RotaryEmbedding needs a float input, got ") + dtype_name(dt));
  c.check(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2), ErrorKind::kModelFormat,
          "RotaryEmbedding needs X, cos_cache and sin_cache");
  check_same_dtype_as(c, 1, dt);
  check_same_dtype_as(c, 2, dt);
  if (c.has_input(3))
    c.check(c.input_dtype(3) == DType::kInt64 || c.input_dtype(3) == DType::kInt32, ErrorKind::kDType,
            "position_ids must be int64");
  if (c.input_has_shape(0)) {
    const size_t r = c.input_shape(0).size();
    c.check(r == 3 || r == 4, ErrorKind::kShape, "RotaryEmbedding input must be 3-D or 4-D, got " +
                                                     sym_shape_str(c.input_shape(0)));
    if (r == 3)
      c.check(c.node().attr_int("num_heads", 0) > 0, ErrorKind::kModelFormat,
              "3-D RotaryEmbedding input needs the num_heads attribute");
  }
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("RotaryEmbedding", infer_rotary);

class RotaryKernel final : public Kernel {
 public:
  explicit RotaryKernel(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    Shape x = info.input_shape(0);
    if (x.size() != 3 && x.size() != 4)
      info.fail(ErrorKind::kShape, "input must be 3-D or 4-D, got " + shape_str(x));
    in3d_ = x.size() == 3;
    B_ = x[0];
    if (in3d_) {
      H_ = n.attr_int("num_heads", 0);
      if (H_ <= 0) info.fail(ErrorKind::kModelFormat, "3-D input needs num_heads > 0");
      S_ = x[1];
      if (x[2] % H_) info.fail(ErrorKind::kShape, "hidden size " + std::to_string(x[2]) +
                                                   " is not a multiple of num_heads " + std::to_string(H_));
      D_ = x[2] / H_;
    } else {
      H_ = x[1];
      S_ = x[2];
      D_ = x[3];
    }
    rot_ = n.attr_int("rotary_embedding_dim", 0);
    if (rot_ == 0) rot_ = D_;
    if (rot_ < 0 || rot_ > D_ || rot_ % 2)
      info.fail(ErrorKind::kModelFormat, "rotary_embedding_dim " + std::to_string(rot_) +
                                             " must be even and at most the head size " + std::to_string(D_));
    interleaved_ = n.attr_int("interleaved", 0) != 0;
    const int64_t half = rot_ / 2;
    Shape cs = info.input_shape(1);
    if (info.input_shape(2) != cs)
      info.fail(ErrorKind::kShape, "cos_cache " + shape_str(cs) + " and sin_cache " +
                                       shape_str(info.input_shape(2)) + " differ");
    if (cs.empty() || cs.back() != half)
      info.fail(ErrorKind::kShape, "the caches' last dim must be rotary_embedding_dim / 2 = " +
                                       std::to_string(half) + ", got " + shape_str(cs));
    has_pos_ = info.has_input(3);
    if (has_pos_) {
      if (cs.size() != 2) info.fail(ErrorKind::kShape, "with position_ids the caches must be 2-D, got " + shape_str(cs));
      max_pos_ = cs[0];
      Shape ps = info.input_shape(3);
      if (ps != Shape{B_, S_})
        info.fail(ErrorKind::kShape, "position_ids " + shape_str(ps) + " must be [" + std::to_string(B_) + ", " +
                                         std::to_string(S_) + "]");
    } else {
      const int64_t n_rows = shape_numel(cs) / std::max<int64_t>(1, half);
      if (n_rows == B_ * S_ && (cs.size() == 3 ? cs[0] == B_ && cs[1] == S_ : true)) {
        cache_batch_stride_ = S_;
      } else if (n_rows == S_ && (cs.size() == 2 || (cs.size() == 3 && cs[0] == 1))) {
        cache_batch_stride_ = 0;
      } else {
        info.fail(ErrorKind::kShape, "without position_ids the caches must be [" + std::to_string(B_) + ", " +
                                         std::to_string(S_) + ", " + std::to_string(half) + "], got " + shape_str(cs));
      }
    }
  }
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
    const int64_t B = B_, H = H_, S = S_, D = D_, half = rot_ / 2;
    std::vector<int64_t> pos;
    if (has_pos_) {
      const TensorView& p = ctx.inputs[3];
      pos.resize(B * S);
      for (int64_t i = 0; i < B * S; ++i) {
        const int64_t v = p.dtype == DType::kInt32 ? p.as<int32_t>()[i] : p.as<int64_t>()[i];
        if (v < 0 || v >= max_pos_)
          throw Error(ErrorKind::kInvalidArgument, "position_ids value " + std::to_string(v) +
                                                       " is outside the cache [0, " + std::to_string(max_pos_) + ")");
        pos[i] = v;
      }
    }
    constexpr bool kHalf = !std::is_same<T, C>::value;
    auto rt = [](C v) -> C {
      if constexpr (kHalf) return load(store<T>(v));
      else return v;
    };
    parallel_for(B * S * H, ctx.num_threads, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, D)),
                 [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        // r enumerates (b, s, h).
        const int64_t h = r % H, s = (r / H) % S, b = r / (H * S);
        const int64_t off = in3d_ ? ((b * S + s) * H + h) * D : ((b * H + h) * S + s) * D;
        const int64_t crow = has_pos_ ? pos[b * S + s] : b * cache_batch_stride_ + s;
        const T* cr = cosc + crow * half;
        const T* sr = sinc + crow * half;
        const T* xr = x + off;
        T* yr = y + off;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = interleaved_ ? 2 * i : i, i2 = interleaved_ ? 2 * i + 1 : i + half;
          const C c = load(cr[i]), sn = load(sr[i]);
          const C x1 = load(xr[i1]), x2 = load(xr[i2]);
          yr[i1] = store<T>(rt(c * x1) - rt(sn * x2));
          yr[i2] = store<T>(rt(sn * x1) + rt(c * x2));
        }
        if (yr != xr) std::copy(xr + rot_, xr + D, yr + rot_);
      }
    });
  }

  bool in3d_ = false, interleaved_ = false, has_pos_ = false;
  int64_t B_ = 0, H_ = 0, S_ = 0, D_ = 0, rot_ = 0, max_pos_ = 0, cache_batch_stride_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2}, why); }

TWINFER_REGISTER_KERNEL("RotaryEmbedding", Backend::kCPU, 0, supports, make_kernel<RotaryKernel>);

}  // namespace
}  // namespace twinfer::tx
