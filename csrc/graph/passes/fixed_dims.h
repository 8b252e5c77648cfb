// Shapes that change in a few dims from plan to plan: a decoder's past grows
// by one token a step while the batch, the new tokens' count and the heads
// stay. Each new shape costs a plan, and most of a plan's work on such
// models is refolding the whole model's shape arithmetic (hundreds of
// Shape -> Gather -> Concat nodes). What of it reads only the dims that stay
// folds once here, on a copy of the graph with those dims bound and the
// changing ones left symbolic; the plans of every value of the changing dims
// start from that smaller graph (runtime/engine.cc) and fold the rest.
//
// The result is the graph the plans would have folded to anyway: only nodes
// whose inputs are all known fold (infer_and_fold), so nothing is decided
// from a dim that is still symbolic.
#pragma once
#include <vector>

#include "core/shape.h"
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Per graph input, per dim: whether it changed between two input shape
// lists of the same inputs (ranks that differ count as every dim changed).
using DimMask = std::vector<std::vector<char>>;
DimMask changed_dims(const std::vector<Shape>& a, const std::vector<Shape>& b);
bool any_dim(const DimMask& m);
// `shapes` with the dims `varying` marks as -1: what graphs bound by
// bind_fixed_dims are looked up by.
std::vector<Shape> mask_dims(const std::vector<Shape>& shapes, const DimMask& varying);

// Binds every input dim of `g` that `varying` does not mark to its value in
// `shapes` (one per g.inputs), keeps the marked ones as the model declared
// them (its symbol, or unknown), then folds and compacts. Throws what shape
// inference throws for these dims (the caller then plans from `g` unbound).
void bind_fixed_dims(graph::Graph& g, const std::vector<Shape>& shapes, const DimMask& varying,
                     const PassContext& pc);

}  // namespace twinfer::passes
