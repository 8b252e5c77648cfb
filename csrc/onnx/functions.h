// Model-local functions (FunctionProto, ModelProto field 25): what the
// TorchScript exporter writes for export_modules_as_functions, and what
// onnxscript writes for a script that calls another. A node whose domain and
// op_type name a function is replaced by the function's body, its values
// renamed apart per call, the call's inputs, outputs and attributes bound
// (ref_attr_name), calls inside the body expanded in turn. Nothing else in
// twinfer ever sees a function.
#pragma once
#include <vector>

#include "onnx/parse.h"

namespace twinfer::onnx::detail {

// FunctionProto -> ctx.functions. `model_opsets` gains the domains a function
// imports that the model does not; a function importing another version of a
// domain the model imports is refused when it is called.
void register_function(wire::Reader r, ParseContext& ctx, std::map<std::string, int64_t>& model_opsets);

// Replaces every call of a local function in `nodes` by its body
// (ctx.model_opsets: the versions the body's ops are read at).
void expand_function_calls(std::vector<NodeInfo>& nodes, ParseContext& ctx);

}  // namespace twinfer::onnx::detail
