// ConvInteger and QLinearConv: where x and w sit among the inputs, shared by
// the shape rules (qconv.cc) and the CPU kernels (backends/cpu/onednn_conv_integer.cc).
#pragma once
#include <cstddef>

namespace twinfer::quant {

struct ConvIO {
  size_t x, w;
};
inline constexpr ConvIO kConvInteger{0, 1};
inline constexpr ConvIO kQLinearConv{0, 3};

}  // namespace twinfer::quant
