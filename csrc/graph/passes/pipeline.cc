#include "graph/passes/pipeline.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "graph/passes/common_subexpressions.h"
#include "graph/passes/eliminate_identity.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/fold_conv_add.h"
#include "graph/passes/fold_conv_bn.h"
#include "graph/passes/fold_pad_conv.h"
#include "graph/passes/fuse.h"
#include "graph/passes/fuse_attention.h"
#include "graph/passes/fuse_attention_softmax.h"
#include "graph/passes/matmul_reads_grouped_heads.h"
#include "graph/passes/string_labels.h"
#include "graph/passes/transposes_in_4d.h"
#include "graph/passes/matmul_reads_transposed.h"
#include "graph/passes/fuse_gelu.h"
#include "graph/passes/fuse_hard_swish.h"
#include "graph/passes/fuse_matmul_integer.h"
#include "graph/passes/fuse_qdq.h"
#include "graph/passes/fuse_qdq_binary.h"
#include "graph/passes/fuse_qlinear.h"
#include "graph/passes/infer_and_fold.h"
#include "graph/passes/expand_flex_attention.h"
#include "graph/passes/inline_if.h"
#include "graph/passes/fp8_gemm.h"
#include "graph/passes/int8_channels_last.h"
#include "graph/passes/int8_movement.h"
#include "graph/passes/smooth_activations.h"
#include "graph/passes/unroll_loops.h"
#include "graph/passes/weight_only_int8.h"
#include "ops/channel_block.h"

#include <utility>

namespace twinfer::passes {

namespace {

// precision="int8" quantizes float32 layers: a model exported after .half()
// has none, and loaded as "int8" quantized nothing and said nothing.
void refuse_16_bit_layers_for_int8(const graph::Graph& g) {
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) continue;
    if (n.op_type != "Conv" && n.op_type != "ConvTranspose" && n.op_type != "Gemm" && n.op_type != "MatMul") continue;
    const DType t = g.values[n.inputs[0]].dtype;
    if (t == DType::kFloat16 || t == DType::kBFloat16)
      throw Error(ErrorKind::kInvalidArgument,
                  std::string("precision='int8' quantizes float32 layers, and this model's are ") + dtype_name(t) +
                      " (node '" + n.name + "', " + n.op_type + "; exported after .half()?): export it in float32 "
                      "to quantize it, or load it without precision= to run it as it is");
  }
}

// Calibration keys values by the original model's names; where a pass made a
// Conv read another value (a folded zero Pad's input), that value takes the
// settings. Zero padding changes neither |x|'s maximum nor the sign, and the
// padded value's channel means are what the Conv (now padding itself) sees.
void follow_renames(const std::map<std::string, std::string>& renamed, QuantizeSpec* qs) {
  for (const auto& [from, to] : renamed) {
    auto a = qs->activation_amax.find(from);
    if (a == qs->activation_amax.end() || qs->activation_amax.count(to)) continue;
    qs->activation_amax[to] = a->second;
    if (qs->unsigned_activations.count(from)) qs->unsigned_activations.insert(to);
    if (qs->per_token.count(from)) qs->per_token.insert(to);
    auto sm = qs->smoothing.find(from);
    if (sm != qs->smoothing.end() && !qs->smoothing.count(to)) qs->smoothing[to] = sm->second;
    auto m = qs->activation_channel_mean.find(from);
    if (m != qs->activation_channel_mean.end()) qs->activation_channel_mean[to] = m->second;
  }
}

// Whether the graph still type-checks after the rewrite `name`. Tests make
// one fail here (TWINFER_TEST_FAIL_REWRITE=<name>) to see it undone: no
// rewrite is known to fail on its own.
void check_rewrite(graph::Graph& g, PassContext& pc, const char* name) {
  const char* fail = std::getenv("TWINFER_TEST_FAIL_REWRITE");
  if (fail && std::strcmp(fail, name) == 0)
    throw Error(ErrorKind::kShape, "TWINFER_TEST_FAIL_REWRITE=" + std::string(name));
  infer_and_fold(g, pc, false);
}

