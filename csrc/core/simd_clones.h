// TWINFER_SIMD_CLONES: build a hot loop for AVX-512, AVX2 and baseline x86-64
// and pick one at load time (GCC function multiversioning). The rest of the
// build targets generic x86-64 so the wheel runs anywhere; these few loops are
// where elementwise time goes. Mark plain (non-template) functions only.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define TWINFER_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TWINFER_SIMD_CLONES
#endif
