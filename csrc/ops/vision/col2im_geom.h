// Col2Im's geometry (image, block, dilations, pads, strides, the block count
// per dim), read and checked once for the shape rule and CPU kernel
// (scatter_ops.cc) and the CUDA kernel (backends/cuda/vision.cu). Ctx is
// InferContext or KernelBuildInfo (for fail()).
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/ir.h"

namespace twinfer::vision {

// An ints attribute of exactly `len` values (default: `len` times `dflt`).
inline std::vector<int64_t> ints_attr(const graph::Node& n, const char* name, size_t len, int64_t dflt) {
  std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(len, dflt));
  if (v.size() != len)
    throw Error(ErrorKind::kModelFormat,
                std::string(name) + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(len),
                n.name, n.op_type);
  return v;
}

struct Col2ImGeom {
  std::vector<int64_t> image, block, dil, pads, stride, blocks;  // blocks: count per dim
  int64_t L = 1, K = 1;
};

template <typename Ctx>
Col2ImGeom col2im_geom(const Ctx& c, const std::vector<int64_t>& image, const std::vector<int64_t>& block) {
  const graph::Node& n = c.node();
  Col2ImGeom g;
  const size_t nsp = image.size();
  if (block.size() != nsp || nsp == 0) c.fail(ErrorKind::kShape, "image_shape and block_shape differ in length");
  g.image = image;
  g.block = block;
  g.dil = ints_attr(n, "dilations", nsp, 1);
  g.pads = ints_attr(n, "pads", 2 * nsp, 0);
  g.stride = ints_attr(n, "strides", nsp, 1);
  for (size_t i = 0; i < nsp; ++i) {
    if (block[i] < 1 || g.dil[i] < 1 || g.stride[i] < 1 || image[i] < 0)
      c.fail(ErrorKind::kInvalidArgument, "block_shape, dilations and strides must be >= 1");
    const int64_t span = image[i] + g.pads[i] + g.pads[nsp + i] - (g.dil[i] * (block[i] - 1) + 1);
    if (span < 0) c.fail(ErrorKind::kShape, "the block does not fit the padded image");
    g.blocks.push_back(span / g.stride[i] + 1);
    g.L *= g.blocks.back();
    g.K *= block[i];
  }
  return g;
}

}  // namespace twinfer::vision
