// The vectorised float32 Sigmoid and Tanh loops of logistic_fast.cc (their
// accuracy is described and tested there), for other kernels that apply them
// to buffers of their own: the RNN cells' gates (backends/cpu/onednn_rnn.cc).
// x and y must not overlap.
#pragma once
#include <cstdint>

namespace twinfer::ew {

void sigmoid_loop(const float* __restrict x, float* __restrict y, int64_t n);
void tanh_loop(const float* __restrict x, float* __restrict y, int64_t n);

}  // namespace twinfer::ew
