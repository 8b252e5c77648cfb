// ConvInteger and QLinearConv: where x and w sit among the inputs and the
// node's geometry, shared by the shape rules (qconv.cc), the CPU kernels
// (backends/cpu/onednn_conv_integer.cc) and the CUDA ConvInteger
// (backends/cuda/integer_ops.cu).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/nn/window.h"

namespace twinfer::quant {

struct ConvIO {
  size_t x, w;
};
inline constexpr ConvIO kConvInteger{0, 1};
inline constexpr ConvIO kQLinearConv{0, 3};

// The geometry of one node, spatial dims padded to 3 (leading 1s): the CPU
// kernels' im2col and the CUDA ConvInteger's direct loop walk the same one.
struct ConvGeom {
  int64_t N = 1, C = 1, M = 1, G = 1, Cg = 1, Mg = 1, K = 1, P = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          p[3] = {0, 0, 0};
};

inline ConvGeom conv_geom(const KernelBuildInfo& info, const ConvIO& io) {
  const graph::Node& n = info.node();
  const Shape x = info.input_shape(io.x), w = info.input_shape(io.w), y = info.output_shape(0);
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    info.fail(ErrorKind::kShape, "input " + shape_str(x) + " and weights " + shape_str(w) +
                                     " do not fit a 1-3 D convolution");
  ConvGeom g;
  const size_t nsp = x.size() - 2;
  g.N = x[0];
  g.C = x[1];
  g.M = w[0];
  g.G = n.attr_int("group", 1);
  if (g.G < 1 || g.C != w[1] * g.G || g.M % g.G != 0)
    info.fail(ErrorKind::kShape, "input " + shape_str(x) + ", weights " + shape_str(w) + " and group " +
                                     std::to_string(g.G) + " do not fit");
  g.Cg = g.C / g.G;
  g.Mg = g.M / g.G;
  std::vector<int64_t> wk(w.begin() + 2, w.end());
  nn::Window win = nn::parse_window(n, nsp, &wk, nn::WindowOptions{true, false});
  if (win.kernel != wk)
    info.fail(ErrorKind::kShape, "kernel_shape differs from the weights' spatial dims " + shape_str(w));
  nn::resolve_pads(win, Shape(x.begin() + 2, x.end()));
  Shape expect{g.N, g.M};
  for (size_t i = 0; i < nsp; ++i) expect.push_back(nn::window_output_size(win, i, x[2 + i], n));
  if (expect != y)
    info.fail(ErrorKind::kShape, "output shape " + shape_str(y) + " differs from the expected " + shape_str(expect));
  const size_t off = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    g.in[off + i] = x[2 + i];
    g.out[off + i] = y[2 + i];
    g.k[off + i] = win.kernel[i];
    g.s[off + i] = win.stride[i];
    g.d[off + i] = win.dilation[i];
    g.p[off + i] = win.pad_begin[i];
  }
  g.K = g.Cg * g.k[0] * g.k[1] * g.k[2];
  g.P = g.out[0] * g.out[1] * g.out[2];
  return g;
}


}  // namespace twinfer::quant
