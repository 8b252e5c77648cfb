// Index math for kernels that walk an output in linear order and read
// broadcast (or strided) operands: each output index is split into
// coordinates by divisions that are multiplications (FastDivmod), and the
// coordinates are dotted with each operand's strides (OffsetCalc). Both are
// __host__ __device__: the CUDA kernels run exactly this code, and the host
// tests (tests/test_index_math.py) check it against NumPy's indexing.
//
// The geometry comes from the CPU's broadcast plan (broadcast.h), which has
// already dropped size-1 output dims and merged dims every operand walks
// contiguously, so most launches see rank 1 or 2.
#pragma once
#include <cstdint>
#include <vector>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::ew {

// Unsigned division by a fixed divisor d >= 1 for dividends n < 2^63, as
// q = (umulhi(n, mul) + n) >> shift with shift = ceil(log2 d) and
// mul = floor(2^64 * (2^shift - d) / d) + 1 (Granlund & Montgomery; the sum
// cannot overflow because umulhi(n, mul) <= n < 2^63).
//
// Dividends and divisors under 2^31 (nearly every launch) take the same
// method in 32 bits, mul32 = floor(2^32 * (2^shift - d) / d) + 1: one
// 32-bit multiply-high where the 64-bit one is several instructions on a GPU.
struct FastDivmod {
  uint64_t divisor = 1;
  uint64_t mul = 0;
  uint32_t shift = 0;
  uint32_t mul32 = 0;  // the 32-bit multiplier; used when divisor and dividend are under 2^31

  FastDivmod() = default;
  // d >= 1 (a size-0 dim has nothing to index: callers map it to 1, see
  // broadcast_offsets.h); d = 0 is treated as 1 rather than divide by zero.
  explicit FastDivmod(uint64_t d) : divisor(d ? d : 1) {
    d = divisor;
    while (shift < 64 && (uint64_t(1) << shift) < d) ++shift;
    // 2^64 * (2^shift - d) / d, in 128-bit arithmetic on the host.
    const unsigned __int128 num = (static_cast<unsigned __int128>((shift == 64 ? 0 : (uint64_t(1) << shift)) - d)
                                   << 64);
    mul = d == 1 ? 0 : static_cast<uint64_t>(num / d) + 1;
    if (d < kSmall && d > 1)
      mul32 = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }

  static constexpr uint64_t kSmall = uint64_t(1) << 31;

  TWINFER_HD static uint64_t umulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
  }
  TWINFER_HD static uint32_t umulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }
  TWINFER_HD uint64_t div(uint64_t n) const {
    // Both under 2^31: umulhi32(n, mul32) <= n, so the sum stays under 2^32.
    if (n < kSmall && divisor < kSmall) {
      const uint32_t n32 = static_cast<uint32_t>(n);
      return (umulhi32(n32, mul32) + n32) >> shift;
    }
    return (umulhi(n, mul) + n) >> shift;
  }
  TWINFER_HD void divmod(uint64_t n, uint64_t& q, uint64_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

constexpr int kMaxOffsetDims = 8;

// Element offsets of N operands for a linear output index. Dim 0 is the
// innermost (fastest varying); strides are in elements, 0 for a broadcast dim.
template <int N>
struct OffsetCalc {
  int rank = 0;
  FastDivmod sizes[kMaxOffsetDims];
  int64_t strides[kMaxOffsetDims][N] = {};

  TWINFER_HD void get(uint64_t linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = 0; d < rank; ++d) {
      uint64_t q, r;
      sizes[d].divmod(linear, q, r);
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(r) * strides[d][k];
      linear = q;
    }
  }
};

// Host side: dims (outermost first) and one stride each (elements) as an
// OffsetCalc<1> (innermost first), for a strided copy's source or
// destination; false when there are more dims than an OffsetCalc holds.
inline bool offsets_for(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, OffsetCalc<1>* c) {
  if (dims.size() > static_cast<size_t>(kMaxOffsetDims)) return false;
  c->rank = dims.empty() ? 1 : static_cast<int>(dims.size());
  if (dims.empty()) c->sizes[0] = FastDivmod(1);
  for (size_t d = 0; d < dims.size(); ++d) {
    const size_t from = dims.size() - 1 - d;
    c->sizes[d] = FastDivmod(static_cast<uint64_t>(dims[from] > 0 ? dims[from] : 1));
    c->strides[d][0] = strides[from];
  }
  return true;
}

}  // namespace twinfer::ew
