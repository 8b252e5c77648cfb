// RNN, GRU, LSTM (opsets 7 / 14 / 22): shape rules and one CPU kernel for
// the three cells. Gate orders follow ONNX: RNN [i], GRU [z, r, h],
// LSTM [i, o, f, c] with peepholes P = [i, o, f]. Directions forward /
// reverse / bidirectional, per-batch sequence_lens (steps past a sequence's
// end leave Y zero and Y_h / Y_c at its last valid state; reverse runs from
// each sequence's own end), initial states, clip (applied to the gate
// pre-activations), GRU linear_before_reset, LSTM input_forget, the eleven
// activation functions with activation_alpha / activation_beta, and layout 1
// (batch-major X, Y, states).
//
// Per direction: the input projections of every step come from one pass
// (X W^T + Wb + Rb), then the steps run in order with the recurrent product
// threaded over the batch. Float32 nodes with constant W and R (exported
// models) run backends/cpu/onednn_rnn.cc instead (oneDNN matmuls,
// vectorised gates); this kernel takes the rest: runtime weights,
// float16 / float64, constant folding.
//
// The node's checks (rnn_spec.h) and the per-element math (activations,
// clip: rnn_math.h) are shared with the CUDA kernel (backends/cuda/recurrent.cu).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/simd_clones.h"
#include "core/parallel.h"
#include "ops/rnn/rnn_math.h"
#include "ops/rnn/rnn_spec.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

// y[0, n) += a * x[0, n): the matrix products below as rows of the
// transposed weights, so the inner loop runs along the outputs and
// vectorises, each output still summed over k in order (the reference's
// rounding, and the CUDA kernel's: no FMA, this file is built with
// -ffp-contract=off).
TWINFER_SIMD_CLONES void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}
void axpy(double* __restrict y, double a, const double* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}

// A weight as the products read it: transposed ([K, G*H], built once with
// the kernel), or as the node holds it ([G*H, K], copied into C for one run
// by a kernel built for one evaluation, where transposing would cost more
// than it saves). Either way y[j] = sum over k in order of v[k] * w(j, k).
template <typename C>
struct Weight {
  const C* data;
  int64_t k;        // K: the product's length
  int64_t ld;       // transposed: G*H (the distance between rows k); plain: K
  bool transposed;

  // y[0, n) = the products of v with outputs [first, first + n).
  void product(const C* v, int64_t first, int64_t n, C* y) const {
    if (transposed) {
      std::fill(y, y + n, C(0));
      for (int64_t i = 0; i < k; ++i) axpy(y, v[i], data + i * ld + first, n);
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      const C* w = data + (first + j) * ld;
      C s = 0;
      for (int64_t i = 0; i < k; ++i) s += v[i] * w[i];
      y[j] = s;
    }
  }
};

// A weight [G*H, K] (row j: gate output j) transposed into [K, G*H], in C.
template <typename T, typename C>
void transpose_weight(const T* w, int64_t rows, int64_t cols, C* out) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t k = 0; k < cols; ++k) out[k * rows + j] = static_cast<C>(load(w[j * cols + k]));
}

using rnn::acts_of;
using rnn::Act;
using rnn::Cell;
using rnn::cell_of;
using rnn::gates_of;
using rnn::num_dirs;
using rnn::parse_acts;

