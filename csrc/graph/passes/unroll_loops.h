// A Scan, or a Loop whose trip count a plan knows, is its body repeated:
// a device plan writes the repetitions into the graph (one copy of the body
// per iteration, the states threaded from one copy to the next, the scan
// inputs read by Gather at each position, the per-iteration outputs
// stacked by Unsqueeze + Concat), so they are placed, fused and run on the
// device like any other node instead of through the host's control-flow
// evaluator, with a copy to the host and back around it. Plans are per
// shape: a Scan's length is its scan inputs' length along their axis; a
// Loop's trip count folds from shapes or from a steering input's value
// (shape_inputs.h), and its condition must be true throughout (absent or a
// constant true going in, the body passing it through or writing true).
// Linear-attention recurrences (ONNX's LinearAttention as its function
// expands it), Range's function body and exporters' `for i in range(n)`
// loops take this form.
//
// Repetition has a price the host's loop has not: each copy is planned and
// held as nodes. A body repeated past kMaxUnrolledNodes stays control flow,
// and so does a loop with a value-dependent trip count or condition, or
// sequences among its values; the node then carries why (unroll_refusal),
// which kernel_report prints beside "control flow runs on the host".
#pragma once
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// The most nodes unrolling may add for one loop (TWINFER_UNROLL_MAX_NODES
// overrides it; 0 turns unrolling off, as TWINFER_UNROLL_LOOPS=0 does).
constexpr int64_t kMaxUnrolledNodes = 4096;

// Unrolls every Scan and Loop at g's top level that can be; returns how
// many. The caller folds afterwards and calls again while it unrolls: a
// body's own loops are at the top level only then. Loops it leaves get the
// reason in their kUnrollRefusalAttr attribute.
int unroll_loops(graph::Graph& g, const PassContext& pc);

// Whether unrolling is on (TWINFER_UNROLL_LOOPS, TWINFER_UNROLL_MAX_NODES).
bool unrolling_wanted();

// Whether g has a Scan or Loop at its top level (and unrolling is on).
bool has_loop(const graph::Graph& g);

// Why a Scan or Loop of a plan's graph stayed control flow ("" when no
// reason was recorded).
constexpr const char* kUnrollRefusalAttr = "__not_unrolled";
std::string unroll_refusal(const graph::Node& n);

}  // namespace twinfer::passes
