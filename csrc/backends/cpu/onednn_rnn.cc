// RNN, GRU, LSTM on float32 with constant W and R (what exported models
// have): the cells of rnn.cc with the products on oneDNN. The general kernel
// ("cpu loop", rnn.cc) computes the input projections row by row, the gates
// element by element through scalar activations, and threads a step only
// over the batch; a survey measured it 2.2x (LSTM) and 1.8x (GRU) slower
// than onnxruntime at seq 100, input 256, hidden 512, batch 1, where a
// second thread idled.
//
// Per direction:
//   - the input projections of every step: ONE matmul [S*N, I] x W^T, W
//     packed at kernel build, in X's own row order (layout 0 or 1);
//   - each step's recurrent product: one matmul [N, H] x R^T, R packed at
//     build (a loop over R^T where a step is small: StepProduct), threaded
//     (over the gate outputs too, so at batch 1) only where a step is large
//     enough to pay for a barrier per step (GRU without linear_before_reset:
//     the h gate's product is of r . h_prev, a second matmul after the z and
//     r gates);
//   - the gates as loops over a row's H values (Sigmoid and Tanh vectorised:
//     ops/elementwise/logistic_fast.h; other activations per element through
//     rnn_math.h's Act).
// Directions, layouts, sequence_lens, initial states, peepholes, clip,
// input_forget, linear_before_reset and activations as in rnn.cc, whose node
// checks (rnn_spec.h) this kernel shares. Runtime W / R, float16 / float64
// and single evaluations (constant folding) stay with rnn.cc.
//
// An LSTM that was com.microsoft::DynamicQuantizeLSTM runs its input
// projections on W's int8 values, X quantized once (lstm_int8_projection.h),
// and its recurrent products on R's int8 values, h quantized each step
// (lstm_int8_recurrence.h), as onnxruntime computes that op.
//
// Rounding: oneDNN's products may use FMA and another summation order, so
// results differ from the cpu loop (and the CUDA kernel) in the last bits;
// tests/test_ops_rnn.py compares them with onnxruntime and torch.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/lstm_int8_projection.h"
#include "backends/cpu/lstm_int8_recurrence.h"
#include "backends/cpu/onednn_matmul.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/elementwise/logistic_fast.h"
#include "ops/rnn/rnn_math.h"
#include "ops/rnn/rnn_spec.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

using cpu::onednn::MatmulCore;
using cpu::onednn::MatmulDesc;
using rnn::Act;
using rnn::ActKind;
using rnn::Cell;
using rnn::gates_of;

// Row loops the compiler vectorises (AVX-512 / AVX2 clones).
TWINFER_SIMD_CLONES void add2(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = a[k] + b[k];
}
// y [cols] = h [K] x wt [K, ld], 64 or 16 columns at a time: their sums
// stay in registers over all of K and y is written once (an axpy per k
// loaded and stored y K times). wt's rows are padded with zeros to ld, a
// multiple of 16, so the last block reads whole vectors; it writes only
// the columns y has. (w^T in panels of 16 columns, each read front to back,
// measured slower at hidden 64-256.)
template <int W>
inline __attribute__((always_inline)) void columns_times(const float* __restrict h, const float* __restrict wt,
                                                         float* __restrict y, int64_t K, int64_t ld, int64_t c0,
                                                         int64_t keep) {
  float acc[W] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float hk = h[k];
    const float* w = wt + k * ld + c0;
    for (int j = 0; j < W; ++j) acc[j] += hk * w[j];
  }
  for (int64_t j = 0; j < keep; ++j) y[c0 + j] = acc[j];
}
TWINFER_SIMD_CLONES void row_times_matrix(const float* __restrict h, const float* __restrict wt, float* __restrict y,
                                          int64_t K, int64_t cols, int64_t ld) {
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) columns_times<64>(h, wt, y, K, ld, c, 64);
  for (; c < cols; c += 16) columns_times<16>(h, wt, y, K, ld, c, std::min<int64_t>(16, cols - c));
}
TWINFER_SIMD_CLONES void add_in(const float* __restrict a, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += a[k];
}
// y += p * c (peepholes).
TWINFER_SIMD_CLONES void add_product(const float* __restrict p, const float* __restrict c, float* __restrict y,
                                     int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += p[k] * c[k];
}
TWINFER_SIMD_CLONES void mul2(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = a[k] * b[k];
}
// c' = f . c + i . g
TWINFER_SIMD_CLONES void lstm_cell(const float* __restrict f, const float* __restrict c, const float* __restrict i,
                                   const float* __restrict g, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = f[k] * c[k] + i[k] * g[k];
}
// h' = (1 - z) . hh + z . h
TWINFER_SIMD_CLONES void gru_mix(const float* __restrict z, const float* __restrict hh, const float* __restrict h,
                                 float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = (1.f - z[k]) * hh[k] + z[k] * h[k];
}
// GRU's h gate with linear_before_reset: x + r . (rh + rb)
TWINFER_SIMD_CLONES void gru_lbr(const float* __restrict x, const float* __restrict r, const float* __restrict rh,
                                 const float* __restrict rb, float* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = x[k] + r[k] * (rh[k] + rb[k]);
}

