// com.twinfer::QMatMul and QConv (ops/quant/qlinear_fused.h) on the GPU:
// cuBLASLt's int8 GEMM (gemm_int8.h) on operands packed as its IMMA kernels
// read them, then the layer's epilogue.
//
//   QMatMul  x[M, K] -> int8 rows (uint8 shifted by -128, K padded to 4);
//            with x_per_token, float32 x quantized per row with its own
//            scale (token_quant_kernels.h), the scales kept for the epilogue
//   QConv    x -> im2col rows [B*OH*OW, C*KH*KW] (same packing; K ordered
//            (tap, channel) for an NHWC x, the weights reordered to match), group 1;
//            grouped / depthwise convolutions take a direct kernel instead;
//            for an int8 channels-last x with zero point 0:
//            - channels in 4s: cuDNN's int8 convolution (conv_graph.h:
//              implicit GEMM, no im2col rows in memory), requantizing in its
//              own graph when y is int8 NHWC with ReLU or none, else int32
//              sums out and our epilogue;
//            - with int8 NHWC y and ReLU or none, also cuBLASLt's
//              int8-output GEMM writing y itself (after im2col, or on x's
//              rows as they are for a 1x1 of stride 1 with channels in 16s);
//              where cuDNN takes the layer too, both are timed at build and
//              the faster kept
//
// Weights are repacked once, at build, into [N, K] (K-major, padded), with
// their per-channel sums for the zero point. Two ways out of the GEMM:
//   fast     x int8 with zero point 0 (twinfer's device calibration makes
//            every activation so), int8 output with zero point 0, ReLU or no
//            activation: cuBLASLt scales by x_scale * w_scale[n] / y_scale per
//            channel, adds bias / y_scale, applies ReLU and rounds: one call;
//   general  int32 sums, then our epilogue (ops/quant/quant_math.h): any
//            activation, float or uint8 output, a zero point, per-token x
//            (its row scales are known only after the rows are quantized).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cuda/build_stream.h"
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/libraries.h"
#include "backends/cuda/gemm_int8.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/qlinear_kernels.h"
#include "backends/cuda/scaled_gemm.h"
#include "backends/cuda/token_quant_kernels.h"
#include "ops/nn/channels_last.h"
#include "graph/domains.h"
#include "ops/nn/window.h"
#include "ops/quant/qlinear_params.h"

namespace twinfer::cuda {

namespace {

using quant::ConvGeometry;
using quant::LinearEpilogue;
using quant::QLinearParams;

bool constants_known(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {quant::kQXScale, quant::kQXZero, quant::kQW, quant::kQWScale, quant::kQBias, quant::kQYScale,
                   quant::kQYZero, quant::kQXSmooth})
    if (info.has_input(i) && !info.input_constant(i)) {
      if (why) *why = "the CUDA int8 layers need constant weights and quantization parameters";
      return false;
    }
  if (!info.input_constant(quant::kQW)) {
    if (why) *why = "the CUDA int8 layers need constant weights";
    return false;
  }
  return true;
}

// The epilogue of a layer with these parameters, reading device arrays.
LinearEpilogue epilogue_for(const QLinearParams& p, const float* scale, const float* bias, const int32_t* colsum,
                            int32_t x_zero, const float* row_scale = nullptr) {
  LinearEpilogue e;
  e.scale = scale;
  e.row_scale = row_scale;
  e.bias = bias;
  e.colsum = colsum;
  e.x_zero = x_zero;
  e.act = nn::ActFn::of(p.act);
  e.quantized = p.quantized_out;
  if (p.quantized_out) {
    const bool u8 = p.y_type == DType::kUInt8;
    e.y_scale = p.y_scale;
    e.y_zero = p.y_zero;
    e.lo = static_cast<float>((u8 ? 0 : -128) - p.y_zero);
    e.hi = static_cast<float>((u8 ? 255 : 127) - p.y_zero);
  }
  return e;
}

// The layer's constants on the device and how its GEMM output becomes y.
class Int8Layer {
 public:
  // w: the weights as [n, k] int8 rows (host).
  // K and N padded to 16 (zero weights): every row of either operand then
  // starts 16-byte aligned, which cuBLASLt's IMMA kernels want (4 is the
  // documented minimum; PyTorch's int8 GEMM asks for multiples of 8 too).
  static constexpr int64_t kPad = 16;

