// The recurrent product of an LSTM that was com.microsoft::DynamicQuantizeLSTM
// (rnn::kLstmInt8RScales on the node): h_prev R^T on R's int8 values, as the
// contrib op defines it. Each step h is quantized to uint8 over its [N, H]
// values as DynamicQuantizeLinear does (range widened to hold 0, round half
// to even), multiplied by q^T in a oneDNN int8 matmul (quant::QGemm, the
// zero point applied from q's column sums) and dequantized by h's scale
// times R's per-row scale.
//
// Up to batch 8 on a CPU with AVX-512 VNNI the product is our own loop
// instead (vpdpbusd over q packed 16 rows to a vector, q read once for every
// row of h; exact int32 sums, as oneDNN's): a oneDNN call per step cost more
// than the 262K multiply-adds of text2tashkeel's LSTMs (hidden 256), and at
// batch 2-4 the step took 1.4-1.5x onnxruntime's.
//
// Why: ddddocr's default recogniser (common_old.onnx) is such an LSTM,
// bidirectional, hidden 512. Run in float on the dequantized R, each step
// read 4 MiB of weights from L3; its LSTM took 4.9 ms of the model's 14.5
// against onnxruntime's 11.3 ms in all. The int8 R is 1 MiB, in L2.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/onednn_qgemm.h"
#include "ops/kernel.h"

namespace twinfer::tx {

namespace lstm_int8 {
// The node's per-row scales in `attr` (rnn::kLstmInt8RScales / WScales) for
// direction d of `rows` rows, or empty where it has none or too few.
std::vector<float> row_scales(const graph::Node& node, const char* attr, int d, int64_t rows);
// q^T [cols, rows] from m [rows, cols], each value an integer in int8's
// range times its row's scale as the expansion wrote it; false where one is
// not (or a scale is not positive and finite).
bool transposed_int8(const float* m, int64_t rows, int64_t cols, const std::vector<float>& scale,
                     std::vector<int8_t>* qt);
// A oneDNN int8 product [m, k] uint8 x q^T [k, n] int8 (q^T copied and packed).
std::unique_ptr<quant::QGemm> u8_times(const graph::Node& node, int64_t m, int64_t k, int64_t n,
                                       const std::vector<int8_t>& qt);
// y[j] = float(acc[j] - offset[j]) * mult[j] (offset may be null: 0), vectorised.
void dequantize_row(const int32_t* acc, const int32_t* offset, const float* mult, float* y, int64_t n);
inline size_t aligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace lstm_int8

class LstmInt8Recurrence {
 public:
  // For direction d of the node: null where the node has no R scales, or R
  // is not exactly q * scale with int8 q (then the float product runs).
  // r: R of that direction, [rows, H] float (rows = 4H); n: the batch.
  static std::unique_ptr<LstmInt8Recurrence> of(const KernelBuildInfo& info, int d, int64_t n, int64_t hidden,
                                                 int64_t rows, const float* r);
  size_t scratch_bytes() const { return gemm_ ? gemm_->scratch_bytes() : 0; }
  // Bytes of work space run() needs (hq, acc), 64-byte aligned.
  size_t work_bytes() const;
  // rh [N, rows] = dequantize(quantize_u8(h [N, H]) x q^T); work: work_bytes().
  void run(const KernelContext& ctx, const float* h, float* rh, void* work) const;

 private:
  LstmInt8Recurrence() = default;
  size_t mult_bytes() const;
  int64_t n_ = 0, hidden_ = 0, rows_ = 0;
  std::vector<float> scale_;  // R's scale per row
  std::unique_ptr<quant::QGemm> gemm_;  // null: the VNNI products below
  std::vector<int8_t> packed_;          // q packed for vpdpbusd (lstm_int8_recurrence.cc's vnni_rows)
  int64_t k4_ = 0, rows_pad_ = 0;       // H in groups of 4 bytes; rows padded to whole blocks
  std::vector<int32_t> q_sums_;         // sum of each of q's rows
};

}  // namespace twinfer::tx
