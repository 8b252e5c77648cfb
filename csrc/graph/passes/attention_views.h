// Device plans let the fused attention read its operands and write its
// output where they are (plan time, concrete shapes, after fuse_attention
// and lower_precision, before placement).
//
// Around each com.twinfer::Attention, exporters leave copies that only move
// elements: ViT's packed QKV projection is split by Transpose + Gather and
// its heads moved by Reshape + Transpose; BERT's heads are moved by
// Transpose before attention and back after it. On a GPU each is a trip
// through memory as large as the activation (ViT-B/16 at batch 64: about
// ten per layer). This pass finds, for q, k and v, the value their copies
// started from (strided_view.h) and, for the output, the value its copies
// end in, and gives the Attention views of those instead
// (ops/transformer/attention_views.h); the copies nobody reads any more go.
// cuDNN's fused attention and our own kernel take the strides as they are.
//
// An operand stays as it is where no view reaches it with its head dim
// contiguous. TWINFER_ATTENTION_VIEWS=0 turns the pass off (for measuring).
#pragma once
#include <functional>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct AttentionViewsOptions {
  NodeSupport supports;  // does the rewritten node have kernels
};

bool attention_views_wanted();

// Returns the number of Attention nodes given views (0: the graph is unchanged).
int attention_views(graph::Graph& g, const AttentionViewsOptions& o, const PassContext& ctx);

}  // namespace twinfer::passes
