#include "graph/passes/bias_correction.h"

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// A float32 constant holding exactly `channels` values laid out as [channels]
// or [1, channels] (what a per-output-channel bias may look like).
const Tensor* channel_constant(const graph::Graph& g, int v, int64_t channels) {
  if (v < 0 || !g.values[v].is_constant()) return nullptr;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() != DType::kFloat32 || t.numel() != channels) return nullptr;
  const Shape& s = t.shape();
  if (!(s.size() == 1 || (s.size() == 2 && s[0] == 1))) return nullptr;
  return &t;
}

// `base` (or zeros) minus `shift` times `factor`, as a new constant.
int shifted_constant(graph::Graph& g, const std::string& name, const Tensor* base, const std::vector<float>& shift,
                     float factor) {
  Tensor t = Tensor::empty(DType::kFloat32, base ? base->shape() : Shape{static_cast<int64_t>(shift.size())});
  float* y = t.data_as<float>();
  for (size_t c = 0; c < shift.size(); ++c) y[c] = (base ? base->data_as<float>()[c] : 0.f) - shift[c] * factor;
  return add_constant(g, name, std::move(t));
}

}  // namespace

std::vector<float> weight_rounding_shift(const graph::Node& n, const Tensor& w, const Tensor& q,
                                         const Tensor& scales, const std::vector<float>& mean) {
  const Shape& s = w.shape();
  const float* wf = w.data_as<float>();
  const int8_t* wq = q.data_as<int8_t>();
  const float* sc = scales.data_as<float>();
  if (is_default(n, "Conv")) {
    const int64_t group = n.attr_int("group", 1);
    if (s.size() < 3 || group < 1 || s[0] % group) return {};
    const int64_t m_total = s[0], cg = s[1];
    if (static_cast<int64_t>(mean.size()) != cg * group || scales.numel() != m_total) return {};
    int64_t taps = 1;
    for (size_t d = 2; d < s.size(); ++d) taps *= s[d];
    std::vector<float> shift(m_total, 0.f);
    for (int64_t m = 0; m < m_total; ++m) {
      const int64_t first = (m / (m_total / group)) * cg;  // this output channel's group's first input channel
      double acc = 0;
      for (int64_t ic = 0; ic < cg; ++ic)
        for (int64_t k = 0; k < taps; ++k) {
          const int64_t at = (m * cg + ic) * taps + k;
          acc += (static_cast<double>(wq[at]) * sc[m] - wf[at]) * mean[first + ic];
        }
      shift[m] = static_cast<float>(acc);
    }
    return shift;
  }
  const bool gemm = is_default(n, "Gemm");
  if (!(gemm || is_default(n, "MatMul")) || s.size() != 2) return {};
  if (gemm && n.attr_int("transA", 0) != 0) return {};
  const bool trans_b = gemm && n.attr_int("transB", 0) != 0;
  const int64_t k_dim = trans_b ? s[1] : s[0], n_dim = trans_b ? s[0] : s[1];
  if (static_cast<int64_t>(mean.size()) != k_dim || scales.numel() != n_dim) return {};
  const float alpha = gemm ? n.attr_float("alpha", 1.f) : 1.f;
  std::vector<float> shift(n_dim, 0.f);
  for (int64_t j = 0; j < n_dim; ++j) {
    double acc = 0;
    for (int64_t k = 0; k < k_dim; ++k) {
      const int64_t at = trans_b ? j * k_dim + k : k * n_dim + j;
      acc += (static_cast<double>(wq[at]) * sc[j] - wf[at]) * mean[k];
    }
    shift[j] = static_cast<float>(alpha * acc);
  }
  return shift;
}

bool subtract_from_bias(graph::Graph& g, size_t i, const std::vector<float>& shift,
                        const std::vector<std::vector<int>>& users, std::vector<graph::Node>* added) {
  const int64_t channels = static_cast<int64_t>(shift.size());
  const std::string name = g.nodes[i].name + "_bias_corrected";
  const bool conv = is_default(g.nodes[i], "Conv");
  if (conv || is_default(g.nodes[i], "Gemm")) {
    // Gemm adds beta * C: the correction is divided by beta.
    const float beta = conv ? 1.f : g.nodes[i].attr_float("beta", 1.f);
    if (beta == 0.f) return false;
    const int b = g.nodes[i].inputs.size() > 2 ? g.nodes[i].inputs[2] : -1;
    const Tensor* base = b >= 0 ? channel_constant(g, b, channels) : nullptr;
    if (b >= 0 && !base) return false;
    const int nb = shifted_constant(g, name, base, shift, 1.f / beta);
    g.nodes[i].inputs.resize(3, -1);
    g.nodes[i].inputs[2] = nb;
    return true;
  }
  // MatMul: the constant vector of a sole following Add, else a new Add.
  const int out = g.nodes[i].outputs[0];
  if (users[out].size() == 1 && !is_graph_output(g, out)) {
    graph::Node& add = g.nodes[users[out][0]];
    if (is_default(add, "Add") && add.inputs.size() == 2) {
      const int slot = add.inputs[0] == out ? 1 : 0;
      const graph::Value& other = g.values[add.inputs[slot]];
      if (add.inputs[1 - slot] == out && other.has_shape && other.shape.size() == 1) {
        if (const Tensor* base = channel_constant(g, add.inputs[slot], channels)) {
          const int nb = shifted_constant(g, name, base, shift, 1.f);
          g.nodes[users[out][0]].inputs[slot] = nb;
          return true;
        }
      }
    }
  }
  const int raw = add_value(g, g.values[out].name + "_before_bias_correction");
  g.values[raw].dtype = g.values[out].dtype;
  const int nb = shifted_constant(g, name, nullptr, shift, 1.f);
  graph::Node add;
  add.name = name;
  add.op_type = "Add";
  add.inputs = {raw, nb};
  add.outputs = {out};
  g.nodes[i].outputs[0] = raw;
  added->push_back(std::move(add));
  return true;
}

}  // namespace twinfer::passes
