// Helpers shared by the transformer / normalisation / recurrent kernels
// (csrc/ops/transformer/, csrc/ops/rnn/): every float storage type (float32,
// float64, float16, bfloat16) is computed in its compute type (float for the
// 16-bit ones), read with ew::load and written with ew::store.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::tx {

using ew::compute_t;
using ew::load;
using ew::store;

// f(TypeTag<T>{}) for T the storage type of any float dtype.
template <typename F>
void dispatch_any_float(DType dt, F&& f) {
  ew::dispatch_typeset<ew::kFloatTypes>(dt, f);
}

// supports(): inputs `idx` (those present) are a float dtype, and equal to input 0's.
inline bool float_inputs(const KernelBuildInfo& info, std::initializer_list<size_t> idx, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = info.node().op_type + " supports float types, not " + dtype_name(dt);
    return false;
  }
  for (size_t i : idx)
    if (info.has_input(i) && info.input_dtype(i) != dt) {
      *why = info.node().op_type + " input " + std::to_string(i) + " is " + dtype_name(info.input_dtype(i)) +
             ", input 0 is " + dtype_name(dt);
      return false;
    }
  return true;
}

// Shape rules: input i (when present) has dtype dt.
inline void check_same_dtype_as(InferContext& c, size_t i, DType dt) {
  if (c.has_input(i) && c.input_dtype(i) != dt)
    c.fail(ErrorKind::kDType, c.node().op_type + " input " + std::to_string(i) + " is " + dtype_name(c.input_dtype(i)) +
                                  ", expected " + dtype_name(dt));
}

// Dims equal when both are known.
inline bool dims_compatible(const Dim& a, const Dim& b) { return !a.known() || !b.known() || a.value == b.value; }

// A per-thread buffer of n elements that only grows (no allocation once warm).
template <typename C>
C* thread_buffer(size_t n, int slot = 0) {
  thread_local std::vector<C> bufs[4];
  std::vector<C>& b = bufs[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

template <typename C>
constexpr C neg_inf() {
  return -std::numeric_limits<C>::infinity();
}

}  // namespace twinfer::tx
