// What the CPU Resize kernel (resize.cc) plans when its scales / sizes / roi
// are constants, for another backend to resize the same way
// (backends/cuda/resize.cu): per dim, either identity or a table of taps
// (input index and weight per output index and tap), so every coordinate
// transformation, nearest rule and kernel shape is written once.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel.h"

namespace twinfer::vision {

struct ResizeAxisTaps {
  bool identity = true;
  int taps = 1;
  // out * taps: the input index of each tap; for nearest (one tap), -1 where
  // the output takes the fill value.
  std::vector<int64_t> index;
  std::vector<float> weight;   // out * taps (nearest: 1)
  std::vector<uint8_t> fill;   // out: 1 where tf_crop_and_resize extrapolates
};

class ResizePlanKernel : public Kernel {
 public:
  // False when scales / sizes / roi are computed at run time.
  virtual bool fixed_plan() const = 0;
  virtual bool nearest() const = 0;
  virtual std::vector<ResizeAxisTaps> axis_taps() const = 0;  // one per dim
  virtual const Shape& input_shape() const = 0;
  virtual const Shape& output_shape() const = 0;
  // The extrapolation value as the data's bytes.
  virtual uint64_t fill_bits() const = 0;
};

}  // namespace twinfer::vision