// Runs one rewrite pass and keeps what it did only if the whole graph still
// type-checks afterwards; otherwise the graph goes back to how it was and the
// log says why. Each pass already checks the nodes it fuses
// (rewrite_check.h); this catches what such a check cannot see, a rewrite
// that makes some node further down fail. A rewrite never turns a loadable
// model into an error.
template <typename Pass>
int keep_if_valid(graph::Graph& g, PassContext& pc, const char* name, Pass&& pass) {
  graph::Graph before = g;
  const size_t log_mark = pc.log ? pc.log->size() : 0;
  const int changed = pass();
  if (!changed) return 0;
  try {
    check_rewrite(g, pc, name);
    return changed;
  } catch (const Error& e) {
    g = std::move(before);
    if (pc.log) pc.log->resize(log_mark);
    pc.note(std::string(name) + ": undone, the rewritten graph failed to type-check (" + e.what() + ")");
    return 0;
  }
}

// The first node with an output whose shape is not known (a plan's shapes
// then need input values), as node index and value id.
bool first_unknown(const graph::Graph& g, int* node, int* value) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0 && (!g.values[o].has_shape || !sym_shape_known(g.values[o].shape))) {
        if (node) *node = static_cast<int>(i);
        if (value) *value = o;
        return true;
      }
  return false;
}

// Ifs with constant conditions inlined, and folded after each round, whose
// inlined branches' own Ifs may then have constant conditions (a few rounds:
// exporters nest them one or two deep).
int inline_ifs(graph::Graph& g, PassContext& pc) {
  int total = 0;
  for (int round = 0; round < 8; ++round) {
    const int n = inline_constant_ifs(g, pc);
    if (!n) break;
    total += n;
    infer_and_fold(g, pc, true);
  }
  return total;
}

// Scans and Loops repeated into the graph (graph/passes/unroll_loops.h),
// folded after each round: a body's own loops, and the trip counts they
// compute, are at the top level only then. One budget of nodes for them all.
int unroll_all_loops(graph::Graph& g, PassContext& pc) {
  int64_t budget = unroll_budget();
  int total = 0;
  for (int round = 0; round < 8; ++round) {
    const int n = unroll_loops(g, pc, &budget);
    if (!n) break;
    total += n;
    infer_and_fold(g, pc, true);
  }
  refuse_remaining_loops(g, "nested more than 8 deep");
  return total;
}

// After Ifs became their branches: the load's rewrites that are safe to run
// again (each matches only what it has not rewritten yet), for the branches'
// nodes, which the load never saw (it does not enter subgraphs).
void rewrite_inlined_branches(graph::Graph& g, PassContext& pc) {
  keep_if_valid(g, pc, "eliminate_identity", [&] { return eliminate_identity(g, pc); });
  std::map<std::string, std::string> renamed;  // calibration's names: nothing here is calibrated
  keep_if_valid(g, pc, "fold_pad_conv", [&] { return fold_pad_into_conv(g, pc, &renamed); });
  keep_if_valid(g, pc, "fold_conv_bn", [&] { return fold_conv_bn(g, pc); });
  keep_if_valid(g, pc, "fold_conv_add", [&] { return fold_conv_add(g, pc); });
  keep_if_valid(g, pc, "fuse_gelu", [&] { return fuse_gelu(g, pc); });
  keep_if_valid(g, pc, "fuse_hard_swish", [&] { return fuse_hard_swish(g, pc); });
  g.remove_dead();
}

}  // namespace

