#include "ops/tensor/strided_copy.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/tensor/tensor_util.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace twinfer::tensor {

namespace {

// Merged plans rarely exceed 6 dims; the walk keeps its odometer on the stack.
constexpr size_t kMaxDims = 16;
// Tile edge (elements) of the transpose walk: 32 rows of 32 reads stay in L1
// for every element width.
constexpr int64_t kTile = 32;

template <typename T>
void copy_rows(const StridedPlan& p, const T* in, T* out, int threads) {
  const size_t r = p.dims.size();
  const int64_t last = p.dims[r - 1], ls = p.in_strides[r - 1];
  const int64_t rows = p.numel / last;
  // The rows' walk: the leading dims, their input and output strides. When
  // every row is a contiguous run of a permutation of the input (Transpose
  // (0, 2, 1, 3): rows of the head dim), the rows go in the input's order, so
  // the reads are one stream and the writes jump: [64, 128, 12, 64] took
  // 3.5 ms in the output's order and 2.0 in the input's (onnxruntime 2.4).
  // Otherwise (a broadcast's zero strides, a reversed Slice) the output's.
  std::array<int64_t, kMaxDims> dims{}, istr{}, ostr{};
  std::array<size_t, kMaxDims> order{};
  int64_t acc = last;
  bool permuted = ls == 1;
  for (size_t d = r - 1; d-- > 0;) {
    order[d] = d;
    ostr[d] = acc;
    acc *= p.dims[d];
    permuted = permuted && p.in_strides[d] > 0;
  }
  std::array<int64_t, kMaxDims> os = ostr;
  if (permuted)
    std::stable_sort(order.begin(), order.begin() + (r - 1),
                     [&](size_t a, size_t b) { return p.in_strides[a] > p.in_strides[b]; });
  for (size_t d = 0; d + 1 < r; ++d) {
    dims[d] = p.dims[order[d]];
    istr[d] = p.in_strides[order[d]];
    ostr[d] = os[order[d]];
  }
  parallel_for(rows, threads, std::max<int64_t>(1, kCopyGrain / last), [&](int64_t b, int64_t e) {
    std::array<int64_t, kMaxDims> idx{};
    int64_t off = p.in_offset, ooff = 0, rem = b;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      off += idx[d] * istr[d];
      ooff += idx[d] * ostr[d];
    }
    for (int64_t row = b; row < e; ++row) {
      T* o = out + ooff;
      const T* s = in + off;
      if (ls == 1) {
        std::memcpy(o, s, sizeof(T) * last);
      } else if (ls == 0) {
        std::fill(o, o + last, *s);
      } else if (ls == 2) {
        // Every other element (SpaceToDepth's and a stride-2 Slice's rows):
        // a constant stride the compiler turns into vector loads and shuffles.
        for (int64_t j = 0; j < last; ++j) o[j] = s[2 * j];
      } else {
        for (int64_t j = 0; j < last; ++j) o[j] = s[j * ls];
      }
      for (size_t d = r - 1; d-- > 0;) {
        off += istr[d];
        ooff += ostr[d];
        if (++idx[d] < dims[d]) break;
        off -= istr[d] * dims[d];
        ooff -= ostr[d] * dims[d];
        idx[d] = 0;
      }
    }
  });
}

// Output rows of the last two dims (w, j): o[w * B + j] = s[j * ls + w], B
// (2-4) known at compile time so that the interleave vectorises.
template <typename T, int B>
void interleave_row(const T* s, int64_t ls, int64_t width, T* o) {
  for (int64_t w = 0; w < width; ++w)
    for (int j = 0; j < B; ++j) o[w * B + j] = s[j * ls + w];
}

template <typename T>
void copy_interleaved(const StridedPlan& p, const T* in, T* out, int threads) {
  const size_t r = p.dims.size();
  const int64_t b = p.dims[r - 1], ls = p.in_strides[r - 1], width = p.dims[r - 2], len = width * b;
  const int64_t rows = p.numel / len;
  parallel_for(rows, threads, std::max<int64_t>(1, kCopyGrain / len), [&](int64_t first, int64_t end) {
    std::array<int64_t, kMaxDims> idx{};
    int64_t off = p.in_offset, rem = first;
    for (size_t d = r - 2; d-- > 0;) {
      idx[d] = rem % p.dims[d];
      rem /= p.dims[d];
      off += idx[d] * p.in_strides[d];
    }
    for (int64_t row = first; row < end; ++row) {
      T* o = out + row * len;
      const T* s = in + off;
      switch (b) {
        case 2: interleave_row<T, 2>(s, ls, width, o); break;
        case 3: interleave_row<T, 3>(s, ls, width, o); break;
        default: interleave_row<T, 4>(s, ls, width, o); break;
      }
      for (size_t d = r - 2; d-- > 0;) {
        off += p.in_strides[d];
        if (++idx[d] < p.dims[d]) break;
        off -= p.in_strides[d] * p.dims[d];
        idx[d] = 0;
      }
    }
  });
}

