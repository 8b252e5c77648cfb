// The float32 inner loops of the reductions (reduce_walks.h) as plain
// functions built for AVX-512, AVX2 and baseline x86-64 (core/simd_clones.h):
// the templated walks compile for the baseline only, where a double
// accumulator takes two floats an instruction.
#pragma once
#include <cstdint>

namespace twinfer::reduce {

// acc[j] += x[k * inner + j] for k < n, j < m: a block of columns in double,
// each run of 8 rows summed in float first.
void add_float_columns(const float* x, int64_t n, int64_t inner, int64_t m, double* acc);

// The sum of a row in double: eight lanes (element i into lane i % 8), then
// lane 0 + lane 1 + ... + lane 7.
double sum_float_row(const float* x, int64_t n);

// The sum of exp(x[i] - shift) over a row, each term in float (fast_exp.h's
// exp_any, within an ulp of libm's expf), the sum in double: LogSumExp's.
double sum_exp_float_row(const float* x, int64_t n, float shift);

// The largest / smallest element of a row by eight lanes of compare-selects,
// which drop NaN; *nan says whether some element is NaN (a branch-free sum
// of v - v beside them, 0 unless some v is NaN or infinite, then a rescan
// only when it is not). -inf / +inf for no element.
float max_float_row(const float* x, int64_t n, bool* nan);
float min_float_row(const float* x, int64_t n, bool* nan);

}  // namespace twinfer::reduce
