// Tree ensembles (TreeEnsemble, TreeEnsembleRegressor, TreeEnsembleClassifier)
// in one flat form: every node, branch or leaf, in one array; a branch
// compares one feature with its value (or looks it up in a set) and names
// the nodes to go to; a leaf holds (target, weight) pairs (tree_walk.h walks
// them). The three ops only differ in how their attributes say this and how
// they add up the leaves.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace twinfer::ml {

enum class Aggregate { kAverage, kSum, kMin, kMax };

struct TreeNode {
  enum class Mode : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember, kLeaf };
  Mode mode = Mode::kLeaf;
  bool missing_goes_true = false;  // a NaN feature takes the true branch
  int64_t feature = 0;
  double value = 0;                // the threshold
  int32_t if_true = -1, if_false = -1;
  uint32_t first = 0, count = 0;   // leaf: its weights; kMember: its set (sorted)
};

struct TreeEnsembleModel {
  std::vector<TreeNode> nodes;
  std::vector<int32_t> roots;                       // one per tree
  std::vector<std::pair<int64_t, double>> weights;  // leaves' (target, weight)
  std::vector<double> members;                      // sets of kMember branches
  int64_t features = 0;                             // 1 + the largest feature index
  int64_t targets = 0;                              // 1 + the largest target index

  // Checks that every branch leads somewhere in the array and no walk can
  // loop (depth bounded by the node count); throws kModelFormat naming `n`.
  void validate(const graph::Node& n) const;
};

// From the ai.onnx.ml 1/3 attributes (nodes_*, and target_* or class_* per
// `prefix`).
TreeEnsembleModel model_from_legacy(const graph::Node& n, const std::string& prefix);
// From the ai.onnx.ml 5 TreeEnsemble attributes.
TreeEnsembleModel model_from_v5(const graph::Node& n);

}  // namespace twinfer::ml
