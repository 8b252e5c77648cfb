#include "graph/passes/blocked_layout.h"

#include <cstdlib>
#include <numeric>
#include <string>

#include "graph/domains.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/nn/pool.h"

namespace twinfer::passes {
namespace {


bool enabled() { return pass_enabled("TWINFER_BLOCKED_LAYOUT"); }

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// A float32 rank-4 activation (not a constant). Other ranks would work in the
// kernels; the pass keeps to the [N, C, H, W] maps it is tested on.
bool activation_4d(const graph::Graph& g, int v) {
  if (v < 0) return false;
  const auto& val = g.values[v];
  return !val.is_constant() && val.dtype == DType::kFloat32 && val.has_shape && val.shape.size() == 4 &&
         sym_shape_known(val.shape);
}

bool const_scalar(const graph::Graph& g, int v, float* out) {
  if (v < 0) return true;  // omitted bound
  const auto& val = g.values[v];
  if (!val.is_constant() || val.constant.dtype() != DType::kFloat32 || val.constant.numel() != 1) return false;
  *out = *val.constant.data_as<float>();
  return true;
}

// The unary op as a blocked eltwise node (activation attributes as in
// ops/nn/activation.h), or false when it is not one we run blocked.
bool unary_as_activation(const graph::Graph& g, const graph::Node& n, graph::Node* trial) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op_type;
  std::vector<float> p;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") {
  } else if (op == "LeakyRelu") {
    p = {n.attr_float("alpha", 0.01f)};
  } else if (op == "HardSigmoid") {
    p = {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)};
  } else if (op == "Clip") {
    float lo = -3.4e38f, hi = 3.4e38f;  // finite, so padding channels stay finite too
    if (!const_scalar(g, n.inputs.size() > 1 ? n.inputs[1] : -1, &lo) ||
        !const_scalar(g, n.inputs.size() > 2 ? n.inputs[2] : -1, &hi))
      return false;
    lo = n.attr_float("min", lo);
    hi = n.attr_float("max", hi);
    p = {lo, hi};
  } else {
    return false;
  }
  *trial = n;
  trial->inputs = {n.inputs[0]};
  trial->attrs.clear();
  trial->attrs["activation"] = string_attr(op);
  trial->attrs["activation_params"] = floats_attr(p);
  return true;
}

bool is_conv(const graph::Node& n) {
  return n.op_type == "Conv" && (n.domain.empty() || n.domain == kTwinferDomain);
}

// The node's blocked form, when it is an op the blocked domain has and its
// operands fit (the kernel's supports() has the last word). A conv may start
// a region; other ops join one: some input must already be blocked.
bool blocked_form(const graph::Graph& g, const graph::Node& n, const std::vector<char>& region_value,
                  int64_t block, graph::Node* trial) {
  if (n.outputs.empty() || !activation_4d(g, n.outputs[0]) || n.inputs.empty() || n.inputs[0] < 0) return false;
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (n.outputs[o] >= 0) return false;  // MaxPool's Indices, etc.
  bool any_blocked = false;
  for (int in : n.inputs) any_blocked = any_blocked || (in >= 0 && region_value[in]);
  if (is_conv(n)) {
    if (!activation_4d(g, n.inputs[0])) return false;
    if (n.inputs.size() > 3 && n.inputs[3] >= 0 && !activation_4d(g, n.inputs[3])) return false;
    *trial = n;
    if (!region_value[n.inputs[0]] && g.values[n.inputs[0]].shape[1].value < block) {
      trial->attrs["plain_input"] = int_attr(1);  // the first layer reads the image as it is
    }
  } else if (unary_as_activation(g, n, trial)) {
    if (!activation_4d(g, n.inputs[0]) || !region_value[n.inputs[0]]) return false;
  } else if ((is_default(n, "Max") || is_default(n, "Min")) && n.inputs.size() == 2) {
    // Max / Min of x and a constant scalar (tf2onnx's tf.maximum after a
    // LeakyRelu: openwakeword's embedding model), either operand order.
    for (int k = 0; k < 2; ++k) {
      const int c = n.inputs[k], x = n.inputs[1 - k];
      float bound;
      if (c < 0 || x < 0 || !g.values[c].is_constant() || !const_scalar(g, c, &bound) || !activation_4d(g, x) ||
          !region_value[x])
        continue;
      *trial = n;
      trial->inputs = {x};
      trial->attrs.clear();
      trial->attrs["bound"] = float_attr(bound);
      trial->domain = kBlockedDomain;
      return true;
    }
    return false;
  } else if (nn::stored_channels_last(n)) {
    return false;  // an int8 MaxPool on NHWC bytes (int8_channels_last); activation_4d is float32 anyway
  } else if (is_default(n, "Add") || is_default(n, "Mul") || is_default(n, "Concat") || is_default(n, "MaxPool") ||
             is_default(n, "AveragePool") || is_default(n, "GlobalAveragePool") ||
             is_default(n, "GlobalMaxPool")) {
    bool ok = !n.inputs.empty();
    for (int in : n.inputs) ok = ok && activation_4d(g, in);
    if (!ok || !any_blocked) return false;
    *trial = n;
  } else {
    return false;
  }
  trial->domain = kBlockedDomain;
  return true;
}

// Which inputs of a blocked node are activations read in the blocked layout.
std::vector<size_t> blocked_inputs(const graph::Node& n) {
  if (n.op_type == "Conv") {
    std::vector<size_t> r;
    if (!n.attr_int("plain_input", 0)) r.push_back(0);
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) r.push_back(3);
    return r;
  }
  std::vector<size_t> r(n.inputs.size());
  std::iota(r.begin(), r.end(), 0);
  return r;
}