void run_load_passes(graph::Graph& g, const LoadPassOptions& options, PassContext& pc) {
  const bool fold = options.optimize;
  // A model quantized by another tool (QDQ): fuse its int8 patterns before
  // constant folding turns DequantizeLinear(int8 weights) back into floats.
  const bool imported_qdq = options.optimize && (has_dequantize(g) || has_qlinear_layer(g));
  if (imported_qdq) {
    infer_and_fold(g, pc, false);
    keep_if_valid(g, pc, "int8_movement", [&] { return int8_movement(g, pc); });
    if (pass_enabled("TWINFER_INT8_MAXPOOL"))
      keep_if_valid(g, pc, "quantize_before_maxpool", [&] { return quantize_before_maxpool(g, pc); });
    keep_if_valid(g, pc, "fuse_qdq", [&] { return fuse_qdq(g, pc); });
    // the QOperator format's QLinearConv / QLinearMatMul onto the same kernels
    if (pass_enabled("TWINFER_FUSE_QLINEAR"))
      keep_if_valid(g, pc, "fuse_qlinear", [&] { return fuse_qlinear(g, pc); });
    keep_if_valid(g, pc, "fuse_fp8_qdq", [&] { return fuse_fp8_qdq(g, pc); });
    // before folding turns DQ(quantized bias) into a float constant
    keep_if_valid(g, pc, "fuse_qdq_binary", [&] { return fuse_qdq_binary(g, pc); });
  }
  int folded = infer_and_fold(g, pc, fold);
  if (folded) pc.note("constant folding: folded " + std::to_string(folded) + " nodes");
  // An If whose condition folded is its branch (graph/passes/inline_if.h).
  if (fold && has_constant_if(g)) keep_if_valid(g, pc, "inline_if", [&] { return inline_ifs(g, pc); });
  // FlexAttention as MatMul, Softmax, MatMul (graph/passes/expand_flex_attention.h), folded
  // at once: its shape steps are constants where the shapes are known.
  if (fold && has_flex_attention(g))
    keep_if_valid(g, pc, "expand_flex_attention", [&] {
      const int n = expand_flex_attention(g, pc);
      if (n) infer_and_fold(g, pc, true);
      return n;
    });
  if (imported_qdq)  // again: a Pad's fill, DQ(Q(0)), is a constant only now
    keep_if_valid(g, pc, "int8_movement", [&] { return int8_movement(g, pc); });
  std::map<std::string, std::string> renamed;  // folded Pad outputs -> the values Convs read instead
  if (options.optimize) {
    keep_if_valid(g, pc, "eliminate_identity", [&] { return eliminate_identity(g, pc); });
    // classifiers' string labels as indices and a LabelEncoder: the classifier in a plan
    keep_if_valid(g, pc, "string_labels", [&] { return string_labels_as_indices(g, pc); });
    if (pass_enabled("TWINFER_COMMON_SUBEXPRESSIONS"))
      keep_if_valid(g, pc, "common_subexpressions", [&] { return eliminate_common_subexpressions(g, pc); });
    std::map<std::string, std::string> pad_renames;
    if (keep_if_valid(g, pc, "fold_pad_conv", [&] { return fold_pad_into_conv(g, pc, &pad_renames); }))
      renamed = std::move(pad_renames);
    // before quantizing: the folded weights are what int8 must hold
    keep_if_valid(g, pc, "fold_conv_bn", [&] { return fold_conv_bn(g, pc); });
    keep_if_valid(g, pc, "fold_conv_add", [&] { return fold_conv_add(g, pc); });
    keep_if_valid(g, pc, "fuse_gelu", [&] { return fuse_gelu(g, pc); });
    keep_if_valid(g, pc, "fuse_hard_swish", [&] { return fuse_hard_swish(g, pc); });
    // onnxruntime's quantize_dynamic files: MatMulInteger's int32 product
    // rescaled to float in oneDNN's epilogue
    keep_if_valid(g, pc, "fuse_matmul_integer", [&] { return fuse_matmul_integer(g, pc); });
  }
  if (pc.precision == Precision::kINT8) {
    QuantizeSpec qs = options.int8;
    follow_renames(renamed, &qs);
    smooth_activations(g, qs, pc);  // SmoothQuant's scales, from calibration, into the weights
    if (insert_qdq(g, qs, pc) == 0) refuse_16_bit_layers_for_int8(g);
    infer_and_fold(g, pc, false);  // types for the new Q/DQ values
    if (options.optimize) {
      if (pass_enabled("TWINFER_INT8_MAXPOOL"))
        keep_if_valid(g, pc, "quantize_before_maxpool", [&] { return quantize_before_maxpool(g, pc); });
      keep_if_valid(g, pc, "fuse_qdq", [&] { return fuse_qdq(g, pc); });
      // residual Adds whose inputs insert_qdq quantized
      keep_if_valid(g, pc, "fuse_qdq_binary", [&] { return fuse_qdq_binary(g, pc); });
    }
  }
  if (options.optimize) {
    keep_if_valid(g, pc, "fuse", [&] { return fuse_all(g, pc); });
    keep_if_valid(g, pc, "int8_channels_last", [&] { return int8_channels_last(g, pc); });
  }
  // precision="fp8": after fusion, so a fused bias and activation go along.
  if (pc.precision == Precision::kFP8)
    keep_if_valid(g, pc, "fp8", [&] {
      return fp8_gemms(g, options.int8.activation_amax, options.int8.keep_float, pc);
    });
  if (options.int8_weights)
    keep_if_valid(g, pc, "weights int8", [&] { return quantize_weights_int8(g, pc); });
  if (options.optimize || options.int8_weights) {
    g.remove_dead();
    infer_and_fold(g, pc, fold);
  }
}

