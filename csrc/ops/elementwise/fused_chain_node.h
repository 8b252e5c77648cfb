// Host side of com.twinfer::FusedElementwise (fused_chain.h): reading and
// validating a node's program, naming its ops, and the broadcast geometry
// of up to kChainMaxInputs operands. Shared by the shape rule, the CPU
// kernel, the CUDA kernel and the pass that builds the node.
#pragma once
#include <string>
#include <vector>

#include "core/shape.h"
#include "graph/ir.h"
#include "ops/elementwise/fused_chain.h"
#include "ops/elementwise/offset_calc.h"

namespace twinfer::ew {

inline constexpr const char* kFusedElementwiseOp = "FusedElementwise";

// The op's name as the node's `ops` attribute spells it ("GeluTanh"...), and
// back; false for a name the chain does not know.
const char* chain_op_name(ChainOp op);
bool chain_op_from_name(const std::string& name, ChainOp* op);

// The node's program, checked: op names known, operands earlier registers,
// a second operand exactly for the two-operand ops, at most kChainMaxInputs
// inputs and kChainMaxSteps steps. Throws kModelFormat naming the node
// otherwise (a model may carry this op, so nothing here is trusted).
ChainProgram chain_program(const graph::Node& node);

// "Sub, Mul, Add": the steps' ops, for kernel names.
std::string chain_summary(const ChainProgram& p);

// Offsets of the inputs (shapes broadcast to `out`) for a linear output
// index: size-1 output dims dropped, neighbouring dims merged where every
// input walks them contiguously or not at all. `fits` is false when more
// than kMaxOffsetDims dims remain, or more than kChainMaxInputs inputs.
OffsetCalc<kChainMaxInputs> chain_offsets(const std::vector<Shape>& inputs, const Shape& out, bool* fits);

// Per input: 1 when it has the output's elements in the output's order, 0
// when it is a single value, -1 otherwise (it needs the offsets). A chain
// whose inputs are all 0 or 1 runs without index math.
std::vector<int> chain_flat_kinds(const std::vector<Shape>& inputs, const Shape& out);

}  // namespace twinfer::ew