void infer_rnn(InferContext& c) {
  const graph::Node& n = c.node();
  const Cell cell = cell_of(n.op_type);
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, n.op_type + " needs a float input, got " + dtype_name(dt));
  if (!(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2)))
    c.fail(ErrorKind::kModelFormat, n.op_type + " needs X, W and R");
  for (size_t i : {1, 2, 3, 5, 6, 7}) check_same_dtype_as(c, i, dt);
  if (c.has_input(4))
    if (!(c.input_dtype(4) == DType::kInt32 || c.input_dtype(4) == DType::kInt64))
      c.fail(ErrorKind::kDType, "sequence_lens must be int32");
  const int dirs = num_dirs(n);
  parse_acts(n, cell, dirs);
  const int64_t layout = c.opset() >= 14 ? n.attr_int("layout", 0) : 0;
  if (!(layout == 0 || layout == 1)) c.fail(ErrorKind::kModelFormat, "layout must be 0 or 1");
  Dim hidden = n.has_attr("hidden_size") ? Dim(n.attr_int("hidden_size", 0)) : Dim();
  if (!hidden.known() && c.input_has_shape(2) && c.input_shape(2).size() == 3) hidden = c.input_shape(2)[2];
  Dim seq, batch;
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() == 3)) c.fail(ErrorKind::kShape, "X must be 3-D, got " + sym_shape_str(x));
    seq = x[layout ? 1 : 0];
    batch = x[layout ? 0 : 1];
  }
  if (c.input_has_shape(1)) {
    const SymShape& w = c.input_shape(1);
    if (!(w.size() == 3)) c.fail(ErrorKind::kShape, "W must be 3-D, got " + sym_shape_str(w));
    if (!(dims_compatible(w[0], Dim(dirs)))) c.fail(ErrorKind::kShape, "W's first dim must be num_directions");
    if (hidden.known())
      if (!(dims_compatible(w[1], Dim(gates_of(cell) * hidden.value))))
        c.fail(ErrorKind::kShape, "W " + sym_shape_str(w) + " does not match hidden_size " + hidden.str());
  }
  const Dim D(dirs);
  const size_t nout = c.num_outputs();
  if (nout > 0 && c.has_output(0))
    c.set_output(0, dt, layout ? SymShape{batch, seq, D, hidden} : SymShape{seq, D, batch, hidden});
  for (size_t i = 1; i < nout && i < 3; ++i)
    if (c.has_output(i)) c.set_output(i, dt, layout ? SymShape{batch, D, hidden} : SymShape{D, batch, hidden});
}

TWINFER_REGISTER_SCHEMA("RNN", infer_rnn);
TWINFER_REGISTER_SCHEMA("GRU", infer_rnn);
TWINFER_REGISTER_SCHEMA("LSTM", infer_rnn);

class RecurrentKernel final : public Kernel {
 public:
  explicit RecurrentKernel(const KernelBuildInfo& info)
      : spec_(info), cell_(spec_.cell), dirs_(spec_.dirs), reverse_only_(spec_.reverse_only), acts_(spec_.acts),
        layout_(spec_.layout), S_(spec_.S), N_(spec_.N), I_(spec_.I), H_(spec_.H), has_b_(spec_.has_b),
        has_lens_(spec_.has_lens), has_h0_(spec_.has_h0), has_c0_(spec_.has_c0), has_p_(spec_.has_p),
        input_forget_(spec_.input_forget), linear_before_reset_(spec_.linear_before_reset),
        has_clip_(spec_.has_clip), clip_(spec_.clip) {
    for (size_t i = 0; i < 3; ++i) out_[i] = spec_.out[i];
    // Constant weights (the usual case) are transposed into the compute
    // type once, here, instead of on every run; a kernel built for one
    // evaluation reads them as they are.
    const Tensor* w = info.input_constant(1);
    const Tensor* r = info.input_constant(2);
    if (w && r && !info.single_run())
      dispatch_any_float(w->dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        cache_weights<T, compute_t<T>>(w->data_as<T>(), r->data_as<T>());
      });
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
    const int64_t S = S_, N = N_, I = I_, H = H_, G = gates_of(cell_), GH = G * H;
    auto in = [&](size_t i) -> const T* {
      return i < ctx.inputs.size() && ctx.inputs[i].data ? ctx.inputs[i].as<T>() : nullptr;
    };
    const T* X = in(0);
    const T* W = in(1);
    const T* R = in(2);
    const T* Bv = has_b_ ? in(3) : nullptr;
    const T* H0 = has_h0_ ? in(5) : nullptr;
    const T* C0 = has_c0_ ? in(6) : nullptr;
    const T* P = has_p_ ? in(7) : nullptr;
    T* Y = out_[0] ? ctx.outputs[0].as<T>() : nullptr;
    T* YH = out_[1] ? ctx.outputs[1].as<T>() : nullptr;
    T* YC = (cell_ == Cell::kLSTM && out_[2]) ? ctx.outputs[2].as<T>() : nullptr;

    const std::vector<int64_t> lens = rnn::sequence_lengths(ctx, has_lens_, N, S);
    // Workspace (grows once): projections [S, N, GH], W and R of a direction
    // in C (unless transposed at build), states h and c [N, H].
    const std::vector<C>& wt_all = cached<C>(0);
    const std::vector<C>& rt_all = cached<C>(1);
    const bool have_cache = !wt_all.empty();
    const size_t need = static_cast<size_t>(S * N * GH + (have_cache ? 0 : GH * I + GH * H) + 2 * GH + 3 * H + 4 * N * H);
    C* ws = thread_buffer<C>(need, 0);
    C* xp = ws;
    C* wtmp = xp + S * N * GH;
    C* rtmp = wtmp + (have_cache ? 0 : GH * I);
    C* wb = rtmp + (have_cache ? 0 : GH * H);  // Wb then Rb
    C* pc = wb + 2 * GH;
    C* h = pc + 3 * H;
    C* cst = h + N * H;
    C* hn = cst + N * H;
    C* cn = hn + N * H;
    if (Y) std::fill(Y, Y + ctx.outputs[0].numel(), store<T>(C(0)));