void clip_row(bool has_clip, float clip, float* v, int64_t n) {
  if (has_clip)
    for (int64_t k = 0; k < n; ++k) v[k] = rnn::clip_value(true, clip, v[k]);
}

// y = act(x); x and y distinct.
void activate(const Act& a, const float* x, float* y, int64_t n) {
  if (a.kind == ActKind::kSigmoid) return ew::sigmoid_loop(x, y, n);
  if (a.kind == ActKind::kTanh) return ew::tanh_loop(x, y, n);
  for (int64_t k = 0; k < n; ++k) y[k] = a(x[k]);
}

// One row of a GRU step (gates z, r, h): h' = (1 - z) . hh + z . h_prev with
// hh = act1(x_h + (r . h_prev) R_h^T + Rb_h), or with linear_before_reset
// act1(x_h + r . (h_prev R_h^T + Rb_h)). x: the row's projections [3H]; rh:
// h_prev R^T ([3H], or only z and r when zr is given); zr: z and r already
// activated [2H] (without linear_before_reset) or nullptr; rhh: (r . h_prev)
// R_h^T [H]; g: 5H floats of workspace.
void gru_row(const Act* acts, const float* x, const float* rh, const float* zr, const float* rhh, const float* rbh,
             const float* hp, float* g, float* ho, int64_t H, bool has_clip, float clip) {
  const bool reset_first = zr != nullptr;  // without linear_before_reset
  float* pre = g;
  if (!zr) {
    add2(x, rh, pre, 2 * H);
    clip_row(has_clip, clip, pre, 2 * H);
    activate(acts[0], pre, g + 3 * H, 2 * H);
    zr = g + 3 * H;
  }
  float* ph = pre + 2 * H;
  if (reset_first) {
    add2(x + 2 * H, rhh, ph, H);
    add_in(rbh, ph, H);
  } else {
    gru_lbr(x + 2 * H, zr + H, rh + 2 * H, rbh, ph, H);
  }
  clip_row(has_clip, clip, ph, H);
  float* hh = pre;  // z and r's pre-activations are spent
  activate(acts[1], ph, hh, H);
  gru_mix(zr, hh, hp, ho, H);
}

