// ConvTranspose geometry shared by the reference kernel
// (ops/vision/conv_transpose.cc) and the oneDNN one
// (backends/cpu/onednn_deconv.cc).
//
// y[n, m, o] = B[m] + sum over the input channels c of m's group, the input
// positions i and kernel taps k with o = i*stride - pad_begin + k*dilation
// of x[n, c, i] * W[c, m mod (M/group), k]. The output size per spatial
// dim is output_shape when given, else
//   stride*(in-1) + output_padding + (k-1)*dilation + 1 - pad_begin - pad_end
// with auto_pad SAME_* (or output_shape) splitting the total padding as the
// spec and onnxruntime do.
#pragma once
#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "graph/ir.h"
#include "ops/kernel.h"

namespace twinfer::vision {

struct DeconvSpec {
  Shape x, w, y;  // [N, C, in...], [C, M/group, k...], [N, M, out...]
  int64_t group = 1;
  size_t nsp = 0;
  std::vector<int64_t> kernel, stride, dilation, pad_begin;
  // Padding at the end implied by the output size (negative when the output
  // extends past the last input contribution, e.g. with output_padding).
  std::vector<int64_t> pad_end;
  bool has_bias = false;
};

// Output spatial sizes (-1 where `in` is -1) and the begin pads, from the
// node's attributes. Throws Error naming the node on bad attributes.
struct DeconvGeometry {
  std::vector<int64_t> out, pad_begin, kernel, stride, dilation;
};
DeconvGeometry deconv_geometry(const graph::Node& n, const std::vector<int64_t>& in,
                               const std::vector<int64_t>& wk);

// Reads and checks the node against its concrete shapes.
DeconvSpec deconv_spec(const KernelBuildInfo& info);

}  // namespace twinfer::vision
