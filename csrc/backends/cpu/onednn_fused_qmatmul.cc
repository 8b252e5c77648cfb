// com.twinfer::QMatMul (see ops/quant/qlinear_fused.h): x [.., K] (uint8/int8) times
// constant int8 W, as one oneDNN int8 matmul over the M = prod(x's leading
// dims) rows. W is reordered once, at build, into the layout the primitive
// asks for (with the compensation oneDNN needs for int8 x); the scales, zero
// points, bias, activation and requantization run in its epilogue. An
// x_scale / x_zero_point computed at run time (a dynamic quantization's) is
// declared as oneDNN's run-time source scale / zero point and read per run.
//
// With x_per_token, x arrives as float32: each run quantizes its rows into
// int8 scratch with one scale per row (ops/quant/token_quant.h), and the row
// scales join the epilogue as a binary post-op ahead of the bias. That
// matmul is described as 3-D, [1, M, K] x [1, K, N]: oneDNN 3.2's brgemm
// kernels broadcast a binary operand of [1, M, 1] (dim 1, the "channel" of
// a 3-D tensor), while [M, 1] against a 2-D [M, N] has no optimized
// broadcast and fell back to its reference matmul ("ref:any", minutes
// for what takes milliseconds).
//
// A device plan's lowered QMatMul (x and y in float16 / bfloat16, out_dtype)
// runs here on the simulated device: x's rows widened to float32 before they
// are quantized, y written by oneDNN in float32 and narrowed, saturated, after.
#include <algorithm>
#include <cmath>
#include <memory>

#include "backends/cpu/onednn_qlinear.h"
#include "core/half.h"
#include "graph/domains.h"
#include "ops/quant/quant_util.h"
#include "ops/quant/token_quant.h"

namespace twinfer::quant {
namespace {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

class QMatMulKernel final : public Kernel {
 public:
  explicit QMatMulKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {
    const Shape x = info.input_shape(kQX), w = info.input_shape(kQW);
    const bool trans = info.node().attr_int("trans_b", 0) != 0;
    k_ = trans ? w[1] : w[0];
    n_ = trans ? w[0] : w[1];
    if (x.back() != k_) info.fail(ErrorKind::kShape, "inner dimensions differ: x " + shape_str(x) + ", w " + shape_str(w));
    m_ = 1;
    for (size_t d = 0; d + 1 < x.size(); ++d) m_ *= x[d];
    p_ = read_qlinear_params(info, n_, /*allow_runtime_x=*/true);
    narrow_x_ = p_.x_per_token && p_.x_type != DType::kFloat32;
    narrow_y_ = !p_.quantized_out && p_.y_type != DType::kFloat32;
    if (m_ == 0 || n_ == 0 || k_ == 0) return;
    if (p_.x_per_token) token_bytes_ = onednn::align_up(static_cast<size_t>(m_ * k_)) + onednn::align_up(m_ * sizeof(float));
    if (narrow_x_) token_bytes_ += onednn::align_up(static_cast<size_t>(m_ * k_) * sizeof(float));
    if (narrow_y_) token_bytes_ += onednn::align_up(static_cast<size_t>(m_ * n_) * sizeof(float));
    onednn::guarded(node_, op_, [&] {
      const dt y_type = p_.quantized_out ? onednn::dnnl_type(p_.y_type) : dt::f32;
      if (p_.x_per_token) {  // 3-D, see the top of the file
        a_md_ = dnnl::memory::desc({1, m_, k_}, dt::s8, tag::abc);
        w_plain_ = dnnl::memory::desc({1, k_, n_}, dt::s8, trans ? tag::acb : tag::abc);
        y_md_ = dnnl::memory::desc({1, m_, n_}, y_type, tag::abc);
      } else {
        a_md_ = dnnl::memory::desc({m_, k_}, onednn::dnnl_type(p_.x_type), tag::ab);
        // The weights as stored: [K, N] row-major, or [N, K] read transposed.
        w_plain_ = dnnl::memory::desc({k_, n_}, dt::s8, trans ? tag::ba : tag::ab);
        y_md_ = dnnl::memory::desc({m_, n_}, y_type, tag::ab);
        if (!p_.bias.empty()) bias_md_ = dnnl::memory::desc({1, n_}, dt::f32, tag::ab);
      }
      w_const_ = info.input_constant(kQW)->data();
      w_owner_ = info.input_constant(kQW)->storage();
      const Variant& v = variants_.get(onednn::current_threads(), [&] { return make_variant(); });
      declared_scratch_ = v.pad_bytes;
      impl_ = std::string(p_.x_per_token ? "onednn int8 matmul, x per token (" : "onednn int8 matmul (") + v.impl + ")";
      w_const_ = nullptr;  // packed now; other thread budgets reorder from the packed copy
      w_owner_ = nullptr;
    });
  }