  // fast_only: a form writing int8 y itself or nothing (throws
  // kUnsupportedOp where neither cuBLASLt nor CUTLASS takes it), for a caller
  // with another form to fall back on. y_rows: y is [rows, n] row-major (a
  // QMatMul's, an NHWC convolution's), which CUTLASS's form writes directly.
  Int8Layer(const QLinearParams& p, const int8_t* w, int64_t n, int64_t k, bool packs_x, int64_t rows,
            bool fast_only = false, bool y_rows = false)
      : p_(p), n_(n), k_(k), kp_(round_up(k, kPad)), np_(round_up(n, kPad)), rows_(rows) {
    per_token_ = p.x_per_token;
    x_u8_ = !per_token_ && p.x_type == DType::kUInt8;
    x_zero_ = x_u8_ ? p.x_zero - 128 : p.x_zero;  // in the int8 the GEMM reads
    packs_x_ = packs_x || x_u8_ || kp_ != k_ || per_token_;
    std::vector<int8_t> wp(static_cast<size_t>(np_ * kp_), 0);
    std::vector<int32_t> colsum(static_cast<size_t>(np_), 0);
    for (int64_t r = 0; r < n_; ++r)
      for (int64_t c = 0; c < k_; ++c) {
        wp[r * kp_ + c] = w[r * k_ + c];
        colsum[r] += w[r * k_ + c];
      }
    w_ = device_copy(wp.data(), DType::kInt8, {np_, kp_});
    const nn::ActKind act = p.act.kind;
    if (x_zero_ != 0) colsum_ = device_copy(colsum.data(), DType::kInt32, {np_});
    // TWINFER_INT8_GEMM=int32: every layer through cuBLASLt's int32 GEMM and
    // our epilogue, to time against cuBLASLt's int8-output form (on an H200 a
    // ResNet-50 1x1 convolution took 2.8 ms in that form at batch 256);
    // =cublaslt: never CUTLASS's form; =cutlass: CUTLASS's wherever it applies.
    const char* mode_env = std::getenv("TWINFER_INT8_GEMM");
    const std::string mode = mode_env ? mode_env : "";
    const bool int8_y = x_zero_ == 0 && p.quantized_out && p.y_type == DType::kInt8 && p.y_zero == 0 &&
                        (act == nn::ActKind::kNone || act == nn::ActKind::kRelu);
    const bool want_fast = !per_token_ && int8_y && mode != "int32";
    if (fast_only && !int8_y) throw Error(ErrorKind::kUnsupportedOp, "this layer has no int8-output GEMM form");
    std::string why_not_cublaslt;
    if (!fast_only || want_fast) {
      try {
        build_gemm(want_fast);
        fast_ = want_fast;
      } catch (const Error& e) {
        // cuBLASLt refused the int8-output form (its epilogue, pointer mode or
        // this shape): the int32 GEMM and our epilogue do the same layer.
        if (e.kind() != ErrorKind::kUnsupportedOp) throw;
        why_not_cublaslt = e.what();
        if (want_fast && !fast_only) build_gemm(false);
      }
    } else {
      why_not_cublaslt = "TWINFER_INT8_GEMM=int32";
    }
    if ((y_rows || fast_only) && mode != "int32" && mode != "cublaslt") consider_cutlass(fast_only, mode == "cutlass");
    if (!gemm_ && !scaled_) throw Error(ErrorKind::kUnsupportedOp, "no int8-output GEMM form: " + why_not_cublaslt);
  }

  int64_t kp() const { return kp_; }
  int64_t np() const { return np_; }
  bool fast() const { return fast_ && !scaled_; }  // cuBLASLt's int8 output (padded to np)
  bool x_u8() const { return x_u8_; }
  bool packs_x() const { return packs_x_; }
  bool per_token() const { return per_token_; }
  int32_t x_zero() const { return x_zero_; }
  const char* impl() const { return name_.c_str(); }

  // Scratch: [packed x][row scales, per token][GEMM output, unless it
  // writes y itself (`direct`)][cuBLASLt workspace], 256-byte aligned.
  size_t packed_bytes() const { return packs_x_ ? align(static_cast<size_t>(rows_ * kp_)) : 0; }
  size_t row_scale_bytes() const { return per_token_ ? align(static_cast<size_t>(rows_) * sizeof(float)) : 0; }
  size_t out_bytes(bool direct) const {
    return direct ? 0 : align(static_cast<size_t>(rows_ * np_) * (fast_ ? 1 : 4));
  }
  size_t workspace_bytes() const { return scaled_ ? scaled_->workspace_bytes() : gemm_->workspace_bytes(); }
  size_t scratch_bytes(bool direct) const {
    return packed_bytes() + row_scale_bytes() + out_bytes(direct) + align(workspace_bytes());
  }
  // Whether the GEMM writes y as it is ([rows, n] unpadded; for a
  // convolution, NHWC y): cuBLASLt's int8 output when N needs no padding,
  // CUTLASS's form always (it is chosen only for such a y).
  bool writes_y(bool y_rows) const { return y_rows && (scaled_ || (fast_ && np_ == n_)); }

  LinearEpilogue epilogue(const float* row_scale = nullptr) const {
    return epilogue_for(p_, scale_.data_as<float>(), p_.bias.empty() ? nullptr : bias_.data_as<float>(),
                        x_zero_ ? colsum_.data_as<int32_t>() : nullptr, x_zero_, row_scale);
  }

