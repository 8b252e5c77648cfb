// The input projections of an LSTM that was com.microsoft::DynamicQuantizeLSTM
// (rnn::kLstmInt8WScales on the node): X W^T for every step on W's int8
// values, as onnxruntime computes that op. X [M, I] (every step's rows, M =
// steps x batch) is quantized to uint8 once over all its values as
// DynamicQuantizeLinear does (range widened to hold 0, round half to even),
// multiplied by q^T in a oneDNN int8 matmul (quant::QGemm), and each column
// dequantized by X's scale times W's scale for that gate row, the two scales'
// product taken first as onnxruntime's output processor does.
//
// Why: text2tashkeel's rawi diacritizer is two such LSTMs, and with their
// recurrences on int8 (lstm_int8_recurrence.h) most of its time went to
// these projections in float (66M multiply-adds a sentence), which
// onnxruntime runs in int8. Running them as the op defines them also brings
// the outputs to onnxruntime's rounding (tests/test_contrib_ops.py).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/onednn_qgemm.h"
#include "ops/kernel.h"

namespace twinfer::tx {

class LstmInt8Projection {
 public:
  // Null where the node has no W scales, or some direction's W is not
  // exactly q * scale with int8 q (then the float projections run).
  // w: W [dirs, rows, I] float (rows = 4H); m: X's rows (steps x batch).
  static std::unique_ptr<LstmInt8Projection> of(const KernelBuildInfo& info, int dirs, int64_t m, int64_t inputs,
                                                 int64_t rows, const float* w);
  size_t scratch_bytes() const;
  // Bytes of work space quantize() and project() need, 64-byte aligned.
  size_t work_bytes() const;

  // X's uint8 values in `work` and their parameters; `count` of X's values
  // (the steps any sequence runs, as onnxruntime's range covers) set the range.
  struct Quantized {
    float scale = 0.f;  // 0: X is all zeros
    int32_t zero_point = 0;
  };
  Quantized quantize(const KernelContext& ctx, const float* x, int64_t count, void* work) const;
  // xp [M, rows] = X W_d^T for direction d from quantize()'s values in work.
  void project(const KernelContext& ctx, int d, const Quantized& q, float* xp, void* work) const;

 private:
  LstmInt8Projection() = default;
  int64_t m_ = 0, inputs_ = 0, rows_ = 0;
  std::vector<std::vector<float>> scale_;            // W's scale per row, per direction
  std::vector<std::unique_ptr<quant::QGemm>> gemm_;  // per direction
};

}  // namespace twinfer::tx