// One row of an LSTM step (gates i, o, f, c; peepholes pc = [i, o, f] or
// nullptr), as rnn.cc: c' = f . c + i . g, h' = o . act2(c'), o's peephole on
// c'. g: 9H floats of workspace.
void lstm_row(const Act* acts, bool input_forget, const float* x, const float* rh, const float* cp, const float* pc,
              float* g, float* ho, float* co, int64_t H, bool has_clip, float clip) {
  float* pre = g;          // [i, o, f, c] pre-activations
  float* act = g + 4 * H;  // [i, o, f, c] activated
  float* tc = g + 8 * H;   // act2(c')
  add2(x, rh, pre, 4 * H);
  if (pc) {
    add_product(pc, cp, pre, H);              // i
    add_product(pc + 2 * H, cp, pre + 2 * H, H);  // f
  }
  clip_row(has_clip, clip, pre, H);
  clip_row(has_clip, clip, pre + 2 * H, 2 * H);
  activate(acts[0], pre, act, H);
  if (input_forget) {
    for (int64_t k = 0; k < H; ++k) act[2 * H + k] = 1.f - act[k];
  } else {
    activate(acts[0], pre + 2 * H, act + 2 * H, H);
  }
  activate(acts[1], pre + 3 * H, act + 3 * H, H);
  lstm_cell(act + 2 * H, cp, act, act + 3 * H, co, H);
  if (pc) add_product(pc + H, co, pre + H, H);  // o
  clip_row(has_clip, clip, pre + H, H);
  activate(acts[0], pre + H, act + H, H);
  activate(acts[2], co, tc, H);
  mul2(act + H, tc, ho, H);
}

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_inputs(info, {1, 2, 3, 5, 6, 7}, why)) return false;
  if (info.input_dtype(0) != DType::kFloat32) {
    *why = "oneDNN path: float32 only";
    return false;
  }
  if (info.single_run()) {
    *why = "oneDNN path: packs the weights, which does not pay for one evaluation";
    return false;
  }
  if (shape_numel(info.input_shape(0)) == 0) {
    *why = "oneDNN path: empty X";
    return false;
  }
  if (!info.input_constant(1) || !info.input_constant(2)) {
    *why = "oneDNN path: W and R must be constants";
    return false;
  }
  return true;
}

// A step's recurrent product y [N, cols] = h [N, K] x w^T, w [cols, K]. At
// batch 1 up to 2^17 multiply-adds a step, and at any batch up to 2^15, it
// is a loop over w^T (row_times_matrix), kept transposed at build; above,
// oneDNN's packed matmul. A call into oneDNN costs more than a small product:
// PLCMOS's GRUs (hidden 32, a 96 x 32 R) took 4x onnxruntime's time, and at
// batch 1 the loop measured faster up to a GRU of hidden 192 (110K) and level
// with oneDNN for an LSTM of hidden 128 (65K); an LSTM of 192 (147K) and any
// product at batch 4 and hidden 128 were faster on oneDNN (seq 100, one
// thread, the Intel AMX development VM: docs/performance.md).
class StepProduct {
 public:
  static bool as_loop(int64_t n, int64_t k, int64_t cols) {
    return n * k * cols <= (n == 1 ? int64_t(1) << 17 : int64_t(1) << 15);
  }

  StepProduct(std::unique_ptr<MatmulCore> core) : core_(std::move(core)) {}
  StepProduct(int64_t n, int64_t k, int64_t cols, const float* w)
      : n_(n), k_(k), cols_(cols), ld_((cols + 15) / 16 * 16), wt_(static_cast<size_t>(k * ld_), 0.f) {
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < k; ++i) wt_[i * ld_ + j] = w[j * k + i];
  }
  bool is_loop() const { return !core_; }
  void run(const KernelContext& ctx, const float* a, float* y) const {
    if (core_) return core_->run(ctx, a, nullptr, nullptr, nullptr, y);
    for (int64_t b = 0; b < n_; ++b) row_times_matrix(a + b * k_, wt_.data(), y + b * cols_, k_, cols_, ld_);
  }

 private:
  std::unique_ptr<MatmulCore> core_;
  int64_t n_ = 0, k_ = 0, cols_ = 0, ld_ = 0;
  std::vector<float> wt_;  // w^T [K, ld_], zeros past cols_
};