  // GEMM on packed (or in-place) x rows into `out` (y itself when
  // writes_y); row_scale: the per-token scales (CUTLASS's form applies them).
  void gemm(const int8_t* x_rows, void* out, void* workspace, cudaStream_t s, const float* row_scale = nullptr) const {
    if (scaled_) {
      ScaledGemmOperands o;
      o.x = x_rows;
      o.w = w_.data_as<int8_t>();
      o.col_scale = cut_scale_.data_as<float>();
      o.row_scale = row_scale;
      o.bias = cut_bias_.storage() ? cut_bias_.data_as<float>() : nullptr;
      o.y = out;
      scaled_->run(o, workspace, s);
      return;
    }
    gemm_->run(x_rows, w_.data_as<int8_t>(), out, scale_.data_as<float>(),
               p_.bias.empty() ? nullptr : bias_.data_as<float>(), workspace, s);
  }
  DType y_type() const { return p_.y_type; }  // float32, or out_dtype's 16-bit type, when not quantized

 private:
  static size_t align(size_t b) { return (b + 255) / 256 * 256; }

  // The per-channel scale and bias on the device and the GEMM: `fast`
  // folds 1 / y_scale into both for cuBLASLt's int8 output.
  void build_gemm(bool fast) {
    const QLinearParams& p = p_;
    std::vector<float> scale(static_cast<size_t>(np_), 0.f), bias;
    for (int64_t c = 0; c < n_; ++c) scale[c] = fast ? p.scales[c] / p.y_scale : p.scales[c];
    if (!p.bias.empty()) {
      bias.assign(static_cast<size_t>(np_), 0.f);
      for (int64_t c = 0; c < n_; ++c) bias[c] = fast ? p.bias[c] / p.y_scale : p.bias[c];
      bias_ = device_copy(bias.data(), DType::kFloat32, {np_});
    }
    scale_ = device_copy(scale.data(), DType::kFloat32, {np_});
    Int8Gemm::Config c;
    c.rows = rows_;
    c.n = np_;
    c.k = kp_;
    c.out = fast ? Int8Gemm::Output::kInt8 : Int8Gemm::Output::kInt32;
    c.bias = fast && !p.bias.empty();
    c.relu = fast && p.act.kind == nn::ActKind::kRelu;
    gemm_ = std::make_unique<Int8Gemm>(c);
    name_ = fast ? "cublasLt int8 (scale, bias, ReLU in its epilogue)" : "cublasLt int8 + epilogue";
    if (!gemm_->timings().empty()) name_ += "; timed " + gemm_->timings();
  }

  // CUTLASS's form (scaled_gemm.h) where it takes the layer: y written
  // by the GEMM's epilogue, scales (per token too), bias, the activation and
  // the int8 rounding inside. Against cuBLASLt's form both run at build on zeroed
  // operands (GEMM plus what follows it to y) and the faster is kept;
  // `forced` (TWINFER_INT8_GEMM=cutlass) skips the timing.
  void consider_cutlass(bool int8_only, bool forced) {
    const QLinearParams& p = p_;
    if (x_u8_ || x_zero_ != 0) return;
    ScaledGemmShape shape;
    shape.m = rows_, shape.n = n_, shape.k = kp_, shape.act = nn::ActFn::of(p.act);
    if (p.quantized_out) {
      if (p.y_type != DType::kInt8 || p.y_zero != 0) return;
      shape.out = DType::kInt8;
      shape.y_scale = p.y_scale;
    } else {
      if (int8_only) return;
      shape.out = p.y_type;
    }
    const std::string why = scaled_gemm_unsupported(shape);
    if (!why.empty()) {
      if (gemm_) name_ += " (not CUTLASS: " + why + ")";
      return;
    }
    // The layer's own scales and bias, unpadded ([n]): the activation and
    // y_scale are applied after them, as our epilogue does.
    cut_scale_ = device_copy(p.scales.data(), DType::kFloat32, {n_});
    if (!p.bias.empty()) cut_bias_ = device_copy(p.bias.data(), DType::kFloat32, {n_});
    auto cutlass = std::make_unique<ScaledGemm>(shape);
    if (!gemm_ || forced) {
      scaled_ = std::move(cutlass);
      name_ = scaled_->name() + (forced ? std::string(" (TWINFER_INT8_GEMM=cutlass)") : std::string(""));
      gemm_.reset();
      return;
    }
    TrialKey key("int8 gemm");
    key << rows_ << n_ << kp_ << np_ << fast_ << per_token_ << static_cast<int64_t>(shape.out)
        << static_cast<int64_t>(p.y_type) << static_cast<int64_t>(shape.act.kind) << !p.bias.empty();
    const FormTiming t = time_two_forms("CUTLASS", "cuBLASLt", key, [&] {
      const size_t y_bytes = static_cast<size_t>(rows_ * n_) * dtype_size(shape.out);
      const TrialBuffer x(static_cast<size_t>(rows_ * kp_)), y(y_bytes), out(out_bytes(false)),
          rows(per_token_ ? static_cast<size_t>(rows_) * sizeof(float) : 0),
          workspace(std::max(cutlass->workspace_bytes(), gemm_->workspace_bytes()));
      const auto* xr = static_cast<const int8_t*>(x.get());
      const float* row_scale = per_token_ ? static_cast<const float*>(rows.get()) : nullptr;
      ScaledGemmOperands o;
      o.x = xr, o.w = w_.data_as<int8_t>(), o.col_scale = cut_scale_.data_as<float>(), o.row_scale = row_scale;
      o.bias = cut_bias_.storage() ? cut_bias_.data_as<float>() : nullptr, o.y = y.get();
      // cuBLASLt's form as QMatMul runs it: the GEMM, then the int8 rows
      // copied out of their padding or the int32 sums through our epilogue.
      return fastest_of_two_ms([&](cudaStream_t s) { cutlass->run(o, workspace.get(), s); },
                               [&](cudaStream_t s) {
                                 {
                                   // as choose_working_algo's trials
                                   std::lock_guard<std::mutex> apart_from_captures(cudnn_handle_mutex());
                                   gemm(xr, fast_ && np_ == n_ ? y.get() : out.get(), workspace.get(), s);
                                 }
                                 if (fast_ && np_ != n_)
                                   check(cudaMemcpy2DAsync(y.get(), n_, out.get(), np_, n_, rows_,
                                                           cudaMemcpyDeviceToDevice, s),
                                         "cudaMemcpy2DAsync (trial)");
                                 else if (!fast_)
                                   linear_epilogue(static_cast<const int32_t*>(out.get()), rows_, n_, np_,
                                                   epilogue(row_scale), y.get(), p.y_type, nullptr, s);
                               });
    });
    if (t.first_wins) {
      scaled_ = std::move(cutlass);
      name_ = scaled_->name() + "; " + t.timed;
      gemm_.reset();
    } else {
      cut_scale_ = Tensor();
      cut_bias_ = Tensor();
      name_ += "; " + t.timed;
    }
  }

