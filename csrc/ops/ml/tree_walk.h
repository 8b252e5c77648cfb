// The trees of a TreeEnsembleModel in the form the kernels walk them: one
// small node per entry (the threshold in the features' own type, 20 bytes
// for float where tree_model.h's node is 40), and the walk made tree by tree
// over a block of rows, so that one tree's nodes stay in L1 while the rows
// go down it (walking a row through every tree in turn read a forest of
// 300 depth-6 trees, 1.5 MB, from L3 for every row: 1.7-2.8x onnxruntime's
// time on 20,000 rows). A forest whose branches all compare alike (BRANCH_LEQ
// for scikit-learn and LightGBM, BRANCH_LT for XGBoost, BRANCH_GTE for
// CatBoost) is walked by a loop made for that comparison.
//
// A NaN feature takes the false branch (NEQ: the true one) unless the node
// sends missing values the true way. Float features are compared with float
// thresholds only where every threshold is a float (the legacy attributes'
// nodes_values are); otherwise as doubles.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/ml/tree_model.h"

namespace twinfer::ml {

template <typename T>
struct WalkNode {
  T value;                  // the threshold
  int32_t feature;          // a leaf: 0 (any feature; it goes back to itself)
  int32_t next[2];          // the false child, then the true one; a leaf: itself, twice
  TreeNode::Mode mode;
  uint8_t missing_goes_true;
};

// The comparison every branch of a forest makes, where they all make the
// same one (kMixed otherwise, or where a branch tests set membership).
enum class BranchKind : uint8_t { kLeq, kLt, kGte, kGt, kMixed };

template <typename T>
class TreeWalk {
 public:
  TreeWalk() = default;
  explicit TreeWalk(const TreeEnsembleModel& m);

  // Rows [0, rows) of x (row r at x + r * stride) down every tree, tree by
  // tree: on_leaf(r, first, count) with each row's leaf's weights (the
  // model's weights[first, first + count)), for each row in the trees'
  // order. Rows at a time: a few dozen (the caller's block).
  template <typename OnLeaf>
  void walk(const T* x, int64_t rows, int64_t stride, OnLeaf&& on_leaf) const {
    switch (kind_) {
      case BranchKind::kLeq: return walk_as<BranchKind::kLeq>(x, rows, stride, on_leaf);
      case BranchKind::kLt: return walk_as<BranchKind::kLt>(x, rows, stride, on_leaf);
      case BranchKind::kGte: return walk_as<BranchKind::kGte>(x, rows, stride, on_leaf);
      case BranchKind::kGt: return walk_as<BranchKind::kGt>(x, rows, stride, on_leaf);
      case BranchKind::kMixed: return walk_as<BranchKind::kMixed>(x, rows, stride, on_leaf);
    }
  }

 private:
  // Rows walked side by side, and the deepest tree walked that way.
  static constexpr int kLanes = 8;
  static constexpr int kMaxLockstepDepth = 32;

  template <BranchKind K>
  bool goes_true(const WalkNode<T>& n, T v) const;

  // A tree at a time, kLanes rows down it in lockstep for the tree's depth
  // (a row at a leaf stays there: it points to itself): no branch on the
  // comparisons, and the lanes' loads overlap. A row at a time, branching,
  // mispredicted about every other level. Mixed comparisons and very deep
  // trees go a row at a time to their leaf.
  template <BranchKind K, typename OnLeaf>
  void walk_as(const T* x, int64_t rows, int64_t stride, OnLeaf& on_leaf) const {
    const WalkNode<T>* base = nodes_.data();
    for (size_t t = 0; t < roots_.size(); ++t) {
      const int32_t root = roots_[t];
      const int depth = depth_[t];
      int64_t r = 0;
      if (K != BranchKind::kMixed && depth <= kMaxLockstepDepth)
        for (; r + kLanes <= rows; r += kLanes) lockstep<K, kLanes>(x + r * stride, r, stride, root, depth, on_leaf);
      // The rest a row at a time, branching: one row alone in lockstep waits
      // for each level's loads, where predicted branches run ahead (a single
      // row through 200 LightGBM trees took 2.5x longer in lockstep).
      for (; r < rows; ++r) {
        const T* row = x + r * stride;
        const WalkNode<T>* n = base + root;
        while (n->mode != TreeNode::Mode::kLeaf)
          n = base + (goes_true<K>(*n, row[n->feature]) ? n->next[1] : n->next[0]);
        leaf(r, static_cast<int32_t>(n - base), on_leaf);
      }
    }
  }

