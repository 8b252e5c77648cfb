// cuBLASLt's int8 GEMM (IMMA) for QMatMul / QConv, row-major in our terms:
//
//   d[rows, n_pad] = x[rows, k] . w[n_pad, k]^T      x, w int8, both K-major
//
// which is the column-major "TN" form Hopper's int8 kernels require (w is the
// transposed operand A, x the operand B; see CUDA_GUIDE.md section 1). Two
// outputs:
//   int32  — the plain sum (compute and scale int32), for our epilogue;
//   int8   — scaled per output channel by a device vector alpha[n], plus an
//            optional float bias[n] and ReLU, rounded and saturated by
//            cuBLASLt itself: the whole layer in one call when activations
//            are symmetric (zero point 0) and the activation is ReLU or none.
// k and n_pad must be multiples of 4 (the IMMA kernels' leading dimensions).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace twinfer::cuda {

class Int8Gemm {
 public:
  enum class Output { kInt32, kInt8 };
  struct Config {
    int64_t rows = 0, n = 0, k = 0;  // n: padded to 4
    Output out = Output::kInt32;
    bool bias = false, relu = false;  // kInt8 only
  };
  // Throws Error(kUnsupportedOp) when cuBLASLt has no algorithm for it.
  explicit Int8Gemm(const Config& c);
  ~Int8Gemm();
  Int8Gemm(const Int8Gemm&) = delete;
  Int8Gemm& operator=(const Int8Gemm&) = delete;

  size_t workspace_bytes() const;
  // The candidates timed when the algorithm was chosen ("" when one ran).
  const std::string& timings() const;
  // alpha: device float[n] (kInt8), bias: device float[n] or null.
  void run(const int8_t* x, const int8_t* w, void* d, const float* alpha, const float* bias, void* workspace,
           cudaStream_t s) const;

  // Why a shape cannot go to the IMMA kernels ("" when it can).
  static std::string unsupported(int64_t k, int64_t n);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace twinfer::cuda
