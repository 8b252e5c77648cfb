// CPU plans: MatMul(a, Transpose(b)) whose Transpose only swaps the last two
// axes becomes Einsum("...ij,...kj->...ik", a, b), which oneDNN reads with
// b's strides instead of a transposed copy (backends/cpu/einsum.cc): an
// attention's scores against a key cache, Q x K^T, no longer copy the whole
// cache each step (docs/performance.md, "FlexAttention"). Only where the
// Transpose has no other reader, both operands have one rank of at least 2,
// and b holds 4 MiB or more: the Einsum's kernel is built per size, where
// the MatMul's serves every size a growing decoder cache takes (a decode
// loop over a growing cache got slower when every transpose went: one
// kernel built per new length). TWINFER_MATMUL_READS_TRANSPOSED=0 turns it off.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

int matmul_reads_transposed(graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