  // Rows r0.. r0 + L - 1 (the first at x) down the tree at root, L at once.
  template <BranchKind K, int L, typename OnLeaf>
  void lockstep(const T* x, int64_t r0, int64_t stride, int32_t root, int depth, OnLeaf& on_leaf) const {
    const WalkNode<T>* base = nodes_.data();
    int32_t at[L];
    for (int l = 0; l < L; ++l) at[l] = root;
    for (int step = 0; step < depth; ++step) {
      bool moved = false;
      for (int l = 0; l < L; ++l) {
        const WalkNode<T>& n = base[at[l]];
        const int32_t next = n.next[goes_true<K>(n, x[l * stride + n.feature])];
        moved |= next != at[l];
        at[l] = next;
      }
      // Every lane at a leaf (a leaf leads to itself): the rest of the
      // tree's depth is for other rows. LightGBM's leaf-wise trees are
      // half as deep along most paths as their deepest one.
      if (!moved) break;
    }
    for (int l = 0; l < L; ++l) leaf(r0 + l, at[l], on_leaf);
  }

  template <typename OnLeaf>
  void leaf(int64_t r, int32_t node, OnLeaf& on_leaf) const {
    on_leaf(r, leaf_first_[static_cast<size_t>(node)], leaf_count_[static_cast<size_t>(node)]);
  }

  std::vector<WalkNode<T>> nodes_;
  std::vector<int32_t> roots_;
  std::vector<int> depth_;  // per tree: the most branches from its root to a leaf
  // Leaves' weights: node i's are the model's weights[leaf_first_[i], + leaf_count_[i]).
  std::vector<uint32_t> leaf_first_, leaf_count_;
  // BRANCH_MEMBER nodes' sets: node i's is members_[set_first_[i], + set_count_[i])
  // (both empty when no node tests membership).
  std::vector<double> members_;
  std::vector<uint32_t> set_first_, set_count_;
  BranchKind kind_ = BranchKind::kMixed;
};

// Whether every threshold of m is a float (then float features compare
// with float thresholds exactly as with doubles).
bool thresholds_are_floats(const TreeEnsembleModel& m);

template <typename T>
template <BranchKind K>
inline bool TreeWalk<T>::goes_true(const WalkNode<T>& n, T v) const {
  // NaN compares false: the false branch, unless the node sends missing
  // values the true way (NEQ: true).
  // (Bitwise: no branch to mispredict.)
  const bool missing = n.missing_goes_true & (v != v);
  if constexpr (K == BranchKind::kLeq) return (v <= n.value) | missing;
  if constexpr (K == BranchKind::kLt) return (v < n.value) | missing;
  if constexpr (K == BranchKind::kGte) return (v >= n.value) | missing;
  if constexpr (K == BranchKind::kGt) return (v > n.value) | missing;
  if (std::isnan(v)) return n.missing_goes_true || n.mode == TreeNode::Mode::kNeq;
  switch (n.mode) {
    case TreeNode::Mode::kLeq: return v <= n.value;
    case TreeNode::Mode::kLt: return v < n.value;
    case TreeNode::Mode::kGte: return v >= n.value;
    case TreeNode::Mode::kGt: return v > n.value;
    case TreeNode::Mode::kEq: return v == n.value;
    case TreeNode::Mode::kNeq: return v != n.value;
    case TreeNode::Mode::kMember: {
      const size_t i = static_cast<size_t>(&n - nodes_.data());
      const auto first = members_.begin() + set_first_[i], last = first + set_count_[i];
      return std::binary_search(first, last, static_cast<double>(v));
    }
    case TreeNode::Mode::kLeaf: break;
  }
  return false;
}

extern template class TreeWalk<float>;
extern template class TreeWalk<double>;

}  // namespace twinfer::ml
