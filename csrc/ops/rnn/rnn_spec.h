// RNN, GRU, LSTM: the node's attributes and shapes as both kernels see them
// (the CPU kernel, rnn.cc, and the CUDA kernel, backends/cuda/recurrent.cu),
// parsed and checked once here, so both accept and refuse the same nodes
// with the same messages. Host only.
#pragma once
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "ops/kernel.h"
#include "ops/rnn/rnn_math.h"

namespace twinfer::rnn {

// The attribute the load-time expansion of com.microsoft::DynamicQuantizeLSTM
// puts on the LSTM it becomes (graph/passes/expand_contrib.cc) where R is
// int8 with zero points 0: R's scales per gate row, [dirs * 4H], the float R
// being exactly q * scale. The oneDNN CPU kernel (backends/cpu/onednn_rnn.cc)
// then runs each step's recurrent product on q with h quantized to uint8, as
// the contrib op defines it (a quarter of the weight bytes per step); the
// other kernels read the float R.
inline constexpr const char* kLstmInt8RScales = "twinfer_r_int8_scales";
// The same for W, [dirs * 4H], where W is int8 with zero points 0: the
// oneDNN CPU kernel then runs the input projections on W's int8 values with
// X quantized to uint8 over all its values, as onnxruntime computes the
// contrib op (backends/cpu/lstm_int8_projection.h).
inline constexpr const char* kLstmInt8WScales = "twinfer_w_int8_scales";

inline Cell cell_of(const std::string& op) {
  return op == "LSTM" ? Cell::kLSTM : op == "GRU" ? Cell::kGRU : Cell::kRNN;
}

inline int num_dirs(const graph::Node& n) {
  const std::string d = n.attr_string("direction", "forward");
  if (d == "forward" || d == "reverse") return 1;
  if (d == "bidirectional") return 2;
  throw Error(ErrorKind::kModelFormat, "direction '" + d + "' is not forward, reverse or bidirectional", n.name,
              n.op_type);
}

// Activations for each direction (acts_of(cell) per direction).
inline std::vector<Act> parse_acts(const graph::Node& n, Cell cell, int dirs) {
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

// The node for concrete shapes: sizes, which optional inputs and outputs are
// present, the attributes. A shape the node cannot have fails here (the
// kernel's build), on every backend alike.
struct RnnSpec {
  Cell cell = Cell::kRNN;
  int dirs = 1;
  bool reverse_only = false;
  std::vector<Act> acts;
  int64_t layout = 0, S = 0, N = 0, I = 0, H = 0;
  bool has_b = false, has_lens = false, has_h0 = false, has_c0 = false, has_p = false;
  bool input_forget = false, linear_before_reset = false, has_clip = false;
  float clip = 0.f;
  bool out[3] = {false, false, false};

  explicit RnnSpec(const KernelBuildInfo& info) : cell(cell_of(info.node().op_type)) {
    const graph::Node& n = info.node();
    dirs = num_dirs(n);
    reverse_only = n.attr_string("direction", "forward") == "reverse";
    acts = parse_acts(n, cell, dirs);
    layout = info.opset() >= 14 ? n.attr_int("layout", 0) : 0;
    Shape x = info.input_shape(0), w = info.input_shape(1), r = info.input_shape(2);
    if (x.size() != 3) info.fail(ErrorKind::kShape, "X must be 3-D, got " + shape_str(x));
    S = x[layout ? 1 : 0];
    N = x[layout ? 0 : 1];
    I = x[2];
    const int G = gates_of(cell);
    if (r.size() != 3 || r[0] != dirs || r[1] % G || r[2] * G != r[1])
      info.fail(ErrorKind::kShape, "R " + shape_str(r) + " must be [num_directions, " + std::to_string(G) +
                                       "*hidden, hidden]");
    H = r[2];
    if (n.has_attr("hidden_size") && n.attr_int("hidden_size", 0) != H)
      info.fail(ErrorKind::kShape, "hidden_size " + std::to_string(n.attr_int("hidden_size", 0)) +
                                       " does not match R " + shape_str(r));
    if (w != Shape{dirs, G * H, I})
      info.fail(ErrorKind::kShape, "W " + shape_str(w) + " must be " + shape_str(Shape{dirs, G * H, I}));
    has_b = info.has_input(3);
    if (has_b && info.input_shape(3) != Shape{dirs, 2 * G * H})
      info.fail(ErrorKind::kShape, "B " + shape_str(info.input_shape(3)) + " must be " +
                                       shape_str(Shape{dirs, 2 * G * H}));
    has_lens = info.has_input(4);
    if (has_lens && shape_numel(info.input_shape(4)) != N)
      info.fail(ErrorKind::kShape, "sequence_lens " + shape_str(info.input_shape(4)) + " must have " +
                                       std::to_string(N) + " values");
    const Shape state = layout ? Shape{N, dirs, H} : Shape{dirs, N, H};
    has_h0 = info.has_input(5);
    if (has_h0 && info.input_shape(5) != state)
      info.fail(ErrorKind::kShape, "initial_h " + shape_str(info.input_shape(5)) + " must be " + shape_str(state));
    if (cell == Cell::kLSTM) {
      has_c0 = info.has_input(6);
      if (has_c0 && info.input_shape(6) != state)
        info.fail(ErrorKind::kShape, "initial_c " + shape_str(info.input_shape(6)) + " must be " + shape_str(state));
      has_p = info.has_input(7);
      if (has_p && info.input_shape(7) != Shape{dirs, 3 * H})
        info.fail(ErrorKind::kShape, "P " + shape_str(info.input_shape(7)) + " must be " +
                                         shape_str(Shape{dirs, 3 * H}));
      input_forget = n.attr_int("input_forget", 0) != 0;
    }
    if (cell == Cell::kGRU) linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;
    has_clip = n.has_attr("clip");
    clip = n.attr_float("clip", 0.f);
    if (has_clip && !(clip > 0.f)) info.fail(ErrorKind::kModelFormat, "clip must be positive");
    for (size_t i = 0; i < 3; ++i) out[i] = info.num_outputs() > i && info.has_output(i);
    if (cell != Cell::kLSTM) out[2] = false;
  }
};

// Each batch entry's sequence length: input 4 (int32 or int64) when the node
// has it, else S for all; a length outside [0, S] is the caller's error.
inline std::vector<int64_t> sequence_lengths(const KernelContext& ctx, bool has_lens, int64_t N, int64_t S) {
  std::vector<int64_t> lens(N, S);
  if (!has_lens) return lens;
  const TensorView& t = ctx.inputs[4];
  for (int64_t b = 0; b < N; ++b) {
    const int64_t v = t.dtype == DType::kInt64 ? t.as<int64_t>()[b] : t.as<int32_t>()[b];
    if (v < 0 || v > S)
      throw Error(ErrorKind::kInvalidArgument, "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(v) +
                                                   " is outside [0, " + std::to_string(S) + "]");
    lens[b] = v;
  }
  return lens;
}

}  // namespace twinfer::rnn
