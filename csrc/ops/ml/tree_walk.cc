#include "ops/ml/tree_walk.h"

#include <algorithm>

namespace twinfer::ml {

namespace {

BranchKind branch_kind(const TreeEnsembleModel& m) {
  bool any = false;
  TreeNode::Mode mode = TreeNode::Mode::kLeq;
  for (const TreeNode& n : m.nodes) {
    if (n.mode == TreeNode::Mode::kLeaf) continue;
    if (any && n.mode != mode) return BranchKind::kMixed;
    any = true;
    mode = n.mode;
  }
  switch (mode) {
    case TreeNode::Mode::kLeq: return BranchKind::kLeq;
    case TreeNode::Mode::kLt: return BranchKind::kLt;
    case TreeNode::Mode::kGte: return BranchKind::kGte;
    case TreeNode::Mode::kGt: return BranchKind::kGt;
    default: return BranchKind::kMixed;
  }
}

}  // namespace

bool thresholds_are_floats(const TreeEnsembleModel& m) {
  for (const TreeNode& n : m.nodes)
    if (n.mode != TreeNode::Mode::kLeaf && n.mode != TreeNode::Mode::kMember &&
        static_cast<double>(static_cast<float>(n.value)) != n.value && !std::isnan(n.value))
      return false;
  return true;
}

template <typename T>
TreeWalk<T>::TreeWalk(const TreeEnsembleModel& m) : roots_(m.roots), members_(m.members), kind_(branch_kind(m)) {
  const size_t count = m.nodes.size();
  nodes_.resize(count);
  leaf_first_.assign(count, 0);
  leaf_count_.assign(count, 0);
  const bool sets = std::any_of(m.nodes.begin(), m.nodes.end(),
                                [](const TreeNode& n) { return n.mode == TreeNode::Mode::kMember; });
  if (sets) {
    set_first_.assign(count, 0);
    set_count_.assign(count, 0);
  }
  for (size_t i = 0; i < count; ++i) {
    const TreeNode& n = m.nodes[i];
    WalkNode<T>& w = nodes_[i];
    w.mode = n.mode;
    w.missing_goes_true = n.missing_goes_true;
    if (n.mode == TreeNode::Mode::kLeaf) {
      w.value = 0;
      w.feature = 0;
      w.next[0] = w.next[1] = static_cast<int32_t>(i);
      leaf_first_[i] = n.first;
      leaf_count_[i] = n.count;
      continue;
    }
    w.value = static_cast<T>(n.value);
    w.feature = static_cast<int32_t>(n.feature);
    w.next[0] = n.if_false;
    w.next[1] = n.if_true;
    if (n.mode == TreeNode::Mode::kMember) {
      set_first_[i] = n.first;
      set_count_[i] = n.count;
    }
  }
  // Each tree's depth, from its root down (TreeEnsembleModel::validate has
  // ruled out cycles; shared subtrees are measured once).
  std::vector<int> below(count, -1);  // branches from node i down to its deepest leaf
  depth_.reserve(roots_.size());
  for (int32_t root : roots_) {
    std::vector<std::pair<int32_t, bool>> stack{{root, false}};
    while (!stack.empty()) {
      auto [i, expanded] = stack.back();
      const TreeNode& n = m.nodes[static_cast<size_t>(i)];
      if (below[static_cast<size_t>(i)] >= 0) {
        stack.pop_back();
      } else if (n.mode == TreeNode::Mode::kLeaf) {
        below[static_cast<size_t>(i)] = 0;
        stack.pop_back();
      } else if (expanded) {
        below[static_cast<size_t>(i)] =
            1 + std::max(below[static_cast<size_t>(n.if_true)], below[static_cast<size_t>(n.if_false)]);
        stack.pop_back();
      } else {
        stack.back().second = true;
        stack.push_back({n.if_true, false});
        stack.push_back({n.if_false, false});
      }
    }
    depth_.push_back(below[static_cast<size_t>(root)]);
  }
}

template class TreeWalk<float>;
template class TreeWalk<double>;

}  // namespace twinfer::ml
