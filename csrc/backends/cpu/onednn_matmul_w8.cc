// com.twinfer::MatMulW8, weight-only int8 (twinfer.load(..., weights="int8")):
//
//   y[.., N] = act(x[.., K] x dequant(W) + bias)      x, y float32
//   inputs: x, w int8 [N, K] (one row per output channel, constant),
//           w_scale float32 [N], bias float32 [N] (optional)
//   attributes: activation / activation_params (ops/nn/activation.h)
//
// The weights stay int8 in the engine (a quarter of the float32 bytes).
// oneDNN 3.2 has no weight-decompression matmul (int8 weights with float
// activations), so the kernel dequantizes the weights tile by tile: each
// thread takes a block of output channels, expands it (a slice of K at a
// time) to float32 in a per-thread buffer sized to stay in its L2 cache,
// runs a single-threaded oneDNN sgemm of all rows of x against it, and adds the bias while the
// tile of y is hot. The activation then runs as one oneDNN eltwise over y.
// Every run reads the int8 weights once and writes/reads each float tile
// once from cache, so memory traffic for the weights is about a quarter of
// float32's; the arithmetic is float32's (no int8 rounding of x).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "core/parallel.h"
#include "graph/domains.h"

namespace twinfer::quant {
namespace {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// Tile geometry: 128 output channels (fewer re-reads of x than narrow
// tiles; a multiple of the 16-float vector) by a slice of K such that the
// float tile fits in ~512 KiB of L2; K beyond that is accumulated in slices
// (sgemm with beta = 1). A first rule sized the whole K x cols tile to
// 256 KiB, which left BERT's 3072 x 768 FFN output with 16-column tiles and
// ran 4.7x slower than float32 (benchmarks/quantization.py, 2 threads).
struct Tile {
  int64_t cols, k;
};
Tile tile_geometry(int64_t k, int64_t n) {
  static const int64_t budget = [] {
    const char* e = std::getenv("TWINFER_W8_TILE_BYTES");  // for re-measuring the rule on other CPUs
    return e ? std::max<int64_t>(16384, std::atoll(e)) : int64_t(512) << 10;
  }();
  Tile t;
  t.cols = std::max<int64_t>(1, std::min<int64_t>(128, n));
  t.k = std::max<int64_t>(64, budget / (4 * t.cols) / 64 * 64);
  t.k = std::max<int64_t>(1, std::min(t.k, k));
  return t;
}

float* thread_tile(size_t floats) {
  thread_local std::vector<float> buf;  // grows on a thread's first run only
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

class MatMulW8Kernel final : public Kernel {
 public:
  explicit MatMulW8Kernel(const KernelBuildInfo& info)
      : node_(info.node().name), op_(info.node().op_type), act_(nn::parse_activation(info.node())) {
    const Shape x = info.input_shape(0), w = info.input_shape(1);
    n_ = w[0];
    k_ = w[1];
    m_ = 1;
    for (size_t d = 0; d + 1 < x.size(); ++d) m_ *= x[d];
    const Tensor* wc = info.input_constant(1);
    const Tensor* sc = info.input_constant(2);
    if (!wc || !sc || sc->dtype() != DType::kFloat32 || sc->numel() != n_)
      info.fail(ErrorKind::kUnsupportedOp, "MatMulW8 needs constant int8 w [N, K] and float32 w_scale [N]");
    w_ = *wc;  // the engine's constant: read in place, never copied
    scale_ = *sc;
    if (info.has_input(3)) {
      const Tensor* bc = info.input_constant(3);
      if (!bc || bc->dtype() != DType::kFloat32 || bc->numel() != n_)
        info.fail(ErrorKind::kUnsupportedOp, "MatMulW8 bias must be a float32 constant of N values");
      bias_ = *bc;
    }
    const Tile t = tile_geometry(k_, n_);
    cols_ = t.cols;
    kc_ = t.k;
    if (!act_.none() && m_ * n_ > 0)
      onednn::guarded(node_, op_, [&] { variants_.get(onednn::current_threads(), [&] { return make_act(); }); });
  }

  const char* impl_name() const override { return "int8 weights, tiled dequant + onednn sgemm"; }

  void run(KernelContext& ctx) const override {
    if (m_ == 0 || n_ == 0) return;
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const int8_t* q = w_.data_as<int8_t>();
    const float* s = scale_.data_as<float>();
    const float* b = bias_.defined() ? bias_.data_as<float>() : nullptr;
    const int64_t tiles = (n_ + cols_ - 1) / cols_;
    // Work items are (row block, tile); rows are split only when there are
    // fewer tiles than threads.
    const int threads = std::max(1, ctx.num_threads);
    const int64_t row_blocks = std::min<int64_t>(m_, std::max<int64_t>(1, (threads + tiles - 1) / tiles));
    const int64_t rows_per = (m_ + row_blocks - 1) / row_blocks;
    parallel_for(tiles * row_blocks, threads, 1, [&](int64_t lo, int64_t hi) {
      float* buf = thread_tile(static_cast<size_t>(cols_ * kc_));
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t t = item % tiles, rb = item / tiles;
        const int64_t n0 = t * cols_, nc = std::min(cols_, n_ - n0);
        const int64_t m0 = rb * rows_per, mc = std::min(rows_per, m_ - m0);
        if (mc <= 0) continue;
        float* yt = y + m0 * n_ + n0;
        if (k_ == 0)
          for (int64_t i = 0; i < mc; ++i) std::fill(yt + i * n_, yt + i * n_ + nc, 0.f);
        for (int64_t k0 = 0; k0 < k_; k0 += kc_) {
          const int64_t kc = std::min(kc_, k_ - k0);
          for (int64_t r = 0; r < nc; ++r) dequantize_row(q + (n0 + r) * k_ + k0, s[n0 + r], buf + r * kc, kc);
          // Row-major: y_tile[mc, nc] (+)= x[mc, k0:k0+kc] x buf[nc, kc]^T.
          dnnl_sgemm('N', 'T', mc, nc, kc, 1.f, x + m0 * k_ + k0, k_, buf, kc, k0 ? 1.f : 0.f, yt, n_);
        }
        if (b)
          for (int64_t i = 0; i < mc; ++i)
            for (int64_t j = 0; j < nc; ++j) yt[i * n_ + j] += b[n0 + j];
      }
    });
    if (!act_.none()) {
      onednn::guarded(node_, op_, [&] {
        onednn::ThreadScope scope(threads);
        const ActVariant& v = variants_.get(scope.threads(), [&] { return make_act(); });
        const dnnl::engine& eng = onednn::engine();
        dnnl::memory ym(v.md, eng, y);
        dnnl::stream st(eng);
        v.prim.execute(st, {{DNNL_ARG_SRC, ym}, {DNNL_ARG_DST, ym}});
        st.wait();
      });
    }
  }

 private:
  struct ActVariant {
    dnnl::eltwise_forward prim;
    dnnl::memory::desc md;
  };
  ActVariant make_act() const {
    ActVariant v;
    v.md = dnnl::memory::desc({m_ * n_}, dt::f32, tag::a);
    const onednn::EltwiseParams e = onednn::eltwise_params(act_);
    dnnl::eltwise_forward::primitive_desc pd(onednn::engine(), dnnl::prop_kind::forward_inference, e.alg, v.md,
                                             v.md, e.alpha, e.beta, onednn::base_attr());
    v.prim = dnnl::eltwise_forward(pd);
    return v;
  }

  // Vectorised by the compiler: int8 -> float, times the channel's scale.
  static void dequantize_row(const int8_t* q, float scale, float* out, int64_t k) {
    for (int64_t i = 0; i < k; ++i) out[i] = static_cast<float>(q[i]) * scale;
  }

  std::string node_, op_;
  nn::Activation act_;
  int64_t m_ = 0, k_ = 0, n_ = 0, cols_ = 1, kc_ = 1;
  Tensor w_, scale_, bias_;
  onednn::ByThreads<ActVariant> variants_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MatMulW8", Backend::kCPU, 10, nullptr, make_kernel<MatMulW8Kernel>, kTwinferDomain);

}  // namespace twinfer::quant
