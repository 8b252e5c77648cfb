// ConvTranspose whose windows tile the output exactly (stride == kernel, no
// padding, dilation 1, one group, 2 spatial dims, float32, constant
// weights: the 2x2/2 upsampling of UNet and FPN decoders). Each output pixel
// then takes exactly one tap, so the layer is a 1x1 convolution to
// M * kh * kw channels (one GEMM, oneDNN) followed by a shuffle of those
// channels into the kh x kw blocks of the output, adding the bias on the way
// (DepthToSpace's CRD order):
//
//   z[n, (m*kh + i)*kw + j, h, w] = sum_c x[n, c, h, w] * W[c, m, i, j]
//   y[n, m, h*kh + i, w*kw + j]   = z[n, (m*kh + i)*kw + j, h, w] + B[m]
//
// oneDNN's deconvolution on plain NCHW (onednn_deconv.cc) runs gemm + col2im
// here, 2.2x onnxruntime's time on [1, 64, 64, 64] (docs/performance.md).
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"
#include "ops/vision/conv_transpose.h"

namespace twinfer::cpu::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Whether the layer's windows tile its output: why not, else empty.
std::string tiles_exactly(const KernelBuildInfo& info) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) return "float32 only";
  if (info.input_shape(0).size() != 4) return "2 spatial dims only";
  if (!info.input_constant(1) || (info.has_input(2) && !info.input_constant(2))) return "constant weights only";
  const vision::DeconvSpec s = vision::deconv_spec(info);
  if (s.group != 1) return "one group only";
  for (size_t d = 0; d < 2; ++d)
    if (s.stride[d] != s.kernel[d] || s.dilation[d] != 1 || s.pad_begin[d] != 0 || s.pad_end[d] != 0)
      return "windows that overlap or leave gaps";
  if (shape_numel(s.x) == 0 || shape_numel(s.y) == 0) return "empty tensors";
  return "";
}

bool supports(const KernelBuildInfo& info, std::string* why) {
  const std::string no = tiles_exactly(info);
  if (no.empty()) return true;
  *why = "1x1 convolution + shuffle: " + no;
  return false;
}

// One output row y[n, m, h*kh + i, :] from the kw rows z[n, (m*kh + i)*kw + j, h, :]
// (each w_in long, `zs` apart), interleaved, plus the bias. KW known at
// compile time for the common sizes, so the interleave vectorises.
template <int KW>
void interleave_row(const float* z, int64_t zs, int64_t w_in, float bias, float* y, int64_t kw_runtime) {
  const int64_t kw = KW > 0 ? KW : kw_runtime;
  if constexpr (KW == 2) {
    const float* z0 = z;
    const float* z1 = z + zs;
    for (int64_t w = 0; w < w_in; ++w) {
      y[2 * w] = z0[w] + bias;
      y[2 * w + 1] = z1[w] + bias;
    }
  } else {
    for (int64_t j = 0; j < kw; ++j)
      for (int64_t w = 0; w < w_in; ++w) y[w * kw + j] = z[j * zs + w] + bias;
  }
}