class RecurrentOnednnKernel final : public Kernel {
 public:
  explicit RecurrentOnednnKernel(const KernelBuildInfo& info) : s_(info) {
    const int64_t H = s_.H, GH = gates_of(s_.cell) * H;
    two_phase_ = s_.cell == Cell::kGRU && !s_.linear_before_reset;
    rcols_ = two_phase_ ? 2 * H : GH;
    const float* W = info.input_constant(1)->data_as<float>();
    const float* R = info.input_constant(2)->data_as<float>();
    const std::string& name = info.node().name;
    const std::string& op = info.node().op_type;
    // y [M, cols] = a [M, K] x w^T, w [cols, K] row-major (a slice of W or R).
    auto product = [&](int64_t M, int64_t K, int64_t cols, const float* w) {
      MatmulDesc d;
      d.a = {M, K};
      d.b = {K, cols};
      d.b_strides = {1, K};
      d.y = {M, cols};
      d.b_const = w;
      auto core = std::make_unique<MatmulCore>(std::move(d), name, op);
      scratch_ = std::max(scratch_, core->scratch_bytes());
      return core;
    };
    auto step_product = [&](int64_t K, int64_t cols, const float* w) {
      return StepProduct::as_loop(s_.N, K, cols) ? std::make_unique<StepProduct>(s_.N, K, cols, w)
                                                 : std::make_unique<StepProduct>(product(s_.N, K, cols, w));
    };
    if (s_.cell == Cell::kLSTM) proj_int8_ = LstmInt8Projection::of(info, s_.dirs, s_.S * s_.N, s_.I, GH, W);
    if (proj_int8_) {
      scratch_ = std::max(scratch_, proj_int8_->scratch_bytes());
      rec_work_ = proj_int8_->work_bytes();
    }
    for (int d = 0; d < s_.dirs; ++d) {
      const float* Rd = R + d * GH * H;
      proj_.push_back(proj_int8_ ? nullptr : product(s_.S * s_.N, s_.I, GH, W + d * GH * s_.I));
      rec_int8_.push_back(s_.cell == Cell::kLSTM ? LstmInt8Recurrence::of(info, d, s_.N, H, GH, Rd) : nullptr);
      if (rec_int8_.back()) {
        scratch_ = std::max(scratch_, rec_int8_.back()->scratch_bytes());
        rec_work_ = std::max(rec_work_, rec_int8_.back()->work_bytes());
        rec_.push_back(nullptr);
      } else {
        rec_.push_back(step_product(H, rcols_, Rd));
      }
      if (two_phase_) rec_h_.push_back(step_product(H, H, Rd + 2 * H * H));
    }
    const bool loops = rec_[0] && rec_[0]->is_loop();
    if (proj_int8_)
      name_ = std::string("onednn int8 input projections (X quantized), ") +
              (rec_int8_[0] ? "int8 recurrence (h quantized per step)"
               : loops      ? "recurrent products as loops (small steps)"
                            : "onednn recurrent products") +
              " + vectorised gates";
    else if (rec_int8_[0])
      name_ = "onednn matmuls (int8 recurrence, h quantized per step) + vectorised gates";
    else if (loops)
      name_ = "onednn input projections, recurrent products as loops (small steps) + vectorised gates";
  }
  const char* impl_name() const override { return name_.c_str(); }
  // The matmuls run one after another and share the kernel's scratch.
  size_t scratch_bytes() const override { return scratch_; }

