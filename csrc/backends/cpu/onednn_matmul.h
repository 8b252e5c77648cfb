// A oneDNN matmul prepared once for fixed shapes, shared by the Gemm and
// MatMul kernels (plain and com.twinfer fused):
//
//   y = act( alpha * (A x B) + bias + add + sum_scale * y_before )
//
// A, B, y have equal rank >= 2 (leading batch dims broadcast: equal or 1).
// A constant B is packed once into oneDNN's preferred layout (with alpha
// folded in); a runtime B is read in place (transposes via strides). A and y
// may be strided views too (Einsum reads and writes permuted operands in
// place).
// Measured (2 threads, AVX-512): 128x768x3072 packed 1.9 ms vs 3.8 ms from
// a plain row-major B (scratch oneDNN benchmark).
//
// Which of bias / add / sum to use is the caller's choice: bias only for a
// [1,..,1,N] operand (the broadcast oneDNN's fast kernel supports), add for
// [1,..,1] or full-shape operands, sum for anything else (the caller fills y
// with the broadcast operand before run()).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/onednn_common.h"

namespace twinfer::cpu::onednn {

struct MatmulDesc {
  Shape a, b, y;                            // oneDNN dims, equal rank
  dnnl::memory::dims a_strides, b_strides;  // empty: row-major
  dnnl::memory::dims y_strides;             // empty: row-major
  const void* b_const = nullptr;            // constant B, packed at construction
  std::shared_ptr<const void> b_owner;      // b_const's storage: packed copies shared (PackedWeights)
  float alpha = 1.f;
  Shape bias;                               // empty: none; else [1,..,1,N]
  const void* bias_const = nullptr;         // constant bias (copied, times bias_scale); else runtime
  float bias_scale = 1.f;
  Shape add;                                // empty: none; else broadcastable to y, same rank
  const void* add_const = nullptr;          // constant add operand (copied, times add_scale); else runtime
  float add_scale = 1.f;
  bool sum = false;                         // y += sum_scale * (y's content before the run)
  float sum_scale = 1.f;
  nn::Activation act;
};

class MatmulCore {
 public:
  MatmulCore(MatmulDesc d, std::string node, std::string op);
  size_t scratch_bytes() const { return declared_scratch_; }
  // oneDNN's name for the implementation it chose ("ref:any" when no fast
  // kernel takes these strides).
  const std::string& impl_info() const { return impl_info_; }
  // Pointers for the runtime operands (nullptr where the desc has a constant or none).
  void run(const KernelContext& ctx, const void* a, const void* b, const void* bias, const void* add,
           void* y) const;

 private:
  struct Variant {
    dnnl::matmul prim;
    dnnl::memory weights;  // packed constant B
    dnnl::memory::desc pad_md;
    size_t pad_bytes = 0;
    std::string impl;
  };
  Variant make_variant() const;

  MatmulDesc d_;
  std::string node_, op_;
  dnnl::memory::desc a_md_, b_md_, y_md_, bias_md_, add_md_;
  bool runtime_alpha_ = false;
  std::vector<float> bias_copy_, add_copy_;
  std::vector<float> b_scaled_;  // alpha * B, only while packing at construction
  mutable PackedWeights packed_;
  ByThreads<Variant> variants_;
  size_t declared_scratch_ = 0;
  std::string impl_info_;
};

}  // namespace twinfer::cpu::onednn
