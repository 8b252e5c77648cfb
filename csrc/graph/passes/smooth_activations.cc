#include "graph/passes/smooth_activations.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

const Tensor* float_constant(const graph::Graph& g, int v) {
  return v >= 0 && g.values[v].is_constant() && g.values[v].constant.dtype() == DType::kFloat32
             ? &g.values[v].constant
             : nullptr;
}

// Whether node n reads x as its activation (input 0) times a constant
// float32 weight with `k` rows along the contraction; *rows_on_axis0 says
// whether that contraction axis is the weight's first (MatMul, Gemm) or
// second (Gemm with transB = 1).
// (k = 0: any contraction length.)
bool smoothable_reader(const graph::Graph& g, const graph::Node& n, int x, size_t k,
                       const std::set<std::string>& keep_float, bool* rows_on_axis0) {
  const bool matmul = is_default(n, "MatMul"), gemm = is_default(n, "Gemm");
  if (!(matmul || gemm) || keep_float.count(n.name) || n.inputs.size() < 2 || n.inputs[0] != x || n.inputs[1] == x)
    return false;
  if (gemm && n.attr_int("transA", 0) != 0) return false;
  const Tensor* w = float_constant(g, n.inputs[1]);
  if (!w || w->shape().size() != 2) return false;
  *rows_on_axis0 = !(gemm && n.attr_int("transB", 0) != 0);
  return k == 0 || w->shape()[*rows_on_axis0 ? 0 : 1] == static_cast<int64_t>(k);
}

// w with row k of the contraction axis multiplied by s[k].
Tensor scaled_weight(const Tensor& w, const std::vector<float>& s, bool rows_on_axis0) {
  Tensor out = Tensor::empty(DType::kFloat32, w.shape());
  const int64_t r = w.shape()[0], c = w.shape()[1];
  const float* a = w.data_as<float>();
  float* b = out.data_as<float>();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) b[i * c + j] = a[i * c + j] * s[rows_on_axis0 ? i : j];
  return out;
}

Tensor vector_of(const std::vector<float>& v) {
  Tensor t = Tensor::empty(DType::kFloat32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

// A LayerNormalization producing x whose scale and bias are float32
// vectors of k elements: they can absorb 1 / s.
bool foldable_layer_norm(const graph::Graph& g, int x, size_t k) {
  const int p = g.values[x].producer;
  if (p < 0) return false;
  const graph::Node& ln = g.nodes[p];
  if (!is_default(ln, "LayerNormalization") || ln.outputs.empty() || ln.outputs[0] != x || ln.inputs.size() < 2)
    return false;
  for (size_t i = 1; i < 3 && i < ln.inputs.size(); ++i) {
    if (ln.inputs[i] < 0) continue;
    const Tensor* t = float_constant(g, ln.inputs[i]);
    if (!t || t->shape().size() != 1 || t->numel() != static_cast<int64_t>(k)) return false;
  }
  return true;
}

}  // namespace

std::map<std::string, std::vector<float>> smoothing_weight_amax(const graph::Graph& g,
                                                                const std::set<std::string>& keep_float) {
  std::map<std::string, std::vector<float>> out;
  const std::vector<std::vector<int>> users = value_users(g);
  for (size_t x = 0; x < g.values.size(); ++x) {
    const graph::Value& xv = g.values[x];
    if (xv.is_constant() || xv.dtype != DType::kFloat32 || users[x].empty()) continue;
    std::vector<float> rows;
    bool agree = true;
    for (int u : users[x]) {
      bool rows0 = true;
      if (!smoothable_reader(g, g.nodes[u], static_cast<int>(x), 0, keep_float, &rows0)) continue;
      const Tensor& w = g.values[g.nodes[u].inputs[1]].constant;
      const int64_t r = w.shape()[0], c = w.shape()[1], k = rows0 ? r : c;
      if (!rows.empty() && static_cast<int64_t>(rows.size()) != k) agree = false;
      if (!agree) break;
      rows.resize(static_cast<size_t>(k), 0.f);
      const float* a = w.data_as<float>();
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
          float& m = rows[static_cast<size_t>(rows0 ? i : j)];
          m = std::max(m, std::fabs(a[i * c + j]));
        }
    }
    if (agree && !rows.empty()) out[xv.name] = std::move(rows);
  }
  return out;
}

