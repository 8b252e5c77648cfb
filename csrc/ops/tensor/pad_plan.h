// What the CPU Pad kernel (pad.cc) plans when its pads are constants, for
// another backend to run the same padding (backends/cuda/pad.cu): one map
// per dim from output index to input index, -1 for the pad value, so each
// mode's index rule (constant, reflect, edge, wrap, negative pads cropping)
// is written once.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel.h"

namespace twinfer::tensor {

class PadPlanKernel : public Kernel {
 public:
  // False when the pads (or axes) are computed at run time.
  virtual bool fixed_maps() const = 0;
  // Every dim's map, one after another; dim d's starts at map_offsets()[d].
  virtual const std::vector<int64_t>& map_indices() const = 0;
  virtual const std::vector<size_t>& map_offsets() const = 0;
  virtual const Shape& input_shape() const = 0;
  virtual const Shape& output_shape() const = 0;
  // Opset < 11: the pad value from the attribute, as the data's bytes (true);
  // else the value is input 2 when present, zero otherwise (false).
  virtual bool value_from_attribute(uint64_t* bytes) const = 0;
};

}  // namespace twinfer::tensor