  QLinearParams p_;
  int64_t n_, k_, kp_, np_, rows_;
  bool x_u8_ = false, packs_x_ = false, fast_ = false, per_token_ = false;
  int32_t x_zero_ = 0;
  Tensor w_, scale_, bias_, colsum_;
  Tensor cut_scale_, cut_bias_;  // CUTLASS's column scales and bias ([n])
  std::unique_ptr<Int8Gemm> gemm_;
  std::unique_ptr<ScaledGemm> scaled_;  // CUTLASS's form, when it runs the layer instead
  std::string name_;  // what runs the layer, with the GEMM candidates timed
};

// ---- QMatMul ----------------------------------------------------------------

class CudaQMatMul final : public Kernel {
 public:
  explicit CudaQMatMul(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(quant::kQX), w = info.input_shape(quant::kQW);
    const bool trans = info.node().attr_int("trans_b", 0) != 0;
    k_ = trans ? w[1] : w[0];
    n_ = trans ? w[0] : w[1];
    if (x.back() != k_) info.fail(ErrorKind::kShape, "inner dimensions differ: x " + shape_str(x) + ", w " + shape_str(w));
    m_ = 1;
    for (size_t d = 0; d + 1 < x.size(); ++d) m_ *= x[d];
    const QLinearParams p = quant::read_qlinear_params(info, n_);
    if (m_ == 0 || n_ == 0 || k_ == 0)
      info.fail(ErrorKind::kUnsupportedOp, "an empty QMatMul runs on the CPU");
    // The weights as [N, K] rows.
    const int8_t* wc = info.input_constant(quant::kQW)->data_as<int8_t>();
    std::vector<int8_t> rows(static_cast<size_t>(n_ * k_));
    for (int64_t r = 0; r < n_; ++r)
      for (int64_t c = 0; c < k_; ++c) rows[r * k_ + c] = trans ? wc[r * k_ + c] : wc[c * n_ + r];
    layer_ = std::make_unique<Int8Layer>(p, rows.data(), n_, k_, false, m_, false, /*y_rows=*/true);
    if (!p.x_smooth.empty()) smooth_ = device_copy(p.x_smooth.data(), DType::kFloat32, {k_});
  }
  size_t scratch_bytes() const override { return layer_->scratch_bytes(layer_->writes_y(true)); }
  const char* impl_name() const override { return layer_->impl(); }

  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    const Int8Layer& L = *layer_;
    char* scratch = static_cast<char*>(ctx.scratch);
    const int8_t* xr = ctx.inputs[quant::kQX].as<const int8_t>();
    const float* row_scale = nullptr;
    if (L.per_token()) {
      auto* packed = reinterpret_cast<int8_t*>(scratch);
      auto* scales = reinterpret_cast<float*>(scratch + L.packed_bytes());
      quantize_token_rows(ctx.inputs[quant::kQX].data, ctx.inputs[quant::kQX].dtype, m_, k_, L.kp(), packed, scales,
                          smooth_.storage() ? smooth_.data_as<float>() : nullptr, s);
      xr = packed;
      row_scale = scales;
    } else if (L.packs_x()) {
      auto* packed = reinterpret_cast<int8_t*>(scratch);
      pack_int8_rows(ctx.inputs[quant::kQX].data, L.x_u8(), m_, k_, L.kp(), packed, s);
      xr = packed;
    }
    const bool direct = L.writes_y(true);  // cuBLASLt writes y itself
    char* out = scratch + L.packed_bytes() + L.row_scale_bytes();
    void* workspace = out + L.out_bytes(direct);
    L.gemm(xr, direct ? ctx.outputs[0].data : out, workspace, s, row_scale);
    if (direct) return;
    if (L.fast()) {  // int8 rows padded to np: drop the padding columns
      check(cudaMemcpy2DAsync(ctx.outputs[0].data, n_, out, L.np(), n_, m_, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpy2DAsync (QMatMul output)");
      return;
    }
    linear_epilogue(reinterpret_cast<const int32_t*>(out), m_, n_, L.np(), L.epilogue(row_scale),
                    ctx.outputs[0].data, L.y_type(), nullptr, s);
  }

 private:
  int64_t m_ = 0, k_ = 0, n_ = 0;
  std::unique_ptr<Int8Layer> layer_;
  Tensor smooth_;  // x_smooth on the device (empty: none)
};

bool qmatmul_supports(const KernelBuildInfo& info, std::string* why) { return constants_known(info, why); }

// ---- QConv -----------------------------------------------------------------

ConvGeometry geometry_of(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  const Shape x = info.input_shape(quant::kQX), w = info.input_shape(quant::kQW), y = info.output_shape(0);
  const size_t nsp = x.size() - 2;
  std::vector<int64_t> wk(w.begin() + 2, w.end());
  nn::Window win = nn::parse_window(n, nsp, &wk, nn::WindowOptions{true, false});
  nn::resolve_pads(win, Shape(x.begin() + 2, x.end()));
  ConvGeometry g;
  g.batch = x[0];
  g.channels = x[1];
  g.out_channels = w[0];
  g.group = n.attr_int("group", 1);
  const bool two = nsp == 2;  // 1-D: height 1
  g.height = two ? x[2] : 1;
  g.width = x.back();
  g.out_height = two ? y[2] : 1;
  g.out_width = y.back();
  g.kernel_h = two ? win.kernel[0] : 1;
  g.kernel_w = win.kernel.back();
  g.stride_h = two ? win.stride[0] : 1;
  g.stride_w = win.stride.back();
  g.dil_h = two ? win.dilation[0] : 1;
  g.dil_w = win.dilation.back();
  g.pad_h = two ? win.pad_begin[0] : 0;
  g.pad_w = win.pad_begin.back();
  g.x_channels_last = n.attr_int("x_channels_last", 0) != 0;
  g.y_channels_last = n.attr_int("y_channels_last", 0) != 0;
  return g;
}

bool qconv_supports(const KernelBuildInfo& info, std::string* why) {
  if (!constants_known(info, why)) return false;
  const size_t rank = info.input_shape(quant::kQX).size();
  if (rank != 3 && rank != 4) {
    if (why) *why = "the CUDA QConv takes 1-D and 2-D convolutions";
    return false;
  }
  return true;
}

class CudaQConv final : public Kernel {
 public:
  explicit CudaQConv(const KernelBuildInfo& info) : g_(geometry_of(info)) {
    const QLinearParams p = quant::read_qlinear_params(info, g_.out_channels);
    if (g_.positions() == 0 || g_.out_channels == 0)
      info.fail(ErrorKind::kUnsupportedOp, "an empty QConv runs on the CPU");
    const Tensor& w = *info.input_constant(quant::kQW);
    x_u8_ = p.x_type == DType::kUInt8;
    x_zero_ = p.x_zero;
    y_type_ = p.quantized_out ? p.y_type : DType::kFloat32;
    // A 1x1 convolution of stride 1 without padding on NHWC int8 x is a
    // GEMM of x's rows as they are: no im2col copy.
    pointwise_ = g_.group == 1 && g_.kernel_h == 1 && g_.kernel_w == 1 && g_.stride_h == 1 && g_.stride_w == 1 &&
                 g_.pad_h == 0 && g_.pad_w == 0 && g_.out_height == g_.height && g_.out_width == g_.width &&
                 g_.x_channels_last && !x_u8_ && x_zero_ == 0 && !p.x_per_token;
    // A layer with symmetric int8 x and NHWC int8 y (ReLU or none) has a
    // cuBLASLt form that writes y itself: scale, bias, ReLU and rounding in
    // its epilogue, after an im2col copy (none for a 1x1 whose rows fit).
    // Where cuDNN takes the layer too, the two are timed at build and the
    // faster kept; TWINFER_INT8_CONV=cudnn / =cublaslt forces one.
    const char* order_env = std::getenv("TWINFER_INT8_CONV");
    const std::string order = order_env ? order_env : "";
    const bool int8_relu_out = p.quantized_out && p.y_type == DType::kInt8 && p.y_zero == 0 &&
                               (p.act.kind == nn::ActKind::kNone || p.act.kind == nn::ActKind::kRelu);
    // The GEMM forms' K: for an NHWC x, ordered (tap, channel), so im2col
    // copies each tap's channels as one run (16 bytes a thread where they
    // come in 16s); the weights reordered to match, once.
    std::vector<int8_t> w_taps_last;
    const int8_t* w_gemm = w.data_as<int8_t>();
    if (g_.x_channels_last && g_.group == 1) {  // a 1x1's two orders are one (a strided 1x1 takes the runs too)
      g_.taps_channels_last = true;
      w_taps_last = g_.weights_taps_last(w.data_as<int8_t>());
      w_gemm = w_taps_last.data();
    }
    std::unique_ptr<Int8Layer> one_gemm;
    if (g_.group == 1 && !x_u8_ && x_zero_ == 0 && !p.x_per_token && int8_relu_out && g_.y_channels_last &&
        g_.out_channels % Int8Layer::kPad == 0 && order != "cudnn") {
      try {
        one_gemm = std::make_unique<Int8Layer>(p, w_gemm, g_.out_channels, g_.taps(), true, g_.positions(),
                                               /*fast_only=*/true, /*y_rows=*/true);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUnsupportedOp) throw;  // cuBLASLt refused it: cuDNN or the int32 GEMM below
      }
    }
    if (one_gemm && order == "cublaslt") {
      adopt_one_gemm(std::move(one_gemm), "TWINFER_INT8_CONV=cublaslt");
      return;
    }
    std::string why_not_cudnn;
    if (try_cudnn(p, w.data_as<int8_t>(), &why_not_cudnn)) {
      if (one_gemm) keep_the_faster(std::move(one_gemm));
      return;
    }
    if (one_gemm) {
      adopt_one_gemm(std::move(one_gemm), "not cuDNN: " + why_not_cudnn);
      return;
    }
    if (g_.group == 1) {
      layer_ = std::make_unique<Int8Layer>(p, w_gemm, g_.out_channels, g_.taps(), true, g_.positions(), false,
                                           /*y_rows=*/g_.y_channels_last);
      x_is_cols_ = pointwise_ && layer_->kp() == g_.channels;
      direct_ = layer_->writes_y(g_.y_channels_last);
      name_ = std::string(layer_->impl()) + (x_is_cols_ ? ", x's rows as they are" : "") + " (not cuDNN: " +
              why_not_cudnn + ")";
      return;
    }
    // Grouped: the direct kernel reads the weights as they are.
    w_ = device_copy(w.data(), DType::kInt8, w.shape());
    scale_ = device_copy(p.scales.data(), DType::kFloat32, {g_.out_channels});
    if (!p.bias.empty()) bias_ = device_copy(p.bias.data(), DType::kFloat32, {g_.out_channels});
    e_ = epilogue_for(p, scale_.data_as<float>(), p.bias.empty() ? nullptr : bias_.data_as<float>(), nullptr, 0);
  }
  size_t scratch_bytes() const override {
    if (cudnn_) return cudnn_scratch_bytes();
    return layer_ ? layer_->scratch_bytes(direct_) : 0;
  }
  const char* impl_name() const override { return layer_ || cudnn_ ? name_.c_str() : "direct int8 convolution (grouped)"; }

  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    const void* x = ctx.inputs[quant::kQX].data;
    void* y = ctx.outputs[0].data;
    if (cudnn_) {
      run_cudnn(x, y, ctx.scratch, s);
      return;
    }
    if (!layer_) {
      qconv_direct(x, x_u8_, x_zero_, w_.data_as<int8_t>(), g_, e_, y, y_type_, s);
      return;
    }
    run_layer(*layer_, x_is_cols_, direct_, x, y, ctx.scratch, s);
  }

