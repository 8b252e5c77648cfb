// A Scan, or a Loop whose trip count a plan knows, is its body repeated: a
// plan writes the repetitions into the graph (one copy of the body per
// iteration, the states threaded from one copy to the next, the scan inputs
// read by Gather at each position, the per-iteration outputs stacked by
// Unsqueeze + Concat), so they are planned, fused and run like any other
// node instead of through the control-flow kernel's evaluator, which builds
// the body's kernels on every run, on the host (on a device, with a copy
// each way around it). Plans are per shape: a Scan's length is its scan
// inputs' length along their axis; a Loop's trip count folds from shapes or
// from a steering input's value (shape_inputs.h), and its condition must be
// true throughout (absent or a constant true going in, the body passing it
// through or writing true). Linear-attention recurrences (ONNX's
// LinearAttention as its function expands it), Range's function body and
// exporters' `for i in range(n)` loops take this form.
//
// Repetition has a price the loop kernel has not: each copy is planned and
// held as nodes. Loops that would take a plan past kMaxUnrolledNodes stay
// control flow, and so does a loop with a value-dependent trip count or
// condition, or sequences among its values; the node then carries why
// (unroll_refusal), which kernel_report prints beside "control flow runs on
// the host".
#pragma once
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// The most nodes unrolling may add to one plan, nested loops included
// (TWINFER_UNROLL_MAX_NODES overrides it; 0 turns unrolling off, as
// TWINFER_UNROLL_LOOPS=0 does).
constexpr int64_t kMaxUnrolledNodes = 4096;

// kMaxUnrolledNodes, or what TWINFER_UNROLL_MAX_NODES says (0 with
// TWINFER_UNROLL_LOOPS=0), read when a plan is built.
int64_t unroll_budget();

// Whether unrolling is on (TWINFER_UNROLL_LOOPS, TWINFER_UNROLL_MAX_NODES).
bool unrolling_wanted();

// Unrolls every Scan and Loop at g's top level that can be within *budget
// added nodes (lowered by what it adds); returns how many. The caller folds
// afterwards and calls again while it unrolls: a body's own loops are at the
// top level only then. Loops it leaves get the reason in their
// kUnrollRefusalAttr attribute (note_refusals logs them, once).
int unroll_loops(graph::Graph& g, const PassContext& pc, int64_t* budget);

// Whether g has a Scan or Loop at its top level (and unrolling is on).
bool has_loop(const graph::Graph& g);

// Why no plan can unroll node n of g, whatever it knows ("" when one may):
// what the load-time check for allow_cpu_fallback=False and the steering
// inputs ask (Scan-8, a while loop, a body that computes its condition,
// sequences among the values...).
std::string static_unroll_refusal(const graph::Graph& g, const graph::Node& n, int64_t opset);

// Why a Scan or Loop of a plan's graph stayed control flow ("" when no
// reason was recorded).
constexpr const char* kUnrollRefusalAttr = "__not_unrolled";
std::string unroll_refusal(const graph::Node& n);

// Gives the top-level loops that have no reason yet this one (a rewrite
// undone, optimize=False), so that no loop stays control flow unexplained.
void refuse_remaining_loops(graph::Graph& g, const std::string& why);

// One pass-log line per reason the top-level loops stayed control flow.
void note_refusals(const graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