int run_steered_passes(graph::Graph& g, bool optimize, PassContext& pc) {
  infer_and_fold(g, pc, optimize);
  if (!optimize) return 0;
  const int inlined = has_constant_if(g) ? keep_if_valid(g, pc, "inline_if", [&] { return inline_ifs(g, pc); }) : 0;
  if (!inlined) return 0;
  g.remove_dead();
  rewrite_inlined_branches(g, pc);
  keep_if_valid(g, pc, "fuse", [&] { return fuse_all(g, pc); });
  g.remove_dead();
  infer_and_fold(g, pc, true);
  return inlined;
}

namespace {

// A plan-time rewrite that failed to type-check where there is no copy of
// the graph to go back to (PlanPassOptions::rebuild).
struct RewriteFailed {
  std::string pass;
  std::string why;
};

// keep_if_valid, or with options.rebuild: no copy first, and a rewrite that
// fails throws RewriteFailed for run_plan_passes to start again without it.
template <typename Pass>
int keep_or_restart(graph::Graph& g, PassContext& pc, const PlanPassOptions& options,
                    const std::set<std::string>& failed, const char* name, Pass&& pass) {
  if (failed.count(name)) return 0;
  if (!options.rebuild) return keep_if_valid(g, pc, name, pass);
  const int changed = pass();
  if (!changed) return 0;
  try {
    check_rewrite(g, pc, name);
  } catch (const Error& e) {
    throw RewriteFailed{name, e.what()};
  }
  return changed;
}

PlanPassResult plan_passes(graph::Graph& g, const PlanPassOptions& options, PassContext& pc,
                           const std::set<std::string>& failed) {
  PlanPassResult r;
  // Concrete input shapes: Shape -> Gather -> Concat -> Reshape chains fold.
  infer_and_fold(g, pc, options.optimize);
  // What folded may make repeated chains the same (each layer's mask, from
  // its own Shape, now from the same constants): one copy runs.
  if (options.optimize && pass_enabled("TWINFER_COMMON_SUBEXPRESSIONS") && eliminate_common_subexpressions(g, pc))
    g.remove_dead();
  g.compact();
  // Conditions that folded with them (or with a steering input's value):
  // those Ifs become their branches, which the load-time rewrites never saw
  // (they do not enter subgraphs), so the idempotent ones run on them here.
  // Kept only where every shape stays known: a branch whose shapes need
  // values would send the whole plan to the evaluator, the If alone did not.
  if (options.optimize && has_constant_if(g)) {
    graph::Graph before = g;
    if (keep_if_valid(g, pc, "inline_if", [&] { return inline_ifs(g, pc); })) {
      g.remove_dead();
      if (first_unknown(g, nullptr, nullptr) && !first_unknown(before, nullptr, nullptr)) {
        g = std::move(before);
        pc.note("inline_if: undone, a branch's shapes need input values");
      } else {
        rewrite_inlined_branches(g, pc);  // fuse_all comes below, for fp32
      }
    }
  }
  // Loops whose trip counts the plan knows become their bodies repeated, so
  // they are planned (on a device, run there: the host's evaluator needs a
  // copy each way). Not kept where shapes that were known stop being known.
  // Every loop left says why (kernel_report; a device plan without CPU
  // fallback names it).
  if (has_loop(g)) {
    if (!options.optimize) {
      refuse_remaining_loops(g, "the engine was loaded with optimize=False");
    } else {
      graph::Graph before = g;
      if (keep_if_valid(g, pc, "unroll_loops", [&] { return unroll_all_loops(g, pc); })) {
        g.remove_dead();
        if (first_unknown(g, nullptr, nullptr) && !first_unknown(before, nullptr, nullptr)) {
          g = std::move(before);
          refuse_remaining_loops(g, "the repeated bodies' shapes need input values");
        } else {
          rewrite_inlined_branches(g, pc);
        }
      } else {
        refuse_remaining_loops(g, "the unrolled graph failed to type-check (see the plan's pass log)");
      }
      note_refusals(g, pc);
    }
  }

  if (first_unknown(g, &r.unknown_node, &r.unknown_value)) return r;

  // Both attention rewrites start at a Softmax: without one, neither is
  // tried (keep_if_valid's copy of the graph is a good part of what a plan
  // for new shapes costs).
  const bool softmax = std::any_of(g.nodes.begin(), g.nodes.end(), [](const graph::Node& n) {
    return n.domain.empty() && n.op_type == "Softmax";
  });
  // K^T spelled in 3-D (torch's dynamo exporter) as the 4-D Transpose the
  // attention passes know.
  if (options.optimize && softmax)
    keep_or_restart(g, pc, options, failed, "transposes_in_4d", [&] { return transposes_in_4d(g, pc); });
  // Attention on a device: one op, its scores never in memory (concrete
  // shapes prove the operands are [B, H, S, D]).
  if (options.optimize && softmax && pc.backend != Backend::kCPU)
    keep_or_restart(g, pc, options, failed, "fuse_attention", [&] { return fuse_attention(g, pc); });
  // On the CPU: the GEMMs stay oneDNN's, the scaling, mask, softmax and NaN
  // guard between them become one op.
  if (options.optimize && softmax && pc.backend == Backend::kCPU)
    keep_or_restart(g, pc, options, failed, "fuse_attention_softmax", [&] { return fuse_attention_softmax(g, pc); });

  // Activations between convolutions stay in the CPU's channel-blocked
  // layout; the planner sizes the flagged values with their channel padding.
  if (options.optimize && pc.precision == Precision::kFP32) {
    // Concrete shapes prove what symbolic ones could not (a residual Add of
    // two [batch, C, h, w] maps), so fusion gets a second chance first.
    if (keep_or_restart(g, pc, options, failed, "fuse", [&] { return fuse_all(g, pc); })) g.remove_dead();
    if (options.blocked_layout) r.blocked = blocked_layout(g, pc, channel_block(pc.backend));
  }
  // After the attention and GEMM fusions, which match MatMul nodes: a MatMul
  // of K or V repeated per group of query heads reads them once per group
  // (any backend), then a MatMul of a transposed operand left reads it in
  // place (CPU plans).
  if (options.optimize && softmax && pass_enabled("TWINFER_MATMUL_READS_GROUPED_HEADS"))
    keep_or_restart(g, pc, options, failed, "matmul_reads_grouped_heads",
                    [&] { return matmul_reads_grouped_heads(g, pc); });
  if (options.optimize && pc.backend == Backend::kCPU && pass_enabled("TWINFER_MATMUL_READS_TRANSPOSED"))
    keep_or_restart(g, pc, options, failed, "matmul_reads_transposed",
                    [&] { return matmul_reads_transposed(g, pc); });
  return r;
}

}  // namespace