  // Per token: the int8 rows and their scales first, then oneDNN's scratchpad.
  size_t scratch_bytes() const override { return token_bytes_ + declared_scratch_; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    if (m_ == 0 || n_ == 0) return;
    if (k_ == 0) {  // an empty sum: y is the epilogue applied to 0 (+ bias); rare, so computed plainly
      run_empty_k(ctx);
      return;
    }
    onednn::guarded(node_, op_, [&] {
      onednn::ThreadScope threads(ctx.num_threads);
      const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
      const dnnl::engine& eng = onednn::engine();
      auto mem = [&](const dnnl::memory::desc& md, const void* p) {
        return dnnl::memory(md, eng, const_cast<void*>(p));
      };
      char* scratch = static_cast<char*>(ctx.scratch);
      const void* src = ctx.inputs[kQX].data;
      const float* row_scales = nullptr;
      float x_scale = 1.f;  // this run's, when a DynamicQuantizeLinear computed them (oneDNN reads them in execute)
      int32_t x_zero = 0;
      // Scratch: [int8 rows][row scales][x widened][y in float32], then oneDNN's.
      char* wide = scratch + (p_.x_per_token ? onednn::align_up(static_cast<size_t>(m_ * k_)) +
                                                   onednn::align_up(m_ * sizeof(float))
                                             : 0);
      float* x_wide = narrow_x_ ? reinterpret_cast<float*>(wide) : nullptr;
      float* y_wide = narrow_y_ ? reinterpret_cast<float*>(
                                      wide + (narrow_x_ ? onednn::align_up(static_cast<size_t>(m_ * k_) * sizeof(float)) : 0))
                                : nullptr;
      if (p_.x_per_token) {
        int8_t* q = reinterpret_cast<int8_t*>(scratch);
        float* rs = reinterpret_cast<float*>(scratch + onednn::align_up(static_cast<size_t>(m_ * k_)));
        const float* xf = ctx.inputs[kQX].as<const float>();
        if (x_wide) {
          widen(ctx.inputs[kQX].data, p_.x_type, m_ * k_, x_wide);
          xf = x_wide;
        }
        quantize_tokens(xf, m_, k_, q, rs, threads.threads(), p_.x_smooth.empty() ? nullptr : p_.x_smooth.data());
        src = q;
        row_scales = rs;
      }
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(a_md_, src)},
                                                 {DNNL_ARG_WEIGHTS, v.weights},
                                                 {DNNL_ARG_DST, mem(y_md_, y_wide ? y_wide : ctx.outputs[0].data)}};
      if (p_.x_per_token) {
        add_qlinear_token_args(p_, row_scales, m_, n_, args);
      } else {
        if (!p_.bias.empty()) args[DNNL_ARG_BIAS] = mem(bias_md_, p_.bias.data());
        if (p_.x_scale_runtime) x_scale = *ctx.inputs[kQXScale].as<const float>();
        if (p_.x_zero_runtime) load_int32s(ctx.inputs[kQXZero], &x_zero);
        add_qlinear_args(p_, args, &x_scale, &x_zero);
      }
      if (v.pad_bytes) {
        // After the token buffers in the context's scratch, or the thread's own.
        char* pad = scratch && v.pad_bytes <= declared_scratch_ ? scratch + token_bytes_
                                                                 : onednn::run_scratch(KernelContext{}, 0, v.pad_bytes);
        args[DNNL_ARG_SCRATCHPAD] = mem(v.pad_md, pad);
      }
      dnnl::stream s(eng);
      v.prim.execute(s, args);
      s.wait();
      if (y_wide) narrow_saturated(y_wide, m_ * n_, p_.y_type, ctx.outputs[0].data);
    });
  }