 private:
  size_t acc_bytes() const { return static_cast<size_t>(round_up(g_.positions() * g_.out_channels * 4, 256)); }
  size_t cudnn_scratch_bytes() const { return (requantized_ ? 0 : acc_bytes()) + cudnn_->workspace_bytes(); }

  // cuDNN's form: int8 y from its requantizing graph, or its int32 sums
  // [positions, M] channels-last in scratch and the layer's epilogue.
  void run_cudnn(const void* x, void* y, void* scratch, cudaStream_t s) const {
    if (requantized_) {
      cudnn_->run(x, w_.data(), y, scratch, s, bias_.storage() ? bias_.data() : nullptr, nullptr, scale_.data());
      return;
    }
    auto* acc = static_cast<int32_t*>(scratch);
    cudnn_->run(x, w_.data(), acc, static_cast<char*>(scratch) + acc_bytes(), s);
    linear_epilogue(acc, g_.positions(), g_.out_channels, g_.out_channels, e_, y, y_type_, &g_, s);
  }

  // The GEMM form: x's rows as they are (x_is_cols, 16-byte aligned) or
  // im2col rows in scratch, then cuBLASLt writing y itself (direct) or its
  // int8 / int32 output in scratch and our scatter / epilogue after.
  void run_layer(const Int8Layer& L, bool x_is_cols, bool direct, const void* x, void* y, void* scratch_p,
                 cudaStream_t s) const {
    char* scratch = static_cast<char*>(scratch_p);
    const int8_t* cols = reinterpret_cast<int8_t*>(scratch);
    if (x_is_cols && reinterpret_cast<uintptr_t>(x) % 16 == 0)  // cuBLASLt's 16-byte rows
      cols = static_cast<const int8_t*>(x);
    else
      im2col_int8(x, L.x_u8(), g_, static_cast<int8_t>(L.x_zero()), L.kp(), reinterpret_cast<int8_t*>(scratch), s);
    char* out = scratch + L.packed_bytes();
    void* workspace = out + L.out_bytes(direct);
    // cuBLASLt's rows are the output positions: NHWC order.
    L.gemm(cols, direct ? y : out, workspace, s);
    if (direct) return;
    if (L.fast()) {
      scatter_conv_output(reinterpret_cast<const int8_t*>(out), L.np(), g_, static_cast<int8_t*>(y), s);
      return;
    }
    linear_epilogue(reinterpret_cast<const int32_t*>(out), g_.positions(), g_.out_channels, L.np(), L.epilogue(), y,
                    L.y_type(), &g_, s);
  }

