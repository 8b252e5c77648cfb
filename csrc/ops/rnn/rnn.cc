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
// threaded over the batch.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/parallel.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

enum class Cell { kRNN, kGRU, kLSTM };

Cell cell_of(const std::string& op) { return op == "LSTM" ? Cell::kLSTM : op == "GRU" ? Cell::kGRU : Cell::kRNN; }
int gates_of(Cell c) { return c == Cell::kLSTM ? 4 : c == Cell::kGRU ? 3 : 1; }
int acts_of(Cell c) { return c == Cell::kLSTM ? 3 : c == Cell::kGRU ? 2 : 1; }

int num_dirs(const graph::Node& n) {
  const std::string d = n.attr_string("direction", "forward");
  if (d == "forward" || d == "reverse") return 1;
  if (d == "bidirectional") return 2;
  throw Error(ErrorKind::kModelFormat, "direction '" + d + "' is not forward, reverse or bidirectional", n.name,
              n.op_type);
}

enum class ActKind { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
                     kElu, kSoftsign, kSoftplus };

struct Act {
  ActKind kind = ActKind::kTanh;
  float alpha = 0.f, beta = 0.f;
  template <typename C>
  C operator()(C x) const {
    const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    switch (kind) {
      case ActKind::kRelu: return x > C(0) ? x : C(0);
      case ActKind::kTanh: return std::tanh(x);
      case ActKind::kSigmoid: return x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x));
      case ActKind::kAffine: return a * x + b;
      case ActKind::kLeakyRelu: return x >= C(0) ? x : a * x;
      case ActKind::kThresholdedRelu: return x > a ? x : C(0);
      case ActKind::kScaledTanh: return a * std::tanh(b * x);
      case ActKind::kHardSigmoid: return std::max(C(0), std::min(C(1), a * x + b));
      case ActKind::kElu: return x >= C(0) ? x : a * (std::exp(x) - C(1));
      case ActKind::kSoftsign: return x / (C(1) + std::abs(x));
      case ActKind::kSoftplus: return std::log1p(std::exp(-std::abs(x))) + std::max(x, C(0));
    }
    return x;
  }
};

// Activations for each direction (acts_of(cell) per direction).
std::vector<Act> parse_acts(const graph::Node& n, Cell cell, int dirs) {
  const int per = acts_of(cell);
  std::vector<std::string> names = n.has_attr("activations") ? [&] {
    std::vector<std::string> v;
    const auto& a = n.attrs.at("activations");
    for (const auto& s : a.strings) v.push_back(s);
    return v;
  }() : std::vector<std::string>{};
  if (names.empty()) {
    if (cell == Cell::kRNN) names = {"Tanh"};
    else if (cell == Cell::kGRU) names = {"Sigmoid", "Tanh"};
    else names = {"Sigmoid", "Tanh", "Tanh"};
  }
  if (static_cast<int>(names.size()) == per && dirs == 2) {
    std::vector<std::string> twice = names;
    twice.insert(twice.end(), names.begin(), names.end());
    names = twice;
  }
  if (static_cast<int>(names.size()) != per * dirs)
    throw Error(ErrorKind::kModelFormat,
                "activations lists " + std::to_string(names.size()) + " functions, expected " +
                    std::to_string(per * dirs), n.name, n.op_type);
  const std::vector<float> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  // One alpha/beta per activation when the lists are that long; else consumed
  // in order by the activations that take them.
  const bool one_to_one_a = alphas.size() == names.size(), one_to_one_b = betas.size() == names.size();
  size_t ai = 0, bi = 0;
  std::vector<Act> acts;
  for (size_t k = 0; k < names.size(); ++k) {
    std::string s = names[k];
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    Act a;
    bool needs_a = true, needs_b = false;
    float da = 0.f, db = 0.f;
    if (s == "relu") { a.kind = ActKind::kRelu; needs_a = false; }
    else if (s == "tanh") { a.kind = ActKind::kTanh; needs_a = false; }
    else if (s == "sigmoid") { a.kind = ActKind::kSigmoid; needs_a = false; }
    else if (s == "affine") { a.kind = ActKind::kAffine; needs_b = true; da = 1.f; db = 0.f; }
    else if (s == "leakyrelu") { a.kind = ActKind::kLeakyRelu; da = 0.01f; }
    else if (s == "thresholdedrelu") { a.kind = ActKind::kThresholdedRelu; da = 1.f; }
    else if (s == "scaledtanh") { a.kind = ActKind::kScaledTanh; needs_b = true; da = 1.f; db = 1.f; }
    else if (s == "hardsigmoid") { a.kind = ActKind::kHardSigmoid; needs_b = true; da = 0.2f; db = 0.5f; }
    else if (s == "elu") { a.kind = ActKind::kElu; da = 1.f; }
    else if (s == "softsign") { a.kind = ActKind::kSoftsign; needs_a = false; }
    else if (s == "softplus") { a.kind = ActKind::kSoftplus; needs_a = false; }
    else throw Error(ErrorKind::kUnsupportedOp, "activation '" + names[k] + "' is not supported", n.name, n.op_type);
    a.alpha = da;
    a.beta = db;
    if (one_to_one_a) a.alpha = needs_a ? alphas[k] : da;
    else if (needs_a && ai < alphas.size()) a.alpha = alphas[ai++];
    if (one_to_one_b) a.beta = needs_b ? betas[k] : db;
    else if (needs_b && bi < betas.size()) a.beta = betas[bi++];
    acts.push_back(a);
  }
  return acts;
}