PlanPassResult run_plan_passes(graph::Graph& g, const PlanPassOptions& options, PassContext& pc) {
  std::set<std::string> failed;
  std::vector<std::string> undone;
  const size_t log_mark = pc.log ? pc.log->size() : 0;
  for (;;) {
    try {
      return plan_passes(g, options, pc, failed);
    } catch (const RewriteFailed& f) {
      // Deterministic passes: the same graph without that rewrite comes out
      // as keep_if_valid's undo would have left it.
      options.rebuild(g);
      if (pc.log) pc.log->resize(log_mark);
      failed.insert(f.pass);
      undone.push_back(f.pass + ": undone, the rewritten graph failed to type-check (" + f.why + ")");
      for (const std::string& line : undone) pc.note(line);
    }
  }
}

int run_channels_last(graph::Graph& g, const ChannelsLastOptions& options, PassContext& pc) {
  return keep_if_valid(g, pc, "channels_last", [&] { return channels_last(g, options, pc); });
}

int run_fuse_elementwise(graph::Graph& g, const FuseElementwiseOptions& options, PassContext& pc) {
  return keep_if_valid(g, pc, "fuse_elementwise", [&] { return fuse_elementwise(g, options, pc); });
}

int run_fuse_residual(graph::Graph& g, const FuseResidualOptions& options, PassContext& pc) {
  return keep_if_valid(g, pc, "fuse_residual", [&] { return fuse_residual(g, options, pc); });
}

int run_attention_views(graph::Graph& g, const AttentionViewsOptions& options, PassContext& pc) {
  return keep_if_valid(g, pc, "attention_views", [&] { return attention_views(g, options, pc); });
}

}  // namespace twinfer::passes