  // The layer as cuBLASLt's int8-output GEMM writing NHWC y itself.
  void adopt_one_gemm(std::unique_ptr<Int8Layer> layer, const std::string& why) {
    cudnn_.reset();
    requantized_ = false;
    w_ = Tensor();
    scale_ = Tensor();
    bias_ = Tensor();
    e_ = LinearEpilogue{};  // it pointed at cuDNN's scale and bias
    layer_ = std::move(layer);
    x_is_cols_ = pointwise_ && layer_->kp() == g_.channels;
    direct_ = true;
    name_ = std::string(layer_->impl()) +
            (x_is_cols_ ? ", x's rows as they are (a 1x1 convolution: one GEMM; " : ", im2col + one GEMM (") + why +
            ")";
  }

  // A layer both cuBLASLt (one int8-output call, after im2col unless a 1x1)
  // and cuDNN take: each run on zeroed operands (fastest_of_two_ms) and the
  // faster kept; the kernel name gives both times. Without memory for the
  // trial, cuDNN's. On an H200 (2026-11-30) neither form had been timed alone.
  void keep_the_faster(std::unique_ptr<Int8Layer> one_gemm) {
    const bool cols = pointwise_ && one_gemm->kp() == g_.channels;
    TrialKey key("int8 convolution");
    key << g_.batch << g_.channels << g_.height << g_.width << g_.out_channels << g_.out_height << g_.out_width
        << g_.kernel_h << g_.kernel_w << g_.stride_h << g_.stride_w << g_.pad_h << g_.pad_w << g_.dil_h << g_.dil_w
        << g_.group << g_.x_channels_last << g_.y_channels_last << cols << static_cast<int64_t>(y_type_)
        << requantized_ << x_zero_ << one_gemm->fast() << one_gemm->writes_y(true);
    const FormTiming t = time_two_forms("one GEMM", "cuDNN", key, [&] {
      const TrialBuffer x(static_cast<size_t>(g_.batch * g_.channels * g_.height * g_.width)),
          y(static_cast<size_t>(g_.positions() * g_.out_channels)),
          scratch(std::max(one_gemm->scratch_bytes(true), cudnn_scratch_bytes()));
      // cuBLASLt's trials run apart from another thread's capture beginning or
      // ending, as choose_working_algo's (cuDNN's execute takes that lock itself).
      // cuDNN's handle stays bound to the trial's stream, destroyed next:
      // harmless, as every cuDNN enqueue (FeGraph::execute, conv.cc) binds
      // its own stream first, under the handle's lock.
      return fastest_of_two_ms(
          [&](cudaStream_t s) {
            std::lock_guard<std::mutex> apart_from_captures(cudnn_handle_mutex());
            run_layer(*one_gemm, cols, true, x.get(), y.get(), scratch.get(), s);
          },
          [&](cudaStream_t s) { run_cudnn(x.get(), y.get(), scratch.get(), s); });
    });
    if (t.first_wins) adopt_one_gemm(std::move(one_gemm), t.timed);
    else name_ += "; " + t.timed;
  }

