#include "ops/nn/channels_last.h"

#include "ops/tensor/strided_copy.h"

namespace twinfer::nn {

void copy_to_channels_last(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads) {
  // out [n, s, c] reads in [n, c, s]
  tensor::strided_copy(tensor::make_strided_plan({n, s, c}, {c * s, 1, s}, 0), es, in, out, threads);
}

void copy_to_channels_first(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads) {
  // out [n, c, s] reads in [n, s, c]
  tensor::strided_copy(tensor::make_strided_plan({n, c, s}, {s * c, 1, c}, 0), es, in, out, threads);
}

}  // namespace twinfer::nn
