// LRN's attributes and geometry, read once for the CPU kernel (lrn.cc) and
// the CUDA one (backends/cuda/lrn.cu).
#pragma once
#include "ops/kernel.h"

namespace twinfer::vision {

struct LrnParams {
  int64_t size = 1, N = 0, C = 0, P = 1;  // window, batch, channels, elements per (n, c)
  float alpha = 1e-4f, beta = 0.75f, bias = 1.f;
};

inline LrnParams lrn_params(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  const Shape x = info.input_shape(0);
  if (x.size() < 3) info.fail(ErrorKind::kShape, "input must have rank >= 3");
  LrnParams p;
  p.size = n.attr_int("size", 0);
  if (p.size <= 0) info.fail(ErrorKind::kModelFormat, "LRN needs a positive 'size'");
  p.alpha = n.attr_float("alpha", 1e-4f);
  p.beta = n.attr_float("beta", 0.75f);
  p.bias = n.attr_float("bias", 1.0f);
  p.N = x[0];
  p.C = x[1];
  for (size_t i = 2; i < x.size(); ++i) p.P *= x[i];
  return p;
}

}  // namespace twinfer::vision
