// The low-precision GEMM with its scales applied inside: CUTLASS's Hopper
// tensor-core GEMM (TMA loads, warp-specialized, sm_90a) on int8 or FP8
// (E4M3) operands, with an epilogue of our own composition,
//
//   y[m, n] = act(acc[m, n] * col_scale[n] * row_scale[m] + bias[n])
//
// acc the sum of x[m, :] . w[n, :] (both K-major; int32 for int8, float32
// with the tensor cores' fast accumulation for FP8), act any fused
// activation (ops/nn/activation_fn.h, the functor our own epilogues run), y
// float32, float16 (saturated as core/half.h does, or not; the template
// takes bfloat16 too, not compiled: CI time), or int8
// (divided by y_scale, rounded half to even and saturated, as
// quant::requantize), written once from registers.
//
// The int8 layers' form beside cuBLASLt's (gemm_int8.h), whose int8 kernels
// cannot take a per-row (per-token) scale and write only int32 or int8: on
// an H200 BERT-base's int8 GEMMs ran at ~190 TOPS with the int32 round trip
// and ResNet-50's 1x1 convolutions at ~9 (docs/gpu-runs/2026-11-30-b56c98f.md);
// and FP8MatMul's beside cuBLASLt's FP8 GEMM (0.14 ms for BERT's 8192 x 3072
// x 768, slower than fp16 there). gemm_qlinear.cc and gemm_fp8.cc time both
// forms at plan build and keep the faster.
//
// The kernels are compiled only where NVIDIA's CUTLASS headers are found
// (the nvidia-cutlass wheel, a CUDA build requirement) and run only on
// compute capability 9.0; elsewhere `unsupported` says why.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/dtype.h"
#include "ops/nn/activation_fn.h"

namespace twinfer::cuda {

struct ScaledGemmShape {
  int64_t m = 0, n = 0, k = 0;  // k: the packed K, a multiple of 16
  DType in = DType::kInt8;      // x and w: int8, or float8e4m3fn
  DType out = DType::kFloat16;  // float32, float16, bfloat16 or int8
  nn::ActFn act;                // after the bias
  float y_scale = 1.f;          // int8 y: what act's result is divided by before rounding
  bool saturate = true;         // 16-bit y: a finite value past the range to its largest (else infinity)
};

struct ScaledGemmOperands {
  const void* x = nullptr;            // [m, k] of `in`, rows 16-byte aligned
  const void* w = nullptr;            // [n, k] (further rows unused)
  const float* col_scale = nullptr;   // [n]
  const float* row_scale = nullptr;   // [m], or null: 1
  const float* bias = nullptr;        // [n], or null: 0
  void* y = nullptr;                  // [m, n] row-major, row stride n
};

// "" when this build and the current device run the shape, else why not.
std::string scaled_gemm_unsupported(const ScaledGemmShape& s);

struct ScaledGemmKernel;

class ScaledGemm {
 public:
  // Throws Error(kUnsupportedOp) with `unsupported`'s reason.
  explicit ScaledGemm(const ScaledGemmShape& s);
  ~ScaledGemm();
  ScaledGemm(const ScaledGemm&) = delete;
  ScaledGemm& operator=(const ScaledGemm&) = delete;
  size_t workspace_bytes() const { return workspace_; }
  // Enqueues on `stream`; throws Error(kRuntime) for operands not 16-byte
  // aligned (TMA's rule, which CUTLASS does not check before launching) or
  // naming what CUTLASS refused.
  void run(const ScaledGemmOperands& o, void* workspace, cudaStream_t stream) const;
  const std::string& name() const { return name_; }

 private:
  ScaledGemmShape s_;
  const ScaledGemmKernel* k_ = nullptr;
  int sm_count_ = 0;
  size_t workspace_ = 0;
  std::string name_;
  // The last launch parameters and the operands they were built for: a
  // plan's runs reuse them (its arena does not move).
  mutable std::mutex m_;
  void* params_ = nullptr;
  mutable bool have_params_ = false;
  mutable ScaledGemmOperands params_for_;
  mutable void* params_workspace_ = nullptr;
};

// ---- what each compiled kernel registers (cutlass_gemm_*.cu) ----------
struct ScaledGemmKernel {
  DType in, out;
  const char* name;
  size_t params_size, params_align;
  // 0 on success; what each step returned otherwise (CUTLASS's Status).
  int (*prepare)();  // the kernel's shared-memory size on the current device
  size_t (*workspace)(const ScaledGemmShape& s, int sm_count);
  int (*make_params)(const ScaledGemmShape& s, const ScaledGemmOperands& o, int sm_count, void* workspace,
                     cudaStream_t stream, void* params);
  int (*launch)(void* params, cudaStream_t stream);
};
void register_scaled_gemm(const ScaledGemmKernel& k);

}  // namespace twinfer::cuda