    auto x_at = [&](int64_t t, int64_t b) { return X + (layout_ ? (b * S + t) : (t * N + b)) * I; };
    auto state_at = [&](int64_t d, int64_t b) { return layout_ ? (b * dirs_ + d) * H : (d * N + b) * H; };
    auto y_at = [&](int64_t t, int64_t d, int64_t b) {
      return layout_ ? ((b * S + t) * dirs_ + d) * H : ((t * dirs_ + d) * N + b) * H;
    };
    const C clip = static_cast<C>(clip_);
    auto clipv = [&](C v) { return rnn::clip_value(has_clip_, clip, v); };

    for (int d = 0; d < dirs_; ++d) {
      const bool rev = reverse_only_ || d == 1;
      const Act* acts = acts_.data() + d * acts_of(cell_);
      // W and R of this direction: transposed at build, or copied into C now.
      Weight<C> wt{wtmp, I, I, false}, rt{rtmp, H, H, false};
      if (have_cache) {
        wt = {wt_all.data() + d * GH * I, I, GH, true};
        rt = {rt_all.data() + d * GH * H, H, GH, true};
      } else {
        for (int64_t i = 0; i < GH * I; ++i) wtmp[i] = load(W[d * GH * I + i]);
        for (int64_t i = 0; i < GH * H; ++i) rtmp[i] = load(R[d * GH * H + i]);
      }
      for (int64_t i = 0; i < 2 * GH; ++i) wb[i] = Bv ? C(load(Bv[d * 2 * GH + i])) : C(0);
      for (int64_t i = 0; i < 3 * H; ++i) pc[i] = P ? C(load(P[d * 3 * H + i])) : C(0);
      // Input projections of every step: X_t W^T + Wb (+ Rb, except GRU's h gate
      // whose Rb sits inside the reset product when linear_before_reset).
      parallel_for(S * N, ctx.num_threads, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, GH * I)),
                   [&](int64_t lo, int64_t hi) {
        C* xb = thread_buffer<C>(I, 1);
        for (int64_t tb = lo; tb < hi; ++tb) {
          const T* xr = x_at(tb / N, tb % N);
          for (int64_t k = 0; k < I; ++k) xb[k] = load(xr[k]);
          C* o = xp + tb * GH;
          wt.product(xb, 0, GH, o);
          for (int64_t j = 0; j < GH; ++j) {
            const bool rb_later = cell_ == Cell::kGRU && j >= 2 * H;
            o[j] = o[j] + wb[j] + (rb_later ? C(0) : wb[GH + j]);
          }
        }
      });
      for (int64_t b = 0; b < N; ++b)
        for (int64_t k = 0; k < H; ++k) {
          h[b * H + k] = H0 ? C(load(H0[state_at(d, b) + k])) : C(0);
          cst[b * H + k] = C0 ? C(load(C0[state_at(d, b) + k])) : C(0);
        }
      for (int64_t step = 0; step < S; ++step) {
        parallel_for(N, ctx.num_threads, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, GH * H)),
                     [&](int64_t lo, int64_t hi) {
          C* g = thread_buffer<C>(2 * GH, 2);
          C* rh = g + GH;  // recurrent products
          for (int64_t b = lo; b < hi; ++b) {
            if (step >= lens[b]) continue;
            const int64_t t = rev ? lens[b] - 1 - step : step;
            const C* hp = h + b * H;
            const C* cp = cst + b * H;
            C* ho = hn + b * H;
            C* co = cn + b * H;
            const C* x = xp + (t * N + b) * GH;
            rt.product(hp, 0, GH, rh);
            if (cell_ == Cell::kRNN) {
              for (int64_t k = 0; k < H; ++k) ho[k] = acts[0](clipv(x[k] + rh[k]));
            } else if (cell_ == Cell::kGRU) {
              const C* rbh = wb + GH + 2 * H;
              for (int64_t k = 0; k < H; ++k) {
                const C z = acts[0](clipv(x[k] + rh[k]));
                const C r = acts[0](clipv(x[H + k] + rh[H + k]));
                g[k] = z;
                g[H + k] = r;
              }
              if (!linear_before_reset_) {
                // (r . h_prev) R_h^T replaces h_prev R_h^T.
                C* rhp = g + 2 * H;  // r . h_prev (g's third block is free)
                for (int64_t k = 0; k < H; ++k) rhp[k] = g[H + k] * hp[k];
                rt.product(rhp, 2 * H, H, rh + 2 * H);
              }
              for (int64_t k = 0; k < H; ++k) {
                const C z = g[k], r = g[H + k];
                const C pre = linear_before_reset_ ? x[2 * H + k] + r * (rh[2 * H + k] + rbh[k])
                                                   : x[2 * H + k] + rh[2 * H + k] + rbh[k];
                const C hh = acts[1](clipv(pre));
                ho[k] = (C(1) - z) * hh + z * hp[k];
              }
            } else {
              const C* pi = pc;
              const C* po = pc + H;
              const C* pf = pc + 2 * H;
              for (int64_t k = 0; k < H; ++k) {
                const C ig = acts[0](clipv(x[k] + rh[k] + pi[k] * cp[k]));
                const C fg = input_forget_ ? C(1) - ig : acts[0](clipv(x[2 * H + k] + rh[2 * H + k] + pf[k] * cp[k]));
                const C cg = acts[1](clipv(x[3 * H + k] + rh[3 * H + k]));
                const C cnew = fg * cp[k] + ig * cg;
                const C og = acts[0](clipv(x[H + k] + rh[H + k] + po[k] * cnew));
                co[k] = cnew;
                ho[k] = og * acts[2](cnew);
              }
            }
            if (Y) {
              T* yr = Y + y_at(t, d, b);
              for (int64_t k = 0; k < H; ++k) yr[k] = store<T>(ho[k]);
            }
          }
        });
        // Commit the step for the sequences that ran it.
        for (int64_t b = 0; b < N; ++b) {
          if (step >= lens[b]) continue;
          std::copy(hn + b * H, hn + (b + 1) * H, h + b * H);
          if (cell_ == Cell::kLSTM) std::copy(cn + b * H, cn + (b + 1) * H, cst + b * H);
        }
      }
      for (int64_t b = 0; b < N; ++b)
        for (int64_t k = 0; k < H; ++k) {
          if (YH) YH[state_at(d, b) + k] = store<T>(h[b * H + k]);
          if (YC) YC[state_at(d, b) + k] = store<T>(cst[b * H + k]);
        }
    }
  }

  // W and R of every direction, transposed to [I, G*H] and [H, G*H] in C
  // (double for double inputs, float otherwise); empty where they are not
  // constants.
  template <typename T, typename C>
  void cache_weights(const T* W, const T* R) {
    const int64_t GH = gates_of(cell_) * H_;
    std::vector<C>& wt = cached<C>(0);
    std::vector<C>& rt = cached<C>(1);
    wt.resize(static_cast<size_t>(dirs_ * GH * I_));
    rt.resize(static_cast<size_t>(dirs_ * GH * H_));
    for (int d = 0; d < dirs_; ++d) {
      transpose_weight(W + d * GH * I_, GH, I_, wt.data() + d * GH * I_);
      transpose_weight(R + d * GH * H_, GH, H_, rt.data() + d * GH * H_);
    }
  }
  template <typename C>
  std::vector<C>& cached(int which) {
    if constexpr (std::is_same_v<C, double>) return which ? rt_d_ : wt_d_;
    else return which ? rt_f_ : wt_f_;
  }
  template <typename C>
  const std::vector<C>& cached(int which) const {
    if constexpr (std::is_same_v<C, double>) return which ? rt_d_ : wt_d_;
    else return which ? rt_f_ : wt_f_;
  }
  std::vector<float> wt_f_, rt_f_;
  std::vector<double> wt_d_, rt_d_;

  rnn::RnnSpec spec_;
  Cell cell_;
  int dirs_;
  bool reverse_only_;
  std::vector<Act> acts_;
  int64_t layout_, S_, N_, I_, H_;
  bool has_b_, has_lens_, has_h0_, has_c0_, has_p_;
  bool input_forget_, linear_before_reset_, has_clip_;
  float clip_;
  bool out_[3] = {false, false, false};
};

bool supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2, 3, 5, 6, 7}, why); }

TWINFER_REGISTER_KERNEL("RNN", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);
TWINFER_REGISTER_KERNEL("GRU", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);
TWINFER_REGISTER_KERNEL("LSTM", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);

}  // namespace
}  // namespace twinfer::tx