int fresh_value(graph::Graph& g, int like, const std::string& suffix) {
  std::string name = g.values[like].name + suffix;
  for (int k = 2; g.find_value(name) >= 0; ++k) name = g.values[like].name + suffix + std::to_string(k);
  const int id = g.value_id(name);
  g.values[id].dtype = g.values[like].dtype;
  g.values[id].has_shape = true;
  g.values[id].shape = g.values[like].shape;
  return id;
}

}  // namespace

BlockedLayout blocked_layout(graph::Graph& g, const PassContext& ctx, int64_t block) {
  BlockedLayout r;
  if (!enabled() || block <= 1 || ctx.backend != Backend::kCPU || ctx.precision != Precision::kFP32) return r;
  const size_t n_nodes = g.nodes.size();
  std::vector<char> in_region(n_nodes, 0);
  std::vector<graph::Node> rewritten(n_nodes);
  // Value ids produced by a region node (their blocked twins come later).
  std::vector<char> region_value(g.values.size(), 0);

  auto kernel_accepts = [&](const graph::Node& trial) {
    KernelBuildInfo info(g, trial, ctx.opset, ctx.backend, ctx.precision);
    std::string why;
    try {
      return select_kernel(info, &why) != nullptr;
    } catch (const Error&) {  // a shape the kernel cannot read: leave the node plain
      return false;
    }
  };

  for (size_t i = 0; i < n_nodes; ++i) {
    graph::Node trial;
    if (!blocked_form(g, g.nodes[i], region_value, block, &trial) || !kernel_accepts(trial)) continue;
    in_region[i] = 1;
    rewritten[i] = std::move(trial);
    region_value[g.nodes[i].outputs[0]] = 1;
  }

  // Regions are the connected groups of blocked nodes. A group that is one
  // convolution would only move its reorders out of the kernel: leave it.
  UnionFind uf(n_nodes);
  for (size_t i = 0; i < n_nodes; ++i) {
    if (!in_region[i]) continue;
    for (int in : g.nodes[i].inputs)
      if (in >= 0 && region_value[in] && g.values[in].producer >= 0) uf.join(static_cast<int>(i), g.values[in].producer);
  }
  std::vector<int> size(n_nodes, 0);
  for (size_t i = 0; i < n_nodes; ++i)
    if (in_region[i]) ++size[uf.find(static_cast<int>(i))];
  for (size_t i = 0; i < n_nodes; ++i)
    if (in_region[i] && size[uf.find(static_cast<int>(i))] == 1) {
      in_region[i] = 0;
      region_value[g.nodes[i].outputs[0]] = 0;
    }

  // Blocked twins of region outputs; plain readers and graph outputs get a FromBlocked.
  const auto users = value_users(g);
  std::vector<int> twin(g.values.size(), -1);    // region value -> its blocked twin
  std::vector<int> to_blk(g.values.size(), -1);  // plain value -> its ToBlocked copy
  std::vector<graph::Node> added;
  for (size_t i = 0; i < n_nodes; ++i) {
    if (!in_region[i]) continue;
    const int v = g.nodes[i].outputs[0];
    twin[v] = fresh_value(g, v, "::blocked");
    bool plain_reader = is_graph_output(g, v);
    for (int u : users[v]) plain_reader = plain_reader || !in_region[u];
    if (plain_reader) {
      graph::Node fb;
      fb.name = g.nodes[i].name + "::FromBlocked";
      fb.op_type = "FromBlocked";
      fb.domain = kBlockedDomain;
      fb.inputs = {twin[v]};
      fb.outputs = {v};
      added.push_back(std::move(fb));
    }
  }
  for (size_t i = 0; i < n_nodes; ++i) {
    if (!in_region[i]) continue;
    graph::Node& n = rewritten[i];
    for (size_t k : blocked_inputs(n)) {
      const int v = n.inputs[k];
      if (v < 0) continue;
      if (twin[v] >= 0) {
        n.inputs[k] = twin[v];
        continue;
      }
      if (to_blk[v] < 0) {
        to_blk[v] = fresh_value(g, v, "::to_blocked");
        graph::Node tb;
        tb.name = g.values[v].name + "::ToBlocked";
        tb.op_type = "ToBlocked";
        tb.domain = kBlockedDomain;
        tb.inputs = {v};
        tb.outputs = {to_blk[v]};
        added.push_back(std::move(tb));
      }
      n.inputs[k] = to_blk[v];
    }
    n.outputs[0] = twin[g.nodes[i].outputs[0]];
    g.nodes[i] = std::move(n);
    ++r.nodes;
  }
  if (!r.nodes) return r;
  r.reorders = static_cast<int>(added.size());
  for (auto& a : added) g.nodes.push_back(std::move(a));
  g.topo_sort();

  r.block = block;
  r.blocked.assign(g.values.size(), 0);
  for (size_t v = 0; v < twin.size(); ++v) {
    if (twin[v] >= 0) r.blocked[twin[v]] = 1;
    if (to_blk[v] >= 0) r.blocked[to_blk[v]] = 1;
  }
  ctx.note("blocked layout: " + std::to_string(r.nodes) + " nodes in channel blocks of " + std::to_string(block) +
           ", " + std::to_string(r.reorders) + " reorders");
  return r;
}

}  // namespace twinfer::passes
