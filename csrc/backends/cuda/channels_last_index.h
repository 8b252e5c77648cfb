// Index math of the CUDA kernels that take channels-last (NHWC) activations
// (com.twinfer.nhwc, graph/domains.h) next to their NCHW form: the conv
// epilogue's channel of an element, a pooling output's window origin, and
// how a reduction splits its input into [outer, len, inner] (or gathers it
// first where the reduced dims are not one block). __host__
// __device__ (or host-only, for the plan-time split) and free of CUDA
// headers, so bindings/kernel_math.cc runs exactly this code on the host and
// tests/test_channels_last_cuda.py checks it against NumPy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/elementwise/offset_calc.h"

namespace twinfer::cuda {

// The channel of element i of a conv output: [N, C, spatial] (i / spatial
// % C) or channels-last [N, spatial, C] (i % C).
struct ConvChannelIndex {
  ew::FastDivmod spatial, channels;
  bool channels_last = false;

  ConvChannelIndex() = default;
  ConvChannelIndex(int64_t c, int64_t sp, bool cl)
      : spatial(static_cast<uint64_t>(sp > 0 ? sp : 1)), channels(static_cast<uint64_t>(c > 0 ? c : 1)),
        channels_last(cl) {}

  TWINFER_HD uint64_t operator()(uint64_t i) const {
    uint64_t q, c;
    if (channels_last) {
      channels.divmod(i, q, c);
    } else {
      uint64_t s;
      spatial.divmod(i, q, s);
      channels.divmod(q, q, c);
    }
    return c;
  }
};

// Output element i of a pooling over up to 3 spatial dims (missing leading
// ones of size 1): its output position and where its (n, c) plane starts in
// x. In x, spatial position (d, h, w) of that plane is at
// base + ((d * in_h + h) * in_w + w) * step: step 1 for NCHW, C for NHWC.
struct PoolIndex {
  int64_t channels = 1;                      // C
  int64_t in_d = 1, in_h = 1, in_w = 1;      // x's spatial dims
  int64_t out_d = 1, out_h = 1, out_w = 1;   // y's
  bool channels_last = false;

  TWINFER_HD int64_t step() const { return channels_last ? channels : 1; }

  TWINFER_HD void position(int64_t i, int64_t* od, int64_t* oh, int64_t* ow, int64_t* base) const {
    const int64_t in_plane = in_d * in_h * in_w;
    int64_t r = i, c = 0;
    if (channels_last) {  // y is [N, OD, OH, OW, C]: the channel innermost
      c = r % channels;
      r /= channels;
    }
    *ow = r % out_w;
    r /= out_w;
    *oh = r % out_h;
    r /= out_h;
    *od = r % out_d;
    r /= out_d;
    // r: the plane n * C + c (NCHW) or the sample n (NHWC).
    *base = channels_last ? r * in_plane * channels + c : r * in_plane;
  }
};

// A reduction as [outer, len, inner]: the reduced dims (red[d] != 0) form
// one block once size-1 dims are dropped, `outer` the kept elements before
// it, `inner` after (1: the trailing case). False, with why, when the
// reduced dims are not one block (e.g. axes [0, 2] of a 3-d tensor).
inline bool reduce_block(const std::vector<int64_t>& shape, const std::vector<char>& red, int64_t* outer,
                         int64_t* len, int64_t* inner, std::string* why) {
  *outer = *len = *inner = 1;
  int phase = 0;  // 0: before the reduced block, 1: inside it, 2: after it
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (red[d]) {
      if (phase == 2) {
        if (why) *why = "a reduction over dims that are not one contiguous block has no CUDA kernel";
        return false;
      }
      phase = 1;
      *len *= shape[d];
    } else if (phase == 0) {
      *outer *= shape[d];
    } else {
      phase = 2;
      *inner *= shape[d];
    }
  }
  return true;
}

// A reduction whose reduced dims are not one block, as a gather of x with
// the kept dims outermost (in their order, so the results come out in the
// output's order) and the reduced ones innermost, then rows of `len`:
// `dims` and `strides` (x's element strides) of the gathered copy, for
// ew::offsets_for; size-1 dims dropped. `outer` results of `len` each.
inline void reduce_gather(const std::vector<int64_t>& shape, const std::vector<char>& red, std::vector<int64_t>* dims,
                          std::vector<int64_t>* strides, int64_t* outer, int64_t* len) {
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  dims->clear();
  strides->clear();
  *outer = *len = 1;
  for (int reduced = 0; reduced < 2; ++reduced)
    for (size_t d = 0; d < rank; ++d)
      if (shape[d] != 1 && (red[d] != 0) == (reduced == 1)) {
        dims->push_back(shape[d]);
        strides->push_back(stride[d]);
        (reduced ? *len : *outer) *= shape[d];
      }
}

}  // namespace twinfer::cuda
