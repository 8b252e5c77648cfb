// The ONNX domains twinfer defines, spelled once: passes build nodes in
// them, ops and backends register shape rules and kernels under them, and
// the engine accepts models (and saved engines) that use them.
#pragma once

namespace twinfer {

// Ops the load-time passes create: fused Conv / MatMul / Gemm with their
// epilogues, the int8 QConv / QMatMul / QBinary, weight-only MatMulW8.
inline constexpr const char* kTwinferDomain = "com.twinfer";

// Plan-time ops whose float activations live in oneDNN's channel-blocked
// layout (nChw16c / nChw8c); graph/passes/blocked_layout.h builds them and
// documents the convention. Their Conv has the com.twinfer Conv's inputs and
// attributes, plus `plain_input` = 1 when x is plain NCHW (fewer channels
// than one block, e.g. the RGB image).
inline constexpr const char* kBlockedDomain = "com.twinfer.blocked";

// Plan-time ops of device plans whose activations are channels-last: their
// values' logical shapes are [N, spatial..., C] (graph/passes/channels_last.h
// builds them; Transposes convert at the edges). Conv has the com.twinfer
// Conv's inputs and attributes, its weights KRSC [M, k..., C/group]; MaxPool
// and AveragePool have ONNX's attributes, without MaxPool's Indices.
inline constexpr const char* kChannelsLastDomain = "com.twinfer.nhwc";

// Not ours but spelled here too: ONNX's classical machine-learning ops
// (csrc/ops/ml: trees, linear models, SVMs, encoders, ZipMap).
inline constexpr const char* kMlDomain = "ai.onnx.ml";
// ONNX's preview ops (FlexAttention).
inline constexpr const char* kPreviewDomain = "ai.onnx.preview";

}  // namespace twinfer