  // cuDNN's int8 convolution (graph API) where it applies: x int8 with zero
  // point 0, channels-last, one group, channels in multiples of 4 (cuDNN's
  // int8 rule); weights repacked once to [M, KH, KW, C]. False: the
  // im2col + cuBLASLt path (or the grouped kernel) as before.
  bool try_cudnn(const QLinearParams& p, const int8_t* w, std::string* why) {
    const char* mode = std::getenv("TWINFER_CUDNN_CONV");
    if (mode && std::string(mode) == "legacy") return *why = "TWINFER_CUDNN_CONV=legacy", false;
    if (g_.group != 1 || x_u8_ || x_zero_ != 0 || p.x_per_token || !g_.x_channels_last || g_.channels % 4 != 0 ||
        g_.out_channels % 4 != 0)
      return *why = "it takes int8 NHWC x with zero point 0, one group, channels in 4s", false;
    ConvGraphSpec spec;
    spec.x = {g_.batch, g_.channels, g_.height, g_.width};
    spec.w = {g_.out_channels, g_.channels, g_.kernel_h, g_.kernel_w};
    spec.y = {g_.batch, g_.out_channels, g_.out_height, g_.out_width};
    // The geometry keeps the leading pads; the trailing ones are what gives
    // its output size (the leading ones again where they do).
    auto pad_end = [](int64_t in, int64_t out, int64_t k, int64_t st, int64_t dil, int64_t pb) -> int64_t {
      auto out_of = [&](int64_t pe) { return (in + pb + pe - dil * (k - 1) - 1) / st + 1; };
      if (out_of(pb) == out) return pb;
      const int64_t pe = std::max<int64_t>((out - 1) * st + dil * (k - 1) + 1 - in - pb, 0);
      return out_of(pe) == out ? pe : -1;
    };
    const int64_t pe_h = pad_end(g_.height, g_.out_height, g_.kernel_h, g_.stride_h, g_.dil_h, g_.pad_h);
    const int64_t pe_w = pad_end(g_.width, g_.out_width, g_.kernel_w, g_.stride_w, g_.dil_w, g_.pad_w);
    if (pe_h < 0 || pe_w < 0) return *why = "no trailing padding gives this output size", false;
    spec.pad_begin = {g_.pad_h, g_.pad_w};
    spec.pad_end = {pe_h, pe_w};
    spec.stride = {g_.stride_h, g_.stride_w};
    spec.dilation = {g_.dil_h, g_.dil_w};
    spec.dtype = DType::kInt8;
    spec.max_workspace = size_t(256) << 20;
    const int64_t M = g_.out_channels, C = g_.channels, KH = g_.kernel_h, KW = g_.kernel_w;
    // The requantization in cuDNN's graph where it takes it: int8 y written
    // once, no int32 sums through memory (at batch 256 those are 4 bytes an
    // output and our epilogue's pass over them). y NHWC int8 with zero point
    // 0, ReLU or none; TWINFER_INT8_CUDNN_FUSED=0 keeps the int32 form.
    const char* fused_mode = std::getenv("TWINFER_INT8_CUDNN_FUSED");
    if (p.quantized_out && p.y_type == DType::kInt8 && p.y_zero == 0 && g_.y_channels_last &&
        (p.act.kind == nn::ActKind::kNone || p.act.kind == nn::ActKind::kRelu) &&
        !(fused_mode && std::string(fused_mode) == "0")) {
      ConvGraphSpec q = spec;
      q.int8_requantize = true;
      q.bias = !p.bias.empty();
      q.act.kind = p.act.kind;
      std::string why_not_fused;
      cudnn_ = make_cudnn_conv_graph(q, &why_not_fused);
      if (cudnn_) {
        requantized_ = true;
        std::vector<float> scale(static_cast<size_t>(M)), bias;
        for (int64_t c = 0; c < M; ++c) scale[c] = p.scales[c] / p.y_scale;
        scale_ = device_copy(scale.data(), DType::kFloat32, {M});
        if (!p.bias.empty()) {
          for (int64_t c = 0; c < M; ++c) bias.push_back(p.bias[c] / p.y_scale);
          bias_ = device_copy(bias.data(), DType::kFloat32, {M});
        }
        name_ = "cudnn int8 conv, requantized in its graph (" + cudnn_->plan_name() + ")";
      } else {
        fused_why_ = why_not_fused;
      }
    }
    if (!cudnn_) {
      cudnn_ = make_cudnn_conv_graph(spec, why);
      if (!cudnn_) return false;
      scale_ = device_copy(p.scales.data(), DType::kFloat32, {M});
      if (!p.bias.empty()) bias_ = device_copy(p.bias.data(), DType::kFloat32, {M});
      e_ = epilogue_for(p, scale_.data_as<float>(), p.bias.empty() ? nullptr : bias_.data_as<float>(), nullptr, 0);
      name_ = "cudnn int8 conv (" + cudnn_->plan_name() + ") + epilogue" +
              (fused_why_.empty() ? "" : " (requantizing graph refused: " + fused_why_ + ")");
    }
    std::vector<int8_t> krsc(static_cast<size_t>(M * KH * KW * C));
    nn::copy_to_channels_last(w, krsc.data(), M, C, KH * KW, 1);
    w_ = device_copy(krsc.data(), DType::kInt8, {M, KH, KW, C});
    return true;
  }

