// oneDNN's softmax over the rows of a [rows, len] float32 matrix, for the
// Softmax / LogSoftmax kernel (onednn_softmax.cc).
#pragma once
#include "backends/cpu/onednn_common.h"

namespace twinfer::cpu::onednn {

// One primitive for one thread budget (kernels keep them in ByThreads).
struct SoftmaxRows {
  dnnl::softmax_forward prim;
  dnnl::memory::desc pad_md;
  size_t pad_bytes = 0;
};

SoftmaxRows make_softmax_rows(const dnnl::memory::desc& rows, bool log);

// src -> dst (the same memory is allowed), on the calling thread's budget;
// `declared_scratch` is what the kernel's scratch_bytes() promised.
void run_softmax_rows(const ByThreads<SoftmaxRows>& variants, const dnnl::memory::desc& rows, const void* src,
                      void* dst, const KernelContext& ctx, size_t declared_scratch, bool log);

}  // namespace twinfer::cpu::onednn