int smooth_activations(graph::Graph& g, QuantizeSpec& spec, const PassContext& ctx) {
  if (spec.smoothing.empty()) return 0;
  int smoothed = 0, folded = 0;
  std::vector<std::vector<int>> users = value_users(g);
  for (const auto& [name, sm] : spec.smoothing) {
    const int x = g.find_value(name);
    if (x < 0 || g.values[x].is_constant() || g.values[x].dtype != DType::kFloat32 || sm.factors.empty() ||
        !(sm.amax > 0.f))
      continue;
    const std::vector<float>& s = sm.factors;
    bool usable = true;
    for (float f : s) usable = usable && f > 0.f && std::isfinite(f);
    if (!usable) continue;
    std::vector<std::pair<int, bool>> readers;  // (node, contraction on the weight's axis 0)
    for (int u : users[x]) {
      bool rows0 = true;
      if (smoothable_reader(g, g.nodes[u], x, s.size(), spec.keep_float, &rows0)) readers.emplace_back(u, rows0);
    }
    if (readers.empty()) continue;
    for (const auto& [u, rows0] : readers) {
      const int w = g.nodes[u].inputs[1];
      const std::string wname = g.values[w].name;
      const Tensor scaled = scaled_weight(g.values[w].constant, s, rows0);
      g.nodes[u].inputs[1] = add_constant(g, wname + "_smoothed", scaled);
    }
    std::vector<float> inv(s.size());
    for (size_t k = 0; k < s.size(); ++k) inv[k] = 1.f / s[k];
    std::vector<float> mean;
    if (auto m = spec.activation_channel_mean.find(name);
        m != spec.activation_channel_mean.end() && m->second.size() == s.size()) {
      mean = m->second;
      for (size_t k = 0; k < s.size(); ++k) mean[k] *= inv[k];
    }
    const bool alone = readers.size() == users[x].size() && !is_graph_output(g, x);
    std::string target = name;
    if (alone && foldable_layer_norm(g, x, s.size())) {
      graph::Node& ln = g.nodes[g.values[x].producer];
      for (size_t i = 1; i < 3 && i < ln.inputs.size(); ++i) {
        if (ln.inputs[i] < 0) continue;
        const Tensor& t = g.values[ln.inputs[i]].constant;
        std::vector<float> v(t.data_as<float>(), t.data_as<float>() + t.numel());
        for (size_t k = 0; k < s.size(); ++k) v[k] *= inv[k];
        const std::string cname = g.values[ln.inputs[i]].name + "_smoothed";
        g.nodes[g.values[x].producer].inputs[i] = add_constant(g, cname, vector_of(v));
      }
      ++folded;
    } else {
      const graph::Value xv = g.values[x];  // copy: adding values may move the vector
      const int iv = add_constant(g, name + "_smooth_inverse", vector_of(inv));
      const int y = add_value(g, name + "_smoothed");
      g.values[y].dtype = DType::kFloat32;
      g.values[y].has_shape = xv.has_shape;
      g.values[y].shape = xv.shape;
      graph::Node mul;
      mul.name = name + "_smooth";
      mul.op_type = "Mul";
      mul.inputs = {x, iv};
      mul.outputs = {y};
      for (const auto& [u, rows0] : readers) g.nodes[u].inputs[0] = y;
      g.add_node(std::move(mul));
      target = g.values[y].name;
    }
    spec.activation_amax[target] = sm.amax;
    if (target != name) {
      if (spec.unsigned_activations.count(name)) spec.unsigned_activations.insert(target);
      if (spec.per_token.count(name)) spec.per_token.insert(target);
    }
    if (!mean.empty()) spec.activation_channel_mean[target] = mean;
    else spec.activation_channel_mean.erase(target);
    ++smoothed;
    users = value_users(g);
  }
  if (!smoothed) return 0;
  g.topo_sort();
  ctx.note("int8: smoothed " + std::to_string(smoothed) + " activations (SmoothQuant; " + std::to_string(folded) +
           " folded into their LayerNormalization)");
  return smoothed;
}

}  // namespace twinfer::passes
