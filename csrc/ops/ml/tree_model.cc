#include "ops/ml/tree_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/half.h"
#include "ops/ml/ml_common.h"

namespace twinfer::ml {

namespace {

TreeNode::Mode legacy_mode(const graph::Node& n, const std::string& s) {
  if (s == "BRANCH_LEQ") return TreeNode::Mode::kLeq;
  if (s == "BRANCH_LT") return TreeNode::Mode::kLt;
  if (s == "BRANCH_GTE") return TreeNode::Mode::kGte;
  if (s == "BRANCH_GT") return TreeNode::Mode::kGt;
  if (s == "BRANCH_EQ") return TreeNode::Mode::kEq;
  if (s == "BRANCH_NEQ") return TreeNode::Mode::kNeq;
  if (s == "LEAF") return TreeNode::Mode::kLeaf;
  bad_model(n, "unknown node mode '" + s + "'");
}

template <typename T>
void same_length(const graph::Node& n, const std::vector<T>& v, size_t want, const std::string& name) {
  if (v.size() != want)
    bad_model(n, name + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(want));
}

// A tensor attribute's values as doubles (any float or integer type).
std::vector<double> tensor_values(const graph::Node& n, const std::string& name, bool required) {
  const Tensor* t = tensor_attr(n, name);
  if (!t) {
    if (required) bad_model(n, "has no " + name);
    return {};
  }
  std::vector<double> v(static_cast<size_t>(t->numel()));
  switch (t->dtype()) {
    case DType::kFloat32: std::copy_n(t->data_as<const float>(), v.size(), v.begin()); break;
    case DType::kFloat64: std::copy_n(t->data_as<const double>(), v.size(), v.begin()); break;
    case DType::kFloat16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = half_to_float(t->data_as<const half_t>()[i].bits);
      break;
    case DType::kUInt8: std::copy_n(t->data_as<const uint8_t>(), v.size(), v.begin()); break;
    case DType::kInt64: std::copy_n(t->data_as<const int64_t>(), v.size(), v.begin()); break;
    case DType::kInt32: std::copy_n(t->data_as<const int32_t>(), v.size(), v.begin()); break;
    default: bad_model(n, name + " must be a numeric tensor, not " + dtype_name(t->dtype()));
  }
  return v;
}

}  // namespace

void TreeEnsembleModel::validate(const graph::Node& n) const {
  const int32_t count = static_cast<int32_t>(nodes.size());
  for (const TreeNode& t : nodes)
    if (t.mode != TreeNode::Mode::kLeaf && (t.if_true < 0 || t.if_true >= count || t.if_false < 0 || t.if_false >= count))
      bad_model(n, "a branch leads to a node that does not exist");
  for (int32_t r : roots)
    if (r < 0 || r >= count) bad_model(n, "a tree's root does not exist");
  // Every walk must end: depth-first from each root, a node met again on the
  // current path is a cycle. (Shared subtrees are allowed.)
  std::vector<uint8_t> state(nodes.size(), 0);  // 0 new, 1 on the path, 2 done
  for (int32_t r : roots) {
    std::vector<std::pair<int32_t, int>> stack{{r, 0}};
    while (!stack.empty()) {
      auto& [id, step] = stack.back();
      const TreeNode& t = nodes[id];
      if (step == 0) {
        if (state[id] == 2) { stack.pop_back(); continue; }
        if (state[id] == 1) bad_model(n, "a tree has a cycle");
        state[id] = 1;
      }
      if (t.mode == TreeNode::Mode::kLeaf || step == 2) {
        state[id] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t next = step == 0 ? t.if_true : t.if_false;
      ++step;
      if (state[next] == 1) bad_model(n, "a tree has a cycle");
      if (state[next] == 0) stack.push_back({next, 0});
    }
  }
}

TreeEnsembleModel model_from_legacy(const graph::Node& n, const std::string& prefix) {
  TreeEnsembleModel m;
  const std::vector<int64_t> tree_ids = n.attr_ints("nodes_treeids"), node_ids = n.attr_ints("nodes_nodeids"),
                             feature_ids = n.attr_ints("nodes_featureids"), trues = n.attr_ints("nodes_truenodeids"),
                             falses = n.attr_ints("nodes_falsenodeids"),
                             missing = n.attr_ints("nodes_missing_value_tracks_true");
  const std::vector<std::string> modes = strings(n, "nodes_modes");
  const std::vector<double> values = reals(n, "nodes_values");
  const size_t count = tree_ids.size();
  if (count == 0) bad_model(n, "has no nodes (nodes_treeids)");
  same_length(n, node_ids, count, "nodes_nodeids");
  same_length(n, feature_ids, count, "nodes_featureids");
  same_length(n, modes, count, "nodes_modes");
  same_length(n, trues, count, "nodes_truenodeids");
  same_length(n, falses, count, "nodes_falsenodeids");
  if (!values.empty()) same_length(n, values, count, "nodes_values");
  if (!missing.empty()) same_length(n, missing, count, "nodes_missing_value_tracks_true");

  std::map<std::pair<int64_t, int64_t>, int32_t> index;  // (tree, node id) -> position
  for (size_t i = 0; i < count; ++i)
    if (!index.emplace(std::make_pair(tree_ids[i], node_ids[i]), static_cast<int32_t>(i)).second)
      bad_model(n, "node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) +
                       " is given twice");
  m.nodes.resize(count);
  std::set<int32_t> children;
  for (size_t i = 0; i < count; ++i) {
    TreeNode& t = m.nodes[i];
    t.mode = legacy_mode(n, modes[i]);
    t.feature = feature_ids[i];
    t.value = values.empty() ? 0.0 : values[i];
    t.missing_goes_true = !missing.empty() && missing[i] != 0;
    if (t.mode == TreeNode::Mode::kLeaf) continue;
    if (t.feature < 0) bad_model(n, "a negative feature index");
    m.features = std::max(m.features, t.feature + 1);
    for (auto [id, slot] : {std::make_pair(trues[i], &t.if_true), std::make_pair(falses[i], &t.if_false)}) {
      auto it = index.find({tree_ids[i], id});
      if (it == index.end())
        bad_model(n, "node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) +
                         " leads to node " + std::to_string(id) + ", which does not exist");
      *slot = it->second;
      children.insert(it->second);
    }
  }
  // Roots: the nodes no branch leads to, in the order the trees come.
  for (size_t i = 0; i < count; ++i)
    if (!children.count(static_cast<int32_t>(i))) m.roots.push_back(static_cast<int32_t>(i));

  // Leaf weights, grouped per leaf in the order given.
  const std::vector<int64_t> w_trees = n.attr_ints(prefix + "_treeids"), w_nodes = n.attr_ints(prefix + "_nodeids"),
                             w_ids = n.attr_ints(prefix + "_ids");
  const std::vector<double> w = reals(n, prefix + "_weights");
  same_length(n, w_nodes, w_trees.size(), prefix + "_nodeids");
  same_length(n, w_ids, w_trees.size(), prefix + "_ids");
  same_length(n, w, w_trees.size(), prefix + "_weights");
  std::vector<std::vector<std::pair<int64_t, double>>> per_leaf(count);
  for (size_t i = 0; i < w_trees.size(); ++i) {
    auto it = index.find({w_trees[i], w_nodes[i]});
    if (it == index.end() || m.nodes[it->second].mode != TreeNode::Mode::kLeaf)
      bad_model(n, prefix + " weight " + std::to_string(i) + " names node " + std::to_string(w_nodes[i]) + " of tree " +
                       std::to_string(w_trees[i]) + ", which is not a leaf");
    if (w_ids[i] < 0) bad_model(n, "a negative " + prefix + " id");
    per_leaf[it->second].emplace_back(w_ids[i], w[i]);
    m.targets = std::max(m.targets, w_ids[i] + 1);
  }
  for (size_t i = 0; i < count; ++i) {
    m.nodes[i].first = static_cast<uint32_t>(m.weights.size());
    m.nodes[i].count = static_cast<uint32_t>(per_leaf[i].size());
    m.weights.insert(m.weights.end(), per_leaf[i].begin(), per_leaf[i].end());
  }
  m.validate(n);
  return m;
}

TreeEnsembleModel model_from_v5(const graph::Node& n) {
  TreeEnsembleModel m;
  const std::vector<int64_t> feature_ids = n.attr_ints("nodes_featureids"), trues = n.attr_ints("nodes_truenodeids"),
                             falses = n.attr_ints("nodes_falsenodeids"), true_leafs = n.attr_ints("nodes_trueleafs"),
                             false_leafs = n.attr_ints("nodes_falseleafs"), leaf_targets = n.attr_ints("leaf_targetids"),
                             roots = n.attr_ints("tree_roots"),
                             missing = n.attr_ints("nodes_missing_value_tracks_true");
  const std::vector<double> splits = tensor_values(n, "nodes_splits", true),
                            modes = tensor_values(n, "nodes_modes", true),
                            leaf_weights = tensor_values(n, "leaf_weights", true),
                            members = tensor_values(n, "membership_values", false);
  const size_t count = splits.size(), leaves = leaf_weights.size();
  same_length(n, feature_ids, count, "nodes_featureids");
  same_length(n, modes, count, "nodes_modes");
  same_length(n, trues, count, "nodes_truenodeids");
  same_length(n, falses, count, "nodes_falsenodeids");
  same_length(n, true_leafs, count, "nodes_trueleafs");
  same_length(n, false_leafs, count, "nodes_falseleafs");
  same_length(n, leaf_targets, leaves, "leaf_targetids");
  if (!missing.empty()) same_length(n, missing, count, "nodes_missing_value_tracks_true");
  if (roots.empty()) bad_model(n, "has no tree_roots");

  // Branches first (their own indices), then the leaves (count + leaf index).
  m.nodes.resize(count + leaves);
  size_t next_member = 0;
  for (size_t i = 0; i < count; ++i) {
    TreeNode& t = m.nodes[i];
    const int mode = static_cast<int>(modes[i]);
    if (mode < 0 || mode > 6) bad_model(n, "nodes_modes has an unknown mode " + std::to_string(mode));
    t.mode = static_cast<TreeNode::Mode>(mode);
    t.feature = feature_ids[i];
    if (t.feature < 0) bad_model(n, "a negative feature index");
    m.features = std::max(m.features, t.feature + 1);
    t.value = splits[i];
    t.missing_goes_true = !missing.empty() && missing[i] != 0;
    auto target = [&](int64_t id, int64_t is_leaf) {
      const size_t limit = is_leaf ? leaves : count;
      if (id < 0 || static_cast<size_t>(id) >= limit)
        bad_model(n, std::string("node ") + std::to_string(i) + " leads to " + (is_leaf ? "leaf " : "node ") +
                         std::to_string(id) + ", which does not exist");
      return static_cast<int32_t>(is_leaf ? count + id : id);
    };
    t.if_true = target(trues[i], true_leafs[i]);
    t.if_false = target(falses[i], false_leafs[i]);
    if (t.mode == TreeNode::Mode::kMember) {
      // This node's set: the next run of membership_values up to a NaN.
      t.first = static_cast<uint32_t>(m.members.size());
      while (next_member < members.size() && !std::isnan(members[next_member])) m.members.push_back(members[next_member++]);
      if (next_member >= members.size() && t.first == m.members.size())
        bad_model(n, "membership_values has no set for a BRANCH_MEMBER node");
      ++next_member;  // the NaN
      t.count = static_cast<uint32_t>(m.members.size() - t.first);
      std::sort(m.members.begin() + t.first, m.members.end());
    }
  }
  for (size_t j = 0; j < leaves; ++j) {
    TreeNode& t = m.nodes[count + j];
    t.first = static_cast<uint32_t>(m.weights.size());
    t.count = 1;
    if (leaf_targets[j] < 0) bad_model(n, "a negative leaf target id");
    m.weights.emplace_back(leaf_targets[j], leaf_weights[j]);
    m.targets = std::max(m.targets, leaf_targets[j] + 1);
  }
  for (int64_t r : roots) {
    if (r < 0 || static_cast<size_t>(r) >= count) bad_model(n, "tree root " + std::to_string(r) + " does not exist");
    // A tree that is one leaf: both branches go to the same leaf.
    const TreeNode& t = m.nodes[r];
    const bool single_leaf = true_leafs[r] && false_leafs[r] && trues[r] == falses[r];
    m.roots.push_back(single_leaf ? t.if_true : static_cast<int32_t>(r));
  }
  m.validate(n);
  return m;
}

}  // namespace twinfer::ml
