// How large one tensor may be, checked without overflow. Shapes from a
// hostile file, or folded from its constants, may be anything; a product
// of dims past int64 would wrap around, not fail.
#pragma once
#include <cstdint>

#include "core/shape.h"

namespace twinfer {

// Most elements one tensor may have (2^47: 512 TiB of float32, beyond any
// machine, small enough that numel * 8 bytes never overflows).
constexpr int64_t kMaxElements = int64_t(1) << 47;

// Whether every dim is >= 0 and their product is at most kMaxElements.
bool shape_fits(const Shape& s);

}  // namespace twinfer