// Writes the transpose of an ni x nj block of `buf` (row stride kTile) to
// ni rows of `op` (row stride os), nj elements each.
template <typename T>
inline void write_transposed(const T* buf, int64_t ni, int64_t nj, T* op, int64_t os) {
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (sizeof(T) == 4) {
    // 4 x 4 blocks in registers: four 16-byte loads, shuffles, four stores.
    const float* b = reinterpret_cast<const float*>(buf);
    float* o = reinterpret_cast<float*>(op);
    for (; i + 4 <= ni; i += 4) {
      int64_t j = 0;
      for (; j + 4 <= nj; j += 4) {
        __m128 r0 = _mm_loadu_ps(b + (j + 0) * kTile + i), r1 = _mm_loadu_ps(b + (j + 1) * kTile + i);
        __m128 r2 = _mm_loadu_ps(b + (j + 2) * kTile + i), r3 = _mm_loadu_ps(b + (j + 3) * kTile + i);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(o + (i + 0) * os + j, r0);
        _mm_storeu_ps(o + (i + 1) * os + j, r1);
        _mm_storeu_ps(o + (i + 2) * os + j, r2);
        _mm_storeu_ps(o + (i + 3) * os + j, r3);
      }
      for (; j < nj; ++j)
        for (int64_t ii = i; ii < i + 4; ++ii) op[ii * os + j] = buf[j * kTile + ii];
    }
  }
#endif
  for (; i < ni; ++i)
    for (int64_t j = 0; j < nj; ++j) op[i * os + j] = buf[j * kTile + i];
}

#if defined(__SSE2__)
// nj (up to 8) input runs of K elements, `ls` apart, into K output rows
// (`os` apart) at their first nj columns: out[i * os + j] = in[j * ls + i].
inline void transpose_runs_of_eight(const float* in, int64_t ls, int64_t K, int64_t nj, float* out, int64_t os) {
  int64_t i = 0;
  if (nj == 8) {
    for (; i + 4 <= K; i += 4)
      for (int64_t jj = 0; jj < 8; jj += 4) {
        const float* ip = in + jj * ls + i;
        __m128 r0 = _mm_loadu_ps(ip), r1 = _mm_loadu_ps(ip + ls), r2 = _mm_loadu_ps(ip + 2 * ls),
               r3 = _mm_loadu_ps(ip + 3 * ls);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        float* op = out + i * os + jj;
        _mm_storeu_ps(op, r0);
        _mm_storeu_ps(op + os, r1);
        _mm_storeu_ps(op + 2 * os, r2);
        _mm_storeu_ps(op + 3 * os, r3);
      }
  }
  for (; i < K; ++i)
    for (int64_t j = 0; j < nj; ++j) out[i * os + j] = in[j * ls + i];
}
#endif

template <typename T>
void copy_tiles(const StridedPlan& p, const T* in, T* out, int threads) {
  const size_t r = p.dims.size();
  const size_t k = static_cast<size_t>(p.tile_dim);
  const int64_t L = p.dims[r - 1], ls = p.in_strides[r - 1], K = p.dims[k];
  // The other dims, walked as one outer index; output strides are row-major.
  std::array<int64_t, kMaxDims> odims{}, ostr{}, istr{};
  size_t no = 0;
  int64_t os_k = 1, acc = 1;
  std::array<int64_t, kMaxDims> out_strides{};
  for (size_t d = r; d-- > 0;) {
    out_strides[d] = acc;
    acc *= p.dims[d];
  }
  os_k = out_strides[k];
  for (size_t d = 0; d + 1 < r; ++d) {
    if (d == k) continue;
    odims[no] = p.dims[d];
    ostr[no] = out_strides[d];
    istr[no] = p.in_strides[d];
    ++no;
  }
  const int64_t outer = p.numel / (K * L);
#if defined(__SSE2__)
  // 4-byte elements: eight input runs at a time, each read along its whole
  // length (k) in 4 x 4 blocks transposed in registers and stored straight
  // into the output. Eight read streams, where the tiles below keep all L
  // runs of a 32-wide block of k open at once: NCHW -> NHWC of [8, 64, 56, 56]
  // took 1.5-2.1 ms in tiles, 0.9-1.0 ms this way (onnxruntime 0.7-0.9), and
  // [4096, 4096] 22-34 against 18-19 ms. Not where the runs lie a multiple of
  // 4 KiB apart: eight of them then share one set of an 8-way L1 ([1024, 1024]
  // ran 0.5-1.9 ms in tiles, 0.8-1.0 this way).
  if constexpr (sizeof(T) == 4) {
    if ((ls * 4) % 4096 != 0) {
      const int64_t nrb = (L + 7) / 8;
      parallel_for(outer * nrb, threads, std::max<int64_t>(1, kCopyGrain / (8 * K)), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / nrb;
          const int64_t j0 = (t % nrb) * 8, nj = std::min<int64_t>(8, L - j0);
          int64_t ibase = p.in_offset, obase = 0;
          for (size_t d = no; d-- > 0;) {
            const int64_t i = o % odims[d];
            o /= odims[d];
            ibase += i * istr[d];
            obase += i * ostr[d];
          }
          transpose_runs_of_eight(reinterpret_cast<const float*>(in) + ibase + j0 * ls, ls, K, nj,
                                  reinterpret_cast<float*>(out) + obase + j0, os_k);
        }
      });
      return;
    }
  }