 private:
  using Variant = onednn::PrimitiveVariant<dnnl::matmul>;

  Variant make_variant() const {
    Variant v;
    const dnnl::memory::desc w_any = p_.x_per_token ? dnnl::memory::desc({1, k_, n_}, dt::s8, tag::any)
                                                    : dnnl::memory::desc({k_, n_}, dt::s8, tag::any);
    const dnnl::primitive_attr attr = p_.x_per_token ? qlinear_token_attr(p_, m_, n_) : qlinear_attr(p_, 1 << 1);
    dnnl::matmul::primitive_desc pd(onednn::engine(), a_md_, w_any, bias_md_, y_md_, attr);
    v.adopt(pd);
    v.weights = packed_.empty() ? packed_.init(w_plain_, w_const_, pd.weights_desc(), w_owner_) : packed_.get(pd.weights_desc());
    return v;
  }

  void run_empty_k(KernelContext& ctx) const {
    for (int64_t r = 0; r < m_; ++r)
      for (int64_t j = 0; j < n_; ++j) {
        const float f = p_.act.apply(p_.bias.empty() ? 0.f : p_.bias[j]);
        const int64_t i = r * n_ + j;
        if (!p_.quantized_out) {
          if (narrow_y_) narrow_saturated(&f, 1, p_.y_type, static_cast<uint16_t*>(ctx.outputs[0].data) + i);
          else ctx.outputs[0].as<float>()[i] = f;
          continue;
        }
        int64_t lo, hi;
        quant_int_range_of(p_.y_type, &lo, &hi);
        const double q = std::min<double>(hi, std::max<double>(lo, std::nearbyint(f / p_.y_scale) + p_.y_zero));
        if (p_.y_type == DType::kUInt8) ctx.outputs[0].as<uint8_t>()[i] = static_cast<uint8_t>(q);
        else ctx.outputs[0].as<int8_t>()[i] = static_cast<int8_t>(q);
      }
  }
  static void widen(const void* x, DType t, int64_t n, float* out) {
    const uint16_t* bits = static_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; ++i) out[i] = t == DType::kFloat16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
  }
  // A finite value past t's range saturates, as lowering's Clip -> Cast (NaN stays NaN).
  static void narrow_saturated(const float* y, int64_t n, DType t, void* out) {
    uint16_t* bits = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i)
      bits[i] = t == DType::kFloat16 ? float_to_half_saturate(y[i]) : float_to_bf16_saturate(y[i]);
  }
  static void quant_int_range_of(DType t, int64_t* lo, int64_t* hi) {
    *lo = t == DType::kUInt8 ? 0 : -128;
    *hi = t == DType::kUInt8 ? 255 : 127;
  }

  std::string node_, op_, impl_;
  int64_t m_ = 0, k_ = 0, n_ = 0;
  QLinearParams p_;
  dnnl::memory::desc a_md_, w_plain_, y_md_, bias_md_;
  const void* w_const_ = nullptr;
  std::shared_ptr<const void> w_owner_;  // w_const_'s storage: packed copies shared across kernels
  mutable onednn::PackedWeights packed_;
  onednn::ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
  size_t token_bytes_ = 0;  // int8 rows + row scales (per token), widened x, float32 y: the start of scratch
  bool narrow_x_ = false, narrow_y_ = false;  // x / y in float16 or bfloat16 (a lowered device plan's)
};

// x_scale and x_zero_point may be run-time values (a dynamic quantization's,
// fuse_matmul_integer.cc); the rest must be constants.
bool qmatmul_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {kQW, kQWScale, kQBias, kQYScale, kQYZero, kQXSmooth})
    if (info.has_input(i) && !info.input_constant(i)) {
      if (why) *why = "QMatMul needs constant weights and quantization parameters";
      return false;
    }
  if (!info.input_constant(kQW)) {
    if (why) *why = "QMatMul needs constant weights";
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_KERNEL(kQMatMulOp, Backend::kCPU, 10, qmatmul_supports, make_kernel<QMatMulKernel>,
                        kTwinferDomain);

}  // namespace twinfer::quant