  void run(KernelContext& ctx) const override {
    const int64_t S = s_.S, N = s_.N, H = s_.H, GH = gates_of(s_.cell) * H, RC = rcols_;
    auto in = [&](size_t i) -> const float* {
      return i < ctx.inputs.size() && ctx.inputs[i].data ? ctx.inputs[i].as<float>() : nullptr;
    };
    const float* X = in(0);
    const float* Bv = s_.has_b ? in(3) : nullptr;
    const float* H0 = s_.has_h0 ? in(5) : nullptr;
    const float* C0 = s_.has_c0 ? in(6) : nullptr;
    const float* P = s_.has_p ? in(7) : nullptr;
    float* Y = s_.out[0] ? ctx.outputs[0].as<float>() : nullptr;
    float* YH = s_.out[1] ? ctx.outputs[1].as<float>() : nullptr;
    float* YC = (s_.cell == Cell::kLSTM && s_.out[2]) ? ctx.outputs[2].as<float>() : nullptr;

    const std::vector<int64_t> lens = rnn::sequence_lengths(ctx, s_.has_lens, N, S);
    // Workspace (grows once): projections [S*N, GH] in X's row order, the
    // bias added to them [GH], states h, c and the step's h', c' [N, H], the
    // recurrent products [N, RC], GRU's z and r [N, 2H], r . h_prev and its
    // product [N, H] each, GRU's Rb of the h gate [H].
    // Then the int8 products' work space (X's and h's uint8 values, int32
    // sums), where they run; the projections' is spent before the steps.
    const size_t need = static_cast<size_t>(S * N * GH + GH + 4 * N * H + N * RC + 4 * N * H + H);
    float* xp = thread_buffer<float>(need + (rec_work_ + 64) / sizeof(float), 0);
    void* rec_work = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(xp + need) + 63) / 64 * 64);
    float* bias = xp + S * N * GH;
    float* h = bias + GH;
    float* cst = h + N * H;
    float* hn = cst + N * H;
    float* cn = hn + N * H;
    float* rh = cn + N * H;
    float* zr = rh + N * RC;
    float* rhp = zr + 2 * N * H;
    float* rhh = rhp + N * H;
    float* rbh = rhh + N * H;
    if (Y) std::fill(Y, Y + ctx.outputs[0].numel(), 0.f);

    const int64_t layout = s_.layout, dirs = s_.dirs;
    auto row_of = [&](int64_t t, int64_t b) { return layout ? b * S + t : t * N + b; };
    auto state_at = [&](int64_t d, int64_t b) { return layout ? (b * dirs + d) * H : (d * N + b) * H; };
    auto y_at = [&](int64_t t, int64_t d, int64_t b) {
      return layout ? ((b * S + t) * dirs + d) * H : ((t * dirs + d) * N + b) * H;
    };
    const bool has_clip = s_.has_clip, input_forget = s_.input_forget;
    const float clip = s_.clip;
    // Rows per chunk of the gate loops: about 16K values of work each.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, GH));
    // The steps' products and gates run on one thread below kStepWorkForThreads
    // multiply-adds a step: each step's split costs a barrier, and at seq 100,
    // hidden 512, batch 1 (1M a step) two threads on the 2-core test machine
    // with one core busy elsewhere took 16.6 ms against 4.8 ms on one (the
    // projections, one large matmul, keep every thread).
    constexpr int64_t kStepWorkForThreads = int64_t(1) << 23;
    KernelContext step_ctx;
    step_ctx.scratch = ctx.scratch;
    step_ctx.num_threads = N * H * GH >= kStepWorkForThreads ? ctx.num_threads : 1;

    for (int d = 0; d < dirs; ++d) {
      const bool rev = s_.reverse_only || d == 1;
      const Act* acts = s_.acts.data() + d * rnn::acts_of(s_.cell);
      // X W^T for every step, then + Wb + Rb (GRU's h gate keeps its Rb for
      // the reset product when linear_before_reset, as rnn.cc). The int8
      // projections quantize X for each direction, as onnxruntime does: the
      // work space is the steps' in between. Its range covers the steps
      // some sequence runs (onnxruntime's rows for a layout-0 X).
      if (proj_int8_) {
        const int64_t steps = layout ? S : std::min(S, *std::max_element(lens.begin(), lens.end()));
        proj_int8_->project(ctx, d, proj_int8_->quantize(ctx, X, steps * N * s_.I, rec_work), xp, rec_work);
      } else {
        proj_[d]->run(ctx, X, nullptr, nullptr, nullptr, xp);
      }
      for (int64_t j = 0; j < GH; ++j) {
        const bool rb_later = s_.cell == Cell::kGRU && j >= 2 * H;
        bias[j] = Bv ? Bv[d * 2 * GH + j] + (rb_later ? 0.f : Bv[d * 2 * GH + GH + j]) : 0.f;
      }
      if (Bv)
        parallel_for(S * N, ctx.num_threads, std::max<int64_t>(1, 65536 / GH), [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) add_in(bias, xp + r * GH, GH);
        });
      if (s_.cell == Cell::kGRU)  // GRU's Rb of the h gate
        for (int64_t k = 0; k < H; ++k) rbh[k] = Bv ? Bv[d * 2 * GH + GH + 2 * H + k] : 0.f;
      const float* pc = P ? P + d * 3 * H : nullptr;
      for (int64_t b = 0; b < N; ++b)
        for (int64_t k = 0; k < H; ++k) {
          h[b * H + k] = H0 ? H0[state_at(d, b) + k] : 0.f;
          cst[b * H + k] = C0 ? C0[state_at(d, b) + k] : 0.f;
        }
      auto x_of = [&](int64_t step, int64_t b) {
        const int64_t t = rev ? lens[b] - 1 - step : step;
        return xp + row_of(t, b) * GH;
      };
      for (int64_t step = 0; step < S; ++step) {
        if (rec_int8_[d])
          rec_int8_[d]->run(step_ctx, h, rh, rec_work);
        else
          rec_[d]->run(step_ctx, h, rh);
        if (two_phase_) {
          // z and r of every row, then (r . h_prev) R_h^T for all rows at once.
          parallel_for(N, step_ctx.num_threads, grain, [&](int64_t lo, int64_t hi) {
            float* g = thread_buffer<float>(2 * H, 1);
            for (int64_t b = lo; b < hi; ++b) {
              if (step >= lens[b]) {  // finished: a row of zeros for the product
                std::fill(rhp + b * H, rhp + (b + 1) * H, 0.f);
                continue;
              }
              add2(x_of(step, b), rh + b * RC, g, 2 * H);
              clip_row(has_clip, clip, g, 2 * H);
              activate(acts[0], g, zr + b * 2 * H, 2 * H);
              mul2(zr + b * 2 * H + H, h + b * H, rhp + b * H, H);
            }
          });
          rec_h_[d]->run(step_ctx, rhp, rhh);
        }
        parallel_for(N, step_ctx.num_threads, grain, [&](int64_t lo, int64_t hi) {
          float* g = thread_buffer<float>(9 * H, 1);
          for (int64_t b = lo; b < hi; ++b) {
            if (step >= lens[b]) continue;
            const float* x = x_of(step, b);
            const float* r = rh + b * RC;
            const float* hp = h + b * H;
            float* ho = hn + b * H;
            if (s_.cell == Cell::kRNN) {
              add2(x, r, g, H);
              clip_row(has_clip, clip, g, H);
              activate(acts[0], g, ho, H);
            } else if (s_.cell == Cell::kGRU) {
              gru_row(acts, x, r, two_phase_ ? zr + b * 2 * H : nullptr, rhh + b * H, rbh, hp, g, ho, H, has_clip,
                      clip);
            } else {
              lstm_row(acts, input_forget, x, r, cst + b * H, pc, g, ho, cn + b * H, H, has_clip, clip);
            }
            if (Y) std::copy(ho, ho + H, Y + y_at(rev ? lens[b] - 1 - step : step, d, b));
          }
        });
        // Commit the step for the sequences that ran it.
        for (int64_t b = 0; b < N; ++b) {
          if (step >= lens[b]) continue;
          std::copy(hn + b * H, hn + (b + 1) * H, h + b * H);
          if (s_.cell == Cell::kLSTM) std::copy(cn + b * H, cn + (b + 1) * H, cst + b * H);
        }
      }
      for (int64_t b = 0; b < N; ++b)
        for (int64_t k = 0; k < H; ++k) {
          if (YH) YH[state_at(d, b) + k] = h[b * H + k];
          if (YC) YC[state_at(d, b) + k] = cst[b * H + k];
        }
    }
  }

 private:
  rnn::RnnSpec s_;
  bool two_phase_ = false;
  int64_t rcols_ = 0;  // columns of the per-step product: G*H, or 2H (two_phase_)
  std::vector<std::unique_ptr<MatmulCore>> proj_;                // per direction; null: proj_int8_ runs
  std::unique_ptr<LstmInt8Projection> proj_int8_;                // every direction's, or null
  std::vector<std::unique_ptr<StepProduct>> rec_, rec_h_;          // per direction
  std::vector<std::unique_ptr<LstmInt8Recurrence>> rec_int8_;      // per direction; null: rec_ runs
  size_t rec_work_ = 0;  // bytes the int8 products need beside the workspace
  size_t scratch_ = 0;
  std::string name_ = "onednn matmuls + vectorised gates";
};

// Above rnn.cc's "cpu loop" (priority 0), which takes what supports() refuses.
TWINFER_REGISTER_KERNEL("RNN", Backend::kCPU, 10, supports, make_kernel<RecurrentOnednnKernel>);
TWINFER_REGISTER_KERNEL("GRU", Backend::kCPU, 10, supports, make_kernel<RecurrentOnednnKernel>);
TWINFER_REGISTER_KERNEL("LSTM", Backend::kCPU, 10, supports, make_kernel<RecurrentOnednnKernel>);

}  // namespace
}  // namespace twinfer::tx
