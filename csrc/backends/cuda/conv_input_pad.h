// A convolution padded unequally at the two ends of a spatial dim has no
// cuDNN kernel: cuDNN takes one pad per dim. Exporters write such pads for
// TensorFlow's SAME padding of a stride-2 layer (tf2onnx, and paddle2onnx's
// PP-OCRv6), so on the GPU it ran on the CPU between two copies. It runs on
// a copy of x with the difference padded in instead, cuDNN then taking the
// smaller pad at both ends (PyTorch's F.pad before a conv does the same).
//
// This header is the plan of that copy: the buffer zeroed, then x copied
// into it as one 3-D copy of byte rows (cudaMemcpy3DAsync, a single node in
// a captured graph). Free of CUDA headers: bindings/kernel_math.cc hands the
// plan to tests/test_conv_input_pad.py, which replays the copy in NumPy and
// checks it against np.pad.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "ops/nn/conv.h"

namespace twinfer::cuda {

struct ConvInputPad {
  Shape padded_x;  // logical [N, C, spatial...] of the copy cuDNN reads
  // x is `slices` slices of `rows` rows of `row_bytes`, contiguous. In the
  // buffer rows are `pitch` bytes apart and slices `slice_rows` rows apart;
  // x's first row lands at byte `first_byte` of row `first_row`.
  int64_t row_bytes = 0, rows = 0, slices = 0;
  int64_t pitch = 0, slice_rows = 0, first_byte = 0, first_row = 0;
  int64_t buffer_bytes = 0;
};

inline bool pads_unequal(const nn::Window& w) {
  for (size_t i = 0; i < w.nsp; ++i)
    if (w.pad_begin[i] != w.pad_end[i]) return true;
  return false;
}

// For a conv with unequal pads: the copy's plan, and c rewritten to what
// cuDNN then sees (x padded, equal pads: the smaller of each dim's two).
// False, c unchanged, where the copy cannot take the layer (3 spatial dims:
// a 3-D copy holds two of them and the slices); *why says so.
inline bool plan_conv_input_pad(nn::ConvSpec* c, int64_t elem, ConvInputPad* out, std::string* why) {
  nn::Window& w = c->win;
  if (w.nsp < 1 || w.nsp > 2) {
    if (why) *why = "unequal pads at the two ends of a dim in a 3-d convolution have no cuDNN kernel";
    return false;
  }
  // A 1-d conv as a 2-d one of height 1.
  const bool two = w.nsp == 2;
  const int64_t n = c->x[0], ch = c->x[1];
  const int64_t h = two ? c->x[2] : 1, wd = c->x[two ? 3 : 2];
  int64_t extra_begin[2] = {0, 0}, extra_end[2] = {0, 0};  // (h, w)
  for (size_t i = 0; i < w.nsp; ++i) {
    const int64_t keep = std::min(w.pad_begin[i], w.pad_end[i]);
    const size_t at = two ? i : 1;
    extra_begin[at] = w.pad_begin[i] - keep;
    extra_end[at] = w.pad_end[i] - keep;
  }
  const int64_t hp = h + extra_begin[0] + extra_end[0], wp = wd + extra_begin[1] + extra_end[1];
  ConvInputPad p;
  p.padded_x = two ? Shape{n, ch, hp, wp} : Shape{n, ch, wp};
  p.rows = h;
  p.slice_rows = hp;
  p.first_row = extra_begin[0];
  if (c->channels_last) {  // [N, H, W, C]: a row is W * C elements, a slice one image
    p.row_bytes = wd * ch * elem;
    p.slices = n;
    p.pitch = wp * ch * elem;
    p.first_byte = extra_begin[1] * ch * elem;
  } else {  // [N, C, H, W]: a row is W elements, a slice one channel of one image
    p.row_bytes = wd * elem;
    p.slices = n * ch;
    p.pitch = wp * elem;
    p.first_byte = extra_begin[1] * elem;
  }
  p.buffer_bytes = n * ch * hp * wp * elem;
  for (size_t i = 0; i < w.nsp; ++i) {
    const int64_t keep = std::min(w.pad_begin[i], w.pad_end[i]);
    w.pad_begin[i] = w.pad_end[i] = keep;
  }
  c->x = p.padded_x;
  *out = p;
  return true;
}

}  // namespace twinfer::cuda