#endif
  const int64_t nkb = (K + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, kCopyGrain / (kTile * L));
  parallel_for(outer * nkb, threads, grain, [&](int64_t b, int64_t e) {
    T buf[kTile * kTile];
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nkb, kb = t % nkb;
      int64_t ibase = p.in_offset, obase = 0;
      for (size_t d = no; d-- > 0;) {
        int64_t i = o % odims[d];
        o /= odims[d];
        ibase += i * istr[d];
        obase += i * ostr[d];
      }
      const int64_t i0 = kb * kTile, i1 = std::min(K, i0 + kTile), ni = i1 - i0;
      for (int64_t j0 = 0; j0 < L; j0 += kTile) {
        const int64_t j1 = std::min(L, j0 + kTile), nj = j1 - j0;
        // Through a buffer: each input run (contiguous along k) is read once,
        // start to end, and each output run written once, so no cache line
        // has to stay resident across the tile. Reading columns in place
        // instead thrashes when the strides are powers of two (they map to a
        // handful of cache sets).
        for (int64_t j = 0; j < nj; ++j) {
          const T* ip = in + ibase + (j0 + j) * ls + i0;
          for (int64_t i = 0; i < ni; ++i) buf[j * kTile + i] = ip[i];
        }
        write_transposed(buf, ni, nj, out + obase + i0 * os_k + j0, os_k);
      }
    }
  });
}

}  // namespace

StridedPlan make_strided_plan(const Shape& out_dims, const std::vector<int64_t>& in_strides,
                              int64_t in_offset) {
  StridedPlan p;
  p.in_offset = in_offset;
  p.numel = shape_numel(out_dims);
  if (p.numel == 0) return p;
  // Drop size-1 dims (they never advance), then merge dim d into its outer
  // neighbour when stepping the outer one equals a full sweep of d.
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    if (!p.dims.empty() && p.in_strides.back() == in_strides[d] * out_dims[d]) {
      p.dims.back() *= out_dims[d];
      p.in_strides.back() = in_strides[d];
    } else {
      p.dims.push_back(out_dims[d]);
      p.in_strides.push_back(in_strides[d]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    p.in_strides.push_back(1);
  }
  if (p.dims.size() > kMaxDims)
    throw Error(ErrorKind::kUnsupportedOp, "strided copy over more than 16 non-contiguous dims");
  const size_t r = p.dims.size();
  const int64_t ls = p.in_strides[r - 1];
  if (r >= 2 && ls != 0 && ls != 1 && p.dims[r - 1] >= 4) {
    for (size_t d = 0; d + 1 < r; ++d)
      if (p.in_strides[d] == 1 && p.dims[d] >= 4) p.tile_dim = static_cast<int>(d);
  }
  p.interleave = r >= 2 && p.tile_dim < 0 && ls != 0 && ls != 1 && p.dims[r - 1] >= 2 && p.dims[r - 1] <= 4 &&
                 p.in_strides[r - 2] == 1;
  return p;
}

void strided_copy(const StridedPlan& p, size_t elem_size, const void* in, void* out, int threads) {
  if (p.numel == 0) return;
  auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    if (p.tile_dim >= 0)
      copy_tiles(p, src, dst, threads);
    else if (p.interleave)
      copy_interleaved(p, src, dst, threads);
    else
      copy_rows(p, src, dst, threads);
  };
  switch (elem_size) {
    case 1: go(TypeTag<uint8_t>{}); break;
    case 2: go(TypeTag<uint16_t>{}); break;
    case 4: go(TypeTag<uint32_t>{}); break;
    case 8: go(TypeTag<uint64_t>{}); break;
    default: throw Error(ErrorKind::kDType, "strided copy of " + std::to_string(elem_size) + "-byte elements");
  }
}

}  // namespace twinfer::tensor
