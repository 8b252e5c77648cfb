#include "graph/passes/channels_last.h"

#include <cstdlib>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "ops/nn/channels_last.h"
#include "ops/nn/pool.h"

namespace twinfer::passes {

namespace {

std::string channels_last_env() {
  const char* e = std::getenv("TWINFER_CHANNELS_LAST");
  return e ? e : "";
}

}  // namespace

bool channels_last_wanted(Precision p) {
  const std::string forced = channels_last_env();
  if (forced == "0") return false;
  if (p == Precision::kINT8) return false;  // int8 convolutions are QConv, NHWC already (int8_channels_last)
  if (forced == "1" || forced == "all") return true;
  return p == Precision::kTF32 || p == Precision::kFP16 || p == Precision::kBF16 || p == Precision::kFP8;
}

namespace {

const std::vector<int64_t> kToNchw{0, 3, 1, 2};
const std::vector<int64_t> kToNhwc{0, 2, 3, 1};

enum class Kind { kNone, kConv, kPool, kGlobalPool, kUnary, kElementwise, kConcat };

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

bool in_list(const graph::Node& n, std::initializer_list<const char*> ops) {
  if (!n.domain.empty()) return false;
  for (const char* op : ops)
    if (n.op_type == op) return true;
  return false;
}

Kind kind_of(const graph::Node& n, int64_t opset) {
  if (is_default(n, "PRelu") && opset < 7) return Kind::kNone;  // its slope may be per channel (ew::prelu_slope_shape)
  if (n.op_type == "Conv" && (n.domain.empty() || n.domain == kTwinferDomain)) return Kind::kConv;
  // An int8 MaxPool already pooling NHWC bytes (int8_channels_last) stays as it is.
  if ((is_default(n, "MaxPool") && !nn::stored_channels_last(n)) || is_default(n, "AveragePool")) return Kind::kPool;
  if (is_default(n, "GlobalAveragePool") || is_default(n, "GlobalMaxPool")) return Kind::kGlobalPool;
  if (is_default(n, "Concat")) return Kind::kConcat;
  // Layout does not matter to these: each output element depends on the
  // elements at the same position (and on scalars).
  if (in_list(n, {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Elu", "Selu",
                  "Celu", "Softplus", "Softsign", "Mish", "Gelu", "Erf", "Neg", "Abs", "Exp", "Log", "Sqrt",
                  "Reciprocal", "Cast", "Identity", "Floor", "Ceil", "Round", "Sign", "ThresholdedRelu"}))
    return n.op_type == "PRelu" ? Kind::kElementwise : Kind::kUnary;
  if (in_list(n, {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"})) return Kind::kElementwise;
  return Kind::kNone;
}

bool concrete(const graph::Value& v) { return v.has_shape && sym_shape_known(v.shape); }

// A float rank-4 activation with a concrete shape.
bool activation_4d(const graph::Graph& g, int v) {
  if (v < 0) return false;
  const auto& val = g.values[v];
  return !val.is_constant() && dtype_is_float(val.dtype) && concrete(val) && val.shape.size() == 4;
}

int64_t numel_of(const graph::Value& v) { return shape_numel(sym_shape_values(v.shape)); }

// How an input of an elementwise node enters a region: as it is (a one-element
// operand), NHWC (a rank-4 operand), or as a constant permuted here (lower rank).
enum class Operand { kAsIs, kNhwc, kPermutedConstant, kNo };

Operand operand_of(const graph::Graph& g, int v) {
  if (v < 0) return Operand::kAsIs;
  const auto& val = g.values[v];
  if (!concrete(val) || val.shape.size() > 4) return Operand::kNo;
  if (numel_of(val) == 1) return Operand::kAsIs;
  if (val.shape.size() == 4) return Operand::kNhwc;
  return val.is_constant() ? Operand::kPermutedConstant : Operand::kNo;
}

int fresh_value(graph::Graph& g, int like, const std::string& suffix, const SymShape& shape) {
  const int id = add_value(g, g.values[like].name + suffix);
  g.values[id].dtype = g.values[like].dtype;
  g.values[id].has_shape = true;
  g.values[id].shape = shape;
  return id;
}

class Rewriter {
 public:
  Rewriter(graph::Graph& g, const ChannelsLastOptions& o, const PassContext& ctx) : g_(g), o_(o), ctx_(ctx) {}

  int run() {
    const size_t n_nodes = g_.nodes.size();
    in_region_.assign(n_nodes, 0);
    trial_.resize(n_nodes);
    region_value_.assign(g_.values.size(), 0);
    for (size_t i = 0; i < n_nodes; ++i) {
      if (!join(g_.nodes[i], &trial_[i])) continue;
      in_region_[i] = 1;
      region_value_[g_.nodes[i].outputs[0]] = 1;
    }
    // =all rewrites a convolution alone too (tests of the NHWC kernels on
    // one-node models).
    if (channels_last_env() != "all") drop_lone_convs();
    return rewrite();
  }

 private:
  bool region(int v) const { return v >= 0 && static_cast<size_t>(v) < region_value_.size() && region_value_[v]; }

  // The node's channels-last form in `trial` when it can join (or start) a region.
  bool join(const graph::Node& n, graph::Node* trial) {
    const Kind k = kind_of(n, ctx_.opset);
    if (k == Kind::kNone || n.inputs.empty() || n.outputs.empty() || !activation_4d(g_, n.outputs[0])) return false;
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (n.outputs[o] >= 0) return false;  // MaxPool's Indices
    *trial = n;
    trial->outputs.resize(1);
    std::vector<char> nhwc_in(n.inputs.size(), 0);
    bool any_in = false;
    for (int v : n.inputs) any_in = any_in || region(v);
    switch (k) {
      case Kind::kConv: {
        const bool residual = n.inputs.size() > 3 && n.inputs[3] >= 0;
        if (!activation_4d(g_, n.inputs[0]) || n.inputs.size() < 2 || n.inputs[1] < 0 ||
            !g_.values[n.inputs[1]].is_constant() || (residual && !activation_4d(g_, n.inputs[3])))
          return false;
        trial->domain = kChannelsLastDomain;
        nhwc_in[0] = 1;
        nhwc_in[1] = 1;  // the weights become KRSC
        if (residual) nhwc_in[3] = 1;
        return accepted(*trial, nhwc_in);
      }
      case Kind::kPool:
        if (!region(n.inputs[0])) return false;
        trial->domain = kChannelsLastDomain;
        nhwc_in[0] = 1;
        return accepted(*trial, nhwc_in);
      case Kind::kGlobalPool:
        if (!region(n.inputs[0])) return false;
        trial->op_type = n.op_type == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax";
        trial->attrs.clear();
        trial->attrs["keepdims"] = int_attr(1);
        if (ctx_.opset >= 18) {  // axes became an input
          trial->inputs.push_back(spatial_axes());
          nhwc_in.push_back(0);
        } else {
          trial->attrs["axes"] = ints_attr({1, 2});
        }
        nhwc_in[0] = 1;
        return accepted(*trial, nhwc_in);
      case Kind::kUnary:
        if (!region(n.inputs[0])) return false;
        for (size_t i = 1; i < n.inputs.size(); ++i)
          if (operand_of(g_, n.inputs[i]) != Operand::kAsIs) return false;
        return true;  // the same kernel, the same elements
      case Kind::kConcat: {
        const int64_t axis = n.attr_int("axis", 0);
        if (!any_in || (axis != 1 && axis != -3)) return false;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          if (n.inputs[i] < 0 || g_.values[n.inputs[i]].shape.size() != 4 || !concrete(g_.values[n.inputs[i]]))
            return false;
          nhwc_in[i] = 1;
        }
        trial->attrs["axis"] = int_attr(3);
        return accepted(*trial, nhwc_in);
      }
      case Kind::kElementwise:
        if (!any_in) return false;
        for (int v : n.inputs)
          if (operand_of(g_, v) == Operand::kNo) return false;
        return true;  // broadcasting is the same on the permuted shapes
      case Kind::kNone:
        break;
    }
    return false;
  }

  // The constant [1, 2] for ReduceMean / ReduceMax's axes input (opset 18+).
  int spatial_axes() {
    if (axes_ < 0) {
      Tensor t = Tensor::empty(DType::kInt64, {2});
      t.data_as<int64_t>()[0] = 1;
      t.data_as<int64_t>()[1] = 2;
      axes_ = add_constant(g_, "channels_last::spatial_axes", t);
      region_value_.resize(g_.values.size(), 0);
    }
    return axes_;
  }

  // Asks the kernels about a one-node graph holding `trial` with the
  // operands the rewrite gives it.
  bool accepted(const graph::Node& trial, const std::vector<char>& nhwc_in) {
    graph::Graph mini;
    graph::Node copy = trial;
    auto add = [&](int v, bool permute) {
      graph::Value val = g_.values[v];
      val.producer = -1;
      if (permute) val.shape = nn::channels_last_shape(val.shape);
      if (permute && val.is_constant()) val.constant = permuted(v);
      mini.values.push_back(std::move(val));
      return static_cast<int>(mini.values.size()) - 1;
    };
    for (size_t k = 0; k < trial.inputs.size(); ++k)
      if (trial.inputs[k] >= 0) copy.inputs[k] = add(trial.inputs[k], nhwc_in[k]);
    copy.outputs[0] = add(trial.outputs[0], true);
    mini.values[copy.outputs[0]].producer = 0;
    mini.nodes.push_back(copy);
    try {
      return o_.supports(mini, mini.nodes.back());
    } catch (const Error&) {  // a shape the kernel cannot read: the node stays NCHW
      return false;
    }
  }

  // Regions are the connected groups of region nodes; one that is a single
  // convolution would only gain two transposes.
  void drop_lone_convs() {
    const size_t n_nodes = g_.nodes.size();
    UnionFind uf(n_nodes);
    for (size_t i = 0; i < n_nodes; ++i) {
      if (!in_region_[i]) continue;
      for (int in : g_.nodes[i].inputs)
        if (region(in) && g_.values[in].producer >= 0) uf.join(static_cast<int>(i), g_.values[in].producer);
    }
    std::vector<int> size(n_nodes, 0);
    for (size_t i = 0; i < n_nodes; ++i)
      if (in_region_[i]) ++size[uf.find(static_cast<int>(i))];
    for (size_t i = 0; i < n_nodes; ++i)
      if (in_region_[i] && size[uf.find(static_cast<int>(i))] == 1) {
        in_region_[i] = 0;
        region_value_[g_.nodes[i].outputs[0]] = 0;
      }
  }

  // Constant `v` with ones prepended to rank 4, then [a, b, c, d] ->
  // [a, c, d, b] (a convolution's weights [M, C/group, kh, kw] become KRSC),
  // once for the trials and the rewrite. A new tensor: the original may
  // share its storage with other values and with the engine's other plans.
  const Tensor& permuted(int v) {
    auto it = permuted_.find(v);
    if (it == permuted_.end()) {
      const Tensor& t = g_.values[v].constant;
      Shape s = t.shape();
      while (s.size() < 4) s.insert(s.begin(), 1);
      it = permuted_.emplace(v, o_.to_channels_last(t.reshaped(s))).first;
    }
    return it->second;
  }

  // The NHWC form of an operand from outside a region (shared by its readers).
  int outside_operand(int v) {
    if (nhwc_of_[v] >= 0) return nhwc_of_[v];
    const Operand how = operand_of(g_, v);
    if (how == Operand::kAsIs) return v;
    const graph::Value& val = g_.values[v];
    if (val.is_constant()) {
      const Tensor p = permuted(v);
      nhwc_of_[v] = add_constant(g_, val.name + "::nhwc", p);
      g_.values[nhwc_of_[v]].dtype = p.dtype();
      g_.values[nhwc_of_[v]].has_shape = true;
      g_.values[nhwc_of_[v]].shape = sym_shape_from(p.shape());
    } else {
      const std::string name = val.name;  // fresh_value may move g_.values, and val with them
      nhwc_of_[v] = fresh_value(g_, v, "::nhwc", nn::channels_last_shape(val.shape));
      added_.push_back(transpose_node(name + "::ToNHWC", v, nhwc_of_[v], kToNhwc));
    }
    return nhwc_of_[v];
  }

  int rewrite() {
    const size_t n_nodes = g_.nodes.size();
    const auto users = value_users(g_);
    std::vector<int> twin(g_.values.size(), -1);
    for (size_t i = 0; i < n_nodes; ++i) {
      if (!in_region_[i]) continue;
      const int v = g_.nodes[i].outputs[0];
      twin[v] = fresh_value(g_, v, "::nhwc", nn::channels_last_shape(g_.values[v].shape));
      bool outside_reader = is_graph_output(g_, v);
      for (int u : users[v]) outside_reader = outside_reader || !in_region_[u];
      if (outside_reader) added_.push_back(transpose_node(g_.values[v].name + "::ToNCHW", twin[v], v, kToNchw));
    }
    nhwc_of_.assign(g_.values.size(), -1);
    int rewritten = 0, convs = 0;
    for (size_t i = 0; i < n_nodes; ++i) {
      if (!in_region_[i]) continue;
      graph::Node& n = trial_[i];
      const Kind k = kind_of(g_.nodes[i], ctx_.opset);
      for (size_t s = 0; s < n.inputs.size(); ++s) {
        const int v = n.inputs[s];
        if (v < 0 || v == axes_) continue;
        if (twin[v] >= 0) {
          n.inputs[s] = twin[v];
        } else if (k == Kind::kElementwise || k == Kind::kConcat || (k == Kind::kConv && s != 2)) {
          // a convolution's x, weights (to KRSC) and residual; its bias [M] fits both layouts
          n.inputs[s] = outside_operand(v);
        }
      }
      n.outputs[0] = twin[g_.nodes[i].outputs[0]];
      convs += k == Kind::kConv;
      g_.nodes[i] = std::move(n);
      ++rewritten;
    }
    if (!rewritten) return 0;
    const size_t transposes = added_.size();
    for (auto& a : added_) g_.nodes.push_back(std::move(a));
    g_.topo_sort();
    ctx_.note("channels last: " + std::to_string(rewritten) + " nodes NHWC (" + std::to_string(convs) +
              " convolutions), " + std::to_string(transposes) + " transposes");
    return rewritten;
  }

  graph::Graph& g_;
  const ChannelsLastOptions& o_;
  const PassContext& ctx_;
  std::vector<char> in_region_;
  std::vector<graph::Node> trial_;
  std::vector<char> region_value_;  // by value id: produced by a region node
  std::vector<int> nhwc_of_;        // outside value -> its NHWC operand
  std::map<int, Tensor> permuted_;  // constant value -> permuted(value)
  std::vector<graph::Node> added_;  // transposes
  int axes_ = -1;
};

}  // namespace

int channels_last(graph::Graph& g, const ChannelsLastOptions& o, const PassContext& ctx) {
  return Rewriter(g, o, ctx).run();
}

}  // namespace twinfer::passes
