// Sliding-window geometry shared by Conv and the pooling ops: the
// kernel_shape / strides / dilations / pads / auto_pad / ceil_mode
// attributes, validated once, and the output size rule for each spatial dim
// (symbolic at load time, concrete when kernels are built).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "graph/ir.h"

namespace twinfer::nn {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

struct Window {
  size_t nsp = 0;                  // number of spatial dims
  std::vector<int64_t> kernel;     // per spatial dim
  std::vector<int64_t> stride;
  std::vector<int64_t> dilation;
  std::vector<int64_t> pad_begin;  // explicit pads (NOTSET); resolved ones after resolve()
  std::vector<int64_t> pad_end;
  AutoPad auto_pad = AutoPad::kNotSet;
  bool ceil_mode = false;

  int64_t effective_kernel(size_t i) const { return (kernel[i] - 1) * dilation[i] + 1; }
};

struct WindowOptions {
  bool allow_dilations = true;
  bool allow_ceil_mode = false;
};

// Reads and checks the window attributes of `node` for `nsp` spatial dims.
// `kernel_fallback` is used when kernel_shape is absent (Conv: the weights'
// spatial dims); pass nullptr to make kernel_shape required.
// Throws Error(kUnsupportedOp / kModelFormat) naming the node.
Window parse_window(const graph::Node& node, size_t nsp, const std::vector<int64_t>* kernel_fallback,
                    const WindowOptions& opt);

// Output size of spatial dim i for a concrete input size; throws kShape
// (naming the node) when the window does not fit.
int64_t window_output_size(const Window& w, size_t i, int64_t in, const graph::Node& node);

// The same for a possibly unknown input dim (load-time shape inference).
Dim window_output_dim(const Window& w, size_t i, const Dim& in, const graph::Node& node);

// Fills pad_begin/pad_end for concrete input sizes (auto_pad SAME_*/VALID
// computed here; ceil_mode leaves pads as they are: the kernels clip windows).
void resolve_pads(Window& w, const Shape& in_spatial);

}  // namespace twinfer::nn
