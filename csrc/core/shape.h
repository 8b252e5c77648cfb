// Concrete shapes (int64 dims) and possibly-symbolic dims used at load time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace twinfer {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);           // product of dims (1 for a scalar)
std::string shape_str(const Shape& s);          // "[1, 3, 224, 224]"
Shape contiguous_strides(const Shape& s);       // row-major strides in elements
// Strides of [N, C, spatial...] dims stored channels-last ([N, spatial..., C]).
Shape channels_last_strides(const Shape& dims);

// A dim that may be unknown at load time: value >= 0 when known, else a
// symbol ("batch") or nothing at all (an anonymous unknown dim).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from a number is the common case
  explicit Dim(std::string s) : symbol(std::move(s)) {}
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const {
    return known() ? value == o.value : (!o.known() && !symbol.empty() && symbol == o.symbol);
  }
  std::string str() const { return known() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};

using SymShape = std::vector<Dim>;

bool sym_shape_known(const SymShape& s);          // every dim known
Shape sym_shape_values(const SymShape& s);        // requires known
SymShape sym_shape_from(const Shape& s);
std::string sym_shape_str(const SymShape& s);

// Numpy-style multidirectional broadcast; throws kShape on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b);
SymShape broadcast_sym_shapes(const SymShape& a, const SymShape& b);

}  // namespace twinfer
