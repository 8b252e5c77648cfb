#include "backends/cpu/lstm_int8_recurrence.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/simd_clones.h"
#include "ops/quant/quantize_fast.h"
#include "ops/rnn/rnn_spec.h"

namespace twinfer::tx {

namespace lstm_int8 {

std::vector<float> row_scales(const graph::Node& node, const char* attr, int d, int64_t rows) {
  if (!node.has_attr(attr)) return {};
  const std::vector<float> scales = node.attr_floats(attr);
  if (static_cast<int64_t>(scales.size()) < (d + 1) * rows) return {};
  return std::vector<float>(scales.begin() + d * rows, scales.begin() + (d + 1) * rows);
}

bool transposed_int8(const float* m, int64_t rows, int64_t cols, const std::vector<float>& scale,
                     std::vector<int8_t>* qt) {
  qt->resize(static_cast<size_t>(rows * cols));
  for (int64_t j = 0; j < rows; ++j) {
    const float s = scale[j];
    if (!(s > 0.f) || !std::isfinite(s)) return false;
    for (int64_t i = 0; i < cols; ++i) {
      const float v = m[j * cols + i] / s;
      const float q = std::nearbyint(v);
      if (!(std::fabs(v - q) <= 1e-3f) || q < -128.f || q > 127.f) return false;
      (*qt)[i * rows + j] = static_cast<int8_t>(q);
    }
  }
  return true;
}

std::unique_ptr<quant::QGemm> u8_times(const graph::Node& node, int64_t m, int64_t k, int64_t n,
                                       const std::vector<int8_t>& qt) {
  quant::QGemmDesc g;
  g.a = {m, k};
  g.b = {k, n};
  g.a_type = DType::kUInt8;
  g.b_type = DType::kInt8;
  g.b_const = qt.data();
  return std::make_unique<quant::QGemm>(g, node.name, node.op_type);
}

TWINFER_SIMD_CLONES void dequantize_row(const int32_t* __restrict acc, const int32_t* __restrict offset,
                                        const float* __restrict mult, float* __restrict y, int64_t n) {
  if (offset)
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(acc[j] - offset[j]) * mult[j];
  else
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(acc[j]) * mult[j];
}

}  // namespace lstm_int8

namespace {
using lstm_int8::aligned64;

// acc[b, j] = sum_k h[b, k] q[j, k] for N rows of h at once, q packed for
// vpdpbusd: blocks of 16 * B rows, each [K/4][16 * B rows][4 bytes], so a
// vector holds 4 consecutive k of 16 rows and the sums of 16 rows build up
// in one register (no horizontal sums). q is read once for all N rows;
// N * B accumulators stay in registers (at most 16). h rows are kpad bytes
// apart (kpad = 4 * k4), acc rows rows_pad apart.
template <int N, int B>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void vnni_rows(
    const uint8_t* __restrict h, const int8_t* __restrict packed, int32_t* __restrict acc, int64_t k4,
    int64_t rows_pad) {
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 16 * B) {
    __m512i sum[N][B];
    for (int a = 0; a < N; ++a)
      for (int b = 0; b < B; ++b) sum[a][b] = _mm512_setzero_si512();
    const int8_t* blk = packed + r0 * k4 * 4;
    for (int64_t g = 0; g < k4; ++g) {
      __m512i w[B];
      for (int b = 0; b < B; ++b) w[b] = _mm512_loadu_si512(blk + (g * 16 * B + 16 * b) * 4);
      for (int a = 0; a < N; ++a) {
        int32_t four;
        std::memcpy(&four, h + a * k4 * 4 + 4 * g, 4);
        const __m512i hb = _mm512_set1_epi32(four);
        for (int b = 0; b < B; ++b) sum[a][b] = _mm512_dpbusd_epi32(sum[a][b], hb, w[b]);
      }
    }
    for (int a = 0; a < N; ++a)
      for (int b = 0; b < B; ++b) _mm512_storeu_si512(acc + a * rows_pad + r0 + 16 * b, sum[a][b]);
  }
}

// vnni_rows' B for n rows of h (16 * B rows a block): 4 up to 4 rows of h,
// then 2, so that N * B accumulators fit in registers. q is packed for it.
constexpr int vnni_b(int64_t n) { return n <= 4 ? 4 : 2; }
constexpr int64_t kVnniRowBlock = 64;  // rows padded to whole blocks of either B
constexpr int64_t kVnniMaxBatch = 8;

void vnni_product(int64_t n, const uint8_t* h, const int8_t* packed, int32_t* acc, int64_t k4, int64_t rows_pad) {
  switch (n) {  // B as vnni_b(n)
    case 1: return vnni_rows<1, 4>(h, packed, acc, k4, rows_pad);
    case 2: return vnni_rows<2, 4>(h, packed, acc, k4, rows_pad);
    case 3: return vnni_rows<3, 4>(h, packed, acc, k4, rows_pad);
    case 4: return vnni_rows<4, 4>(h, packed, acc, k4, rows_pad);
    case 5: return vnni_rows<5, 2>(h, packed, acc, k4, rows_pad);
    case 6: return vnni_rows<6, 2>(h, packed, acc, k4, rows_pad);
    case 7: return vnni_rows<7, 2>(h, packed, acc, k4, rows_pad);
    default: return vnni_rows<8, 2>(h, packed, acc, k4, rows_pad);
  }
}

bool has_avx512_vnni() {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}
}  // namespace

