// Softmax over float32 rows in loops the compiler vectorises (multiversioned
// for AVX-512 / AVX2, core/simd_clones.h), on the exp of
// ops/elementwise/fast_exp.h: the max, then exp(x - max) with its sum, then
// the division, each pass over a row that stays in cache. For the plain
// Softmax's contiguous rows (softmax_fast.cc) and com.twinfer::AttentionSoftmax
// (attention_softmax_rows.cc), where oneDNN 3.2's JIT softmax
// took 3.5x onnxruntime's time on attention rows of 197 (a ViT's), before a
// pass of its own over the output for NaN rows.
//
// The semantics are ONNX's: a row holding a NaN is NaN throughout (its sum
// is); a row whose every element is -inf is NaN (-inf - -inf); an element at
// -inf beside finite ones gives exactly 0.
#pragma once
#include <cstdint>

namespace twinfer::nn {

// y = softmax(x * scale + m) over one row of n floats. m: null (no mask), one
// value per element (m_step 1) or one for the whole row (m_step 0). x and y
// may be the same row (each element is read before it is written).
void softmax_row(const float* x, const float* m, int64_t m_step, float scale, float* y, int64_t n);

// y = log(softmax(x)) = (x - max) - log(sum(exp(x - max))) over one row; a
// masked (-inf) element gives -inf, a NaN or all -inf row NaN.
void log_softmax_row(const float* x, float* y, int64_t n);

// Softmax (log: LogSoftmax) over the len rows of x viewed as [len, inner],
// for columns [j0, j1) (an axis that is not the innermost). x and y may be
// the same.
void softmax_columns(const float* x, float* y, int64_t len, int64_t inner, int64_t j0, int64_t j1, bool log);

}  // namespace twinfer::nn