class OnednnDeconvShuffle final : public Kernel {
 public:
  explicit OnednnDeconvShuffle(const KernelBuildInfo& info)
      : s_(vision::deconv_spec(info)), node_(info.node().name), op_(info.node().op_type) {
    const int64_t N = s_.x[0], C = s_.x[1], M = s_.y[1];
    kh_ = s_.kernel[0], kw_ = s_.kernel[1], h_ = s_.x[2], w_ = s_.x[3];
    z_channels_ = M * kh_ * kw_;
    x_md_ = plain_desc(s_.x);
    z_md_ = plain_desc({N, z_channels_, h_, w_});
    // W [C, M, kh, kw] -> W' [M*kh*kw, C, 1, 1]: oihw, o = (m*kh + i)*kw + j.
    w_md_ = dnnl::memory::desc({z_channels_, C, 1, 1}, dt::f32, tag::oihw);
    const float* w = info.input_constant(1)->data_as<float>();
    w2_.resize(static_cast<size_t>(z_channels_ * C));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t o = 0; o < z_channels_; ++o) w2_[static_cast<size_t>(o * C + c)] = w[c * z_channels_ + o];
    bias_.assign(static_cast<size_t>(M), 0.f);
    if (s_.has_bias) {
      const float* b = info.input_constant(2)->data_as<float>();
      std::copy(b, b + M, bias_.begin());
    }
    z_bytes_ = align_up(static_cast<size_t>(N * z_channels_ * h_ * w_) * sizeof(float));
    guarded(node_, op_, [&] {
      const Variant& v = variants_.get(current_threads(), [&] { return make_variant(); });
      declared_scratch_ = z_bytes_ + v.pad_bytes;
      impl_ = "onednn 1x1 conv " + v.impl + " + shuffle (windows tile the output)";
    });
    w2_.clear();  // packed now
    w2_.shrink_to_fit();
  }

  size_t scratch_bytes() const override { return declared_scratch_; }
  const char* impl_name() const override { return impl_.c_str(); }

  void run(KernelContext& ctx) const override {
    guarded(node_, op_, [&] { execute(ctx); });
  }

 private:
  using Variant = PrimitiveVariant<dnnl::convolution_forward>;

  Variant make_variant() const {
    Variant v;
    const dnnl::memory::desc w_any(w_md_.get_dims(), dt::f32, tag::any);
    dnnl::convolution_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference,
                                                 dnnl::algorithm::convolution_direct, x_md_, w_any,
                                                 dnnl::memory::desc(), z_md_, {1, 1}, {0, 0}, {0, 0}, base_attr());
    v.adopt(pd);
    v.weights = packed_.empty() ? packed_.init(w_md_, w2_.data(), pd.weights_desc()) : packed_.get(pd.weights_desc());
    return v;
  }

  void execute(KernelContext& ctx) const {
    ThreadScope threads(ctx.num_threads);
    const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
    char* scratch = run_scratch(ctx, declared_scratch_, z_bytes_ + v.pad_bytes);
    float* z = reinterpret_cast<float*>(scratch);
    const dnnl::engine& eng = engine();
    dnnl::stream s(eng);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(x_md_, eng, ctx.inputs[0].data)},
                                               {DNNL_ARG_DST, dnnl::memory(z_md_, eng, z)},
                                               {DNNL_ARG_WEIGHTS, v.weights}};
    if (v.pad_bytes) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(v.pad_md, eng, scratch + z_bytes_);
    v.prim.execute(s, args);
    s.wait();
    shuffle(z, ctx.outputs[0].as<float>(), ctx.num_threads);
  }

  // y's rows (n, m, h, i), each from kw rows of z.
  void shuffle(const float* z, float* y, int threads) const {
    const int64_t M = s_.y[1], rows = s_.x[0] * M * h_ * kh_, plane = h_ * w_, row_out = w_ * kw_;
    parallel_for(rows, threads, std::max<int64_t>(1, tensor::kCopyGrain / row_out), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        // r = ((n*M + m)*h + hh)*kh + i; y's row r is y[n, m, hh*kh + i, :].
        const int64_t i = r % kh_, hh = (r / kh_) % h_, nm = r / (kh_ * h_), m = nm % M;
        const float* zr = z + ((nm * kh_ + i) * kw_) * plane + hh * w_;
        float* yr = y + r * row_out;
        const float bias = bias_[static_cast<size_t>(m)];
        if (kw_ == 2)
          interleave_row<2>(zr, plane, w_, bias, yr, 2);
        else
          interleave_row<0>(zr, plane, w_, bias, yr, kw_);
      }
    });
  }

  vision::DeconvSpec s_;
  std::string node_, op_;
  int64_t kh_ = 1, kw_ = 1, h_ = 1, w_ = 1, z_channels_ = 1;
  std::string impl_ = "onednn 1x1 conv + shuffle";
  dnnl::memory::desc x_md_, z_md_, w_md_;
  std::vector<float> w2_, bias_;
  size_t z_bytes_ = 0, declared_scratch_ = 0;
  mutable PackedWeights packed_;
  ByThreads<Variant> variants_;
};

}  // namespace

// Above onednn_deconv.cc's kernel (10), which takes every other geometry.
TWINFER_REGISTER_KERNEL("ConvTranspose", Backend::kCPU, 11, supports, make_kernel<OnednnDeconvShuffle>);

}  // namespace twinfer::cpu::onednn
