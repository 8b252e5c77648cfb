// Shape inputs: small graph inputs whose values decide shapes, like
// TensorRT's shape tensors. A Range's bounds, a window's size, the target of
// a Reshape or ConstantOfShape fed by the caller: without their values no
// plan can size anything, and a run would go to the host evaluator. The
// engine keys its plans by these inputs' values as well as by the inputs'
// shapes, and folds them as constants into each plan (runtime/engine.cc).
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// The most elements a shape input's value may have for a plan to be keyed
// on it (a shape's rank is far below this): a longer value at run time, or
// a rank-1 input declared longer, leaves the run to the host evaluator, as
// before, instead of copying and comparing a data tensor on every run.
constexpr int64_t kMaxShapeInputElements = 64;

// Whether graph input `v` may be a shape input: a number or a short list
// (rank 0 or 1, at most kMaxShapeInputElements where the length is known)
// of a numeric type.
bool shape_input_type(const graph::Value& v);

// Indices into g.inputs of the shape inputs: those of shape_input_type that
// a node's shape rule asked for the value of (through any chain of nodes
// other than Shape / Size, whose outputs a plan knows from shapes alone) and
// whose outputs stayed unsized without it. NonZero, Compress, Unique and
// NonMaxSuppression ask for their data, not a size: never keyed on. `g` has its load-time types
// (symbolic shapes); it is not changed.
std::vector<int> shape_input_indices(const graph::Graph& g, int64_t opset);

// Steering inputs: a flag or mode (an integer or bool scalar) that an If's
// condition is computed from, with nothing but constants and shapes beside
// it (silero VAD's `If(Equal(sr, 16000))`). A plan keyed by their values
// folds the condition, and the If becomes its branch (inline_if.h): the
// whole model on the device instead of the branch on the host. Keying is an
// option, not a need (the If runs either way): the engine stops keying on
// them once they have taken more than kMaxSteeringValues values (a step
// counter would otherwise build a plan per run).
constexpr size_t kMaxSteeringValues = 8;
// With `loops` (unrolling on: unroll_loops.h), a Loop's trip count and
// condition steer too, where nothing else stops it from unrolling: keyed by
// their values, the plan knows how many times to repeat the body.
bool steering_input_type(const graph::Value& v);  // rank 0 or [1], integer or bool
std::vector<int> steering_input_indices(const graph::Graph& g, bool loops, int64_t opset);  // indices into g.inputs

}  // namespace twinfer::passes