  ConvGeometry g_;
  bool pointwise_ = false;  // 1x1, stride 1, no padding, NHWC int8 x with zero point 0
  bool x_is_cols_ = false;  // a 1x1 convolution whose GEMM reads x itself
  bool direct_ = false;     // the GEMM's int8 output is y (NHWC)
  bool requantized_ = false;  // cuDNN's graph writes int8 y itself (ConvGraphSpec::int8_requantize)
  std::string fused_why_;     // why cuDNN refused that graph, when it did
  bool x_u8_ = false;
  int32_t x_zero_ = 0;
  std::shared_ptr<const ConvGraphPlan> cudnn_;  // cuDNN's int8 convolution
  std::string name_;
  std::unique_ptr<Int8Layer> layer_;  // group 1
  Tensor w_, scale_, bias_;           // grouped, or cuDNN's (w as [M, KH, KW, C])
  LinearEpilogue e_;
  DType y_type_ = DType::kFloat32;
};

}  // namespace

TWINFER_REGISTER_KERNEL(quant::kQMatMulOp, Backend::kCUDA, 10, qmatmul_supports, make_kernel<CudaQMatMul>,
                        kTwinferDomain);
TWINFER_REGISTER_KERNEL(quant::kQConvOp, Backend::kCUDA, 10, qconv_supports, make_kernel<CudaQConv>, kTwinferDomain);

}  // namespace twinfer::cuda