void infer_rnn(InferContext& c) {
  const graph::Node& n = c.node();
  const Cell cell = cell_of(n.op_type);
  const DType dt = c.input_dtype(0);
  c.check(ew::in_typeset(ew::kFloatTypes, dt), ErrorKind::kDType,
          n.op_type + " needs a float input, got " + dtype_name(dt));
  c.check(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2), ErrorKind::kModelFormat,
          n.op_type + " needs X, W and R");
  for (size_t i : {1, 2, 3, 5, 6, 7}) check_same_dtype_as(c, i, dt);
  if (c.has_input(4))
    c.check(c.input_dtype(4) == DType::kInt32 || c.input_dtype(4) == DType::kInt64, ErrorKind::kDType,
            "sequence_lens must be int32");
  const int dirs = num_dirs(n);
  parse_acts(n, cell, dirs);
  const int64_t layout = c.opset() >= 14 ? n.attr_int("layout", 0) : 0;
  c.check(layout == 0 || layout == 1, ErrorKind::kModelFormat, "layout must be 0 or 1");
  Dim hidden = n.has_attr("hidden_size") ? Dim(n.attr_int("hidden_size", 0)) : Dim();
  if (!hidden.known() && c.input_has_shape(2) && c.input_shape(2).size() == 3) hidden = c.input_shape(2)[2];
  Dim seq, batch;
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    c.check(x.size() == 3, ErrorKind::kShape, "X must be 3-D, got " + sym_shape_str(x));
    seq = x[layout ? 1 : 0];
    batch = x[layout ? 0 : 1];
  }
  if (c.input_has_shape(1)) {
    const SymShape& w = c.input_shape(1);
    c.check(w.size() == 3, ErrorKind::kShape, "W must be 3-D, got " + sym_shape_str(w));
    c.check(dims_compatible(w[0], Dim(dirs)), ErrorKind::kShape, "W's first dim must be num_directions");
    if (hidden.known())
      c.check(dims_compatible(w[1], Dim(gates_of(cell) * hidden.value)), ErrorKind::kShape,
              "W " + sym_shape_str(w) + " does not match hidden_size " + hidden.str());
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
  explicit RecurrentKernel(const KernelBuildInfo& info) : cell_(cell_of(info.node().op_type)) {
    const graph::Node& n = info.node();
    dirs_ = num_dirs(n);
    reverse_only_ = n.attr_string("direction", "forward") == "reverse";
    acts_ = parse_acts(n, cell_, dirs_);
    layout_ = info.opset() >= 14 ? n.attr_int("layout", 0) : 0;
    Shape x = info.input_shape(0), w = info.input_shape(1), r = info.input_shape(2);
    if (x.size() != 3) info.fail(ErrorKind::kShape, "X must be 3-D, got " + shape_str(x));
    S_ = x[layout_ ? 1 : 0];
    N_ = x[layout_ ? 0 : 1];
    I_ = x[2];
    const int G = gates_of(cell_);
    if (r.size() != 3 || r[0] != dirs_ || r[1] % G || r[2] * G != r[1])
      info.fail(ErrorKind::kShape, "R " + shape_str(r) + " must be [num_directions, " + std::to_string(G) +
                                       "*hidden, hidden]");
    H_ = r[2];
    if (n.has_attr("hidden_size") && n.attr_int("hidden_size", 0) != H_)
      info.fail(ErrorKind::kShape, "hidden_size " + std::to_string(n.attr_int("hidden_size", 0)) +
                                       " does not match R " + shape_str(r));
    if (w != Shape{dirs_, G * H_, I_})
      info.fail(ErrorKind::kShape, "W " + shape_str(w) + " must be " + shape_str(Shape{dirs_, G * H_, I_}));
    has_b_ = info.has_input(3);
    if (has_b_ && info.input_shape(3) != Shape{dirs_, 2 * G * H_})
      info.fail(ErrorKind::kShape, "B " + shape_str(info.input_shape(3)) + " must be " +
                                       shape_str(Shape{dirs_, 2 * G * H_}));
    has_lens_ = info.has_input(4);
    if (has_lens_ && shape_numel(info.input_shape(4)) != N_)
      info.fail(ErrorKind::kShape, "sequence_lens " + shape_str(info.input_shape(4)) + " must have " +
                                       std::to_string(N_) + " values");
    const Shape state = layout_ ? Shape{N_, dirs_, H_} : Shape{dirs_, N_, H_};
    has_h0_ = info.has_input(5);
    if (has_h0_ && info.input_shape(5) != state)
      info.fail(ErrorKind::kShape, "initial_h " + shape_str(info.input_shape(5)) + " must be " + shape_str(state));
    if (cell_ == Cell::kLSTM) {
      has_c0_ = info.has_input(6);
      if (has_c0_ && info.input_shape(6) != state)
        info.fail(ErrorKind::kShape, "initial_c " + shape_str(info.input_shape(6)) + " must be " + shape_str(state));
      has_p_ = info.has_input(7);
      if (has_p_ && info.input_shape(7) != Shape{dirs_, 3 * H_})
        info.fail(ErrorKind::kShape, "P " + shape_str(info.input_shape(7)) + " must be " +
                                         shape_str(Shape{dirs_, 3 * H_}));
      input_forget_ = n.attr_int("input_forget", 0) != 0;
    }
    if (cell_ == Cell::kGRU) linear_before_reset_ = n.attr_int("linear_before_reset", 0) != 0;
    has_clip_ = n.has_attr("clip");
    clip_ = n.attr_float("clip", 0.f);
    if (has_clip_ && !(clip_ > 0.f)) info.fail(ErrorKind::kModelFormat, "clip must be positive");
    for (size_t i = 0; i < 3; ++i) out_[i] = info.num_outputs() > i && info.has_output(i);
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

    std::vector<int64_t> lens(N, S);
    if (has_lens_) {
      const TensorView& t = ctx.inputs[4];
      for (int64_t b = 0; b < N; ++b) {
        const int64_t v = t.dtype == DType::kInt64 ? t.as<int64_t>()[b] : t.as<int32_t>()[b];
        if (v < 0 || v > S)
          throw Error(ErrorKind::kInvalidArgument, "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(v) +
                                                       " is outside [0, " + std::to_string(S) + "]");
        lens[b] = v;
      }
    }
    // Workspace (grows once): projections [S, N, GH], W and R of a direction in C,
    // states h and c [N, H].
    const size_t need = static_cast<size_t>(S * N * GH + GH * I + GH * H + 2 * GH + 3 * H + 4 * N * H);
    C* ws = thread_buffer<C>(need, 0);
    C* xp = ws;
    C* wc = xp + S * N * GH;
    C* rc = wc + GH * I;
    C* wb = rc + GH * H;  // Wb then Rb
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
    auto clipv = [&](C v) { return has_clip_ ? std::max(-clip, std::min(clip, v)) : v; };

    for (int d = 0; d < dirs_; ++d) {
      const bool rev = reverse_only_ || d == 1;
      const Act* acts = acts_.data() + d * acts_of(cell_);
      for (int64_t i = 0; i < GH * I; ++i) wc[i] = load(W[d * GH * I + i]);
      for (int64_t i = 0; i < GH * H; ++i) rc[i] = load(R[d * GH * H + i]);
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
          for (int64_t j = 0; j < GH; ++j) {
            const C* wr = wc + j * I;
            C s = 0;
            for (int64_t k = 0; k < I; ++k) s += xb[k] * wr[k];
            const bool rb_later = cell_ == Cell::kGRU && j >= 2 * H;
            o[j] = s + wb[j] + (rb_later ? C(0) : wb[GH + j]);
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
            for (int64_t j = 0; j < GH; ++j) {
              const C* rr = rc + j * H;
              C s = 0;
              for (int64_t k = 0; k < H; ++k) s += hp[k] * rr[k];
              rh[j] = s;
            }
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
                for (int64_t j = 0; j < H; ++j) {
                  const C* rr = rc + (2 * H + j) * H;
                  C s = 0;
                  for (int64_t k = 0; k < H; ++k) s += g[H + k] * hp[k] * rr[k];
                  rh[2 * H + j] = s;
                }
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

  Cell cell_;
  int dirs_ = 1;
  bool reverse_only_ = false;
  std::vector<Act> acts_;
  int64_t layout_ = 0, S_ = 0, N_ = 0, I_ = 0, H_ = 0;
  bool has_b_ = false, has_lens_ = false, has_h0_ = false, has_c0_ = false, has_p_ = false;
  bool input_forget_ = false, linear_before_reset_ = false, has_clip_ = false;
  float clip_ = 0.f;
  bool out_[3] = {false, false, false};
};

bool supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2, 3, 5, 6, 7}, why); }

TWINFER_REGISTER_KERNEL("RNN", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);
TWINFER_REGISTER_KERNEL("GRU", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);
TWINFER_REGISTER_KERNEL("LSTM", Backend::kCPU, 0, supports, make_kernel<RecurrentKernel>);

}  // namespace
}  // namespace twinfer::tx