std::unique_ptr<LstmInt8Recurrence> LstmInt8Recurrence::of(const KernelBuildInfo& info, int d, int64_t n,
                                                           int64_t hidden, int64_t rows, const float* r) {
  const graph::Node& node = info.node();
  std::unique_ptr<LstmInt8Recurrence> k(new LstmInt8Recurrence());
  k->n_ = n, k->hidden_ = hidden, k->rows_ = rows;
  k->scale_ = lstm_int8::row_scales(node, rnn::kLstmInt8RScales, d, rows);
  // q^T [H, rows] (B of the product), from R [rows, H].
  std::vector<int8_t> qt;
  if (k->scale_.empty() || !lstm_int8::transposed_int8(r, rows, hidden, k->scale_, &qt)) return nullptr;
  if (n <= kVnniMaxBatch && has_avx512_vnni()) {
    // q packed for vnni_rows, zeros past H and past the rows; q's row sums
    // apply h's zero point.
    k->k4_ = (hidden + 3) / 4;
    k->rows_pad_ = (rows + kVnniRowBlock - 1) / kVnniRowBlock * kVnniRowBlock;
    const int64_t block = 16 * vnni_b(n);
    k->packed_.assign(static_cast<size_t>(k->rows_pad_ * k->k4_ * 4), 0);
    k->q_sums_.assign(static_cast<size_t>(rows), 0);
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t r0 = j / block * block, in_block = j - r0;
      for (int64_t i = 0; i < hidden; ++i) {
        const int8_t q = qt[i * rows + j];
        k->packed_[r0 * k->k4_ * 4 + ((i / 4) * block + in_block) * 4 + i % 4] = q;
        k->q_sums_[j] += q;
      }
    }
    return k;
  }
  k->gemm_ = lstm_int8::u8_times(node, n, hidden, rows, qt);
  return k;
}

size_t LstmInt8Recurrence::mult_bytes() const { return aligned64(static_cast<size_t>(rows_) * sizeof(float)); }

size_t LstmInt8Recurrence::work_bytes() const {
  // h's uint8 rows, the int32 sums (and the VNNI path's zero-point offsets), the row multipliers.
  const int64_t h_bytes = packed_.empty() ? n_ * hidden_ : n_ * k4_ * 4;
  const int64_t acc_values = packed_.empty() ? n_ * rows_ : (n_ + 1) * rows_pad_;
  return aligned64(static_cast<size_t>(h_bytes)) + aligned64(static_cast<size_t>(acc_values) * sizeof(int32_t)) +
         mult_bytes();
}

void LstmInt8Recurrence::run(const KernelContext& ctx, const float* h, float* rh, void* work) const {
  const int64_t count = n_ * hidden_;
  float mn = 0.f, mx = 0.f;
  quant::min_max_with_zero_serial(h, count, &mn, &mx);
  if (mx == mn) {  // h is all 0 (the first step from zero states): so is the product
    std::fill(rh, rh + n_ * rows_, 0.f);
    return;
  }
  // DynamicQuantizeLinear's parameters, then its rounding.
  const float scale = (mx - mn) / 255.f;
  const float zp = std::nearbyint(std::min(255.f, std::max(0.f, 0.f - mn / scale)));
  auto* hq = static_cast<uint8_t*>(work);
  const int32_t za = static_cast<int32_t>(zp);
  // h's scale times R's per row, after the work space's sums (work_bytes).
  float* mult = reinterpret_cast<float*>(static_cast<char*>(work) + work_bytes() - mult_bytes());
  for (int64_t j = 0; j < rows_; ++j) mult[j] = scale * scale_[j];
  if (gemm_) {
    auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(work) + aligned64(static_cast<size_t>(count)));
    quant::quantize_to_u8(h, hq, count, scale, za, 1);
    gemm_->run(ctx, hq, nullptr, &za, false, nullptr, false, acc);
    for (int64_t b = 0; b < n_; ++b)
      lstm_int8::dequantize_row(acc + b * rows_, nullptr, mult, rh + b * rows_, rows_);
    return;
  }
  // Each row of h quantized into its padded row (the pad's bytes meet q's zeros).
  const int64_t kpad = k4_ * 4;
  auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(work) + aligned64(static_cast<size_t>(n_ * kpad)));
  for (int64_t b = 0; b < n_; ++b) {
    quant::quantize_to_u8(h + b * hidden_, hq + b * kpad, hidden_, scale, za, 1);
    std::fill(hq + b * kpad + hidden_, hq + (b + 1) * kpad, uint8_t(0));
  }
  vnni_product(n_, hq, packed_.data(), acc, k4_, rows_pad_);
  int32_t* offset = acc + n_ * rows_pad_;  // h's zero point times q's row sums
  for (int64_t j = 0; j < rows_; ++j) offset[j] = za * q_sums_[j];
  for (int64_t b = 0; b < n_; ++b) lstm_int8::dequantize_row(acc + b * rows_pad_, offset, mult, rh + b * rows_, rows_);
}

}  // namespace twinfer::tx
