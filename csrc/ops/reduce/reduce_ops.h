// The ten ONNX Reduce* ops as functors over one accumulator type A:
//   init()            the identity of the reduction
//   map(x, shift)     what one element contributes (x, |x|, x*x, exp(x - shift))
//   add(a, b)         combines two contributions / partial results
//   fin(a, n, shift)  the output value from the accumulator and the count
//   kShift / kNan     needs a max pass first (LogSumExp) / tracks NaN (Max, Min)
// Float inputs (float16/bfloat16 too) accumulate in double, so long sums
// stay accurate whatever the order; Max/Min stay in the compute type.
// Integer inputs sum in 64 bits (wrapping to the element type at the end, as
// the element-typed runtimes do); the ops that leave the integers (Mean, L2,
// LogSum, LogSumExp) work in double and truncate.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/elementwise/scalar.h"

namespace twinfer::reduce {

template <typename T>
using wide_int_t = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
// Sum-like ops: double for floats, 64-bit ints for ints.
template <typename T>
using sum_acc_t = std::conditional_t<ew::is_float_v<T>, double, wide_int_t<T>>;

template <typename T>
struct OpSum {
  using A = sum_acc_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return A(0); }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x); }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A) { return a; }
};

template <typename T>
struct OpMean {
  using A = double;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return 0; }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x); }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t n, A) {
    if constexpr (ew::is_float_v<T>) {
      return a / static_cast<double>(n);
    } else {
      return n == 0 ? 0 : std::trunc(a / static_cast<double>(n));
    }
  }
};

template <typename T>
struct OpProd {
  using A = sum_acc_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return A(1); }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x); }
  static A add(A a, A b) { return a * b; }
  static A fin(A a, int64_t, A) { return a; }
};

// Max / Min: add() is the branch-free compare-select the compiler turns
// into max/min instructions, which drops NaN; kNan asks the walks to track
// NaN elements on the side so the result is NaN when any element is (as in
// NumPy). Sum-like ops propagate NaN by arithmetic.
template <typename T>
struct OpMax {
  using A = ew::compute_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = std::is_floating_point_v<A>;
  static A init() {
    if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::lowest();
  }
  static A map(A x, A) { return x; }
  static A add(A a, A b) { return b > a ? b : a; }
  static A fin(A a, int64_t, A) { return a; }
};

template <typename T>
struct OpMin {
  using A = ew::compute_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = std::is_floating_point_v<A>;
  static A init() {
    if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::max();
  }
  static A map(A x, A) { return x; }
  static A add(A a, A b) { return b < a ? b : a; }
  static A fin(A a, int64_t, A) { return a; }
};

template <typename T>
struct OpL1 {
  using A = sum_acc_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return A(0); }
  static A map(ew::compute_t<T> x, A) {
    A v = static_cast<A>(x);
    if constexpr (std::is_signed_v<A>) return v < 0 ? -v : v;
    else return v;
  }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A) { return a; }
};

template <typename T>
struct OpSumSquare {
  using A = sum_acc_t<T>;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return A(0); }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x) * static_cast<A>(x); }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A) { return a; }
};

template <typename T>
struct OpL2 {
  using A = double;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return 0; }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x) * static_cast<A>(x); }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A) { return std::sqrt(a); }
};

template <typename T>
struct OpLogSum {
  using A = double;
  static constexpr bool kShift = false;
  static constexpr bool kNan = false;
  static A init() { return 0; }
  static A map(ew::compute_t<T> x, A) { return static_cast<A>(x); }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A) { return std::log(a); }
};

// log(sum(exp(x - m))) + m with m the maximum (found in a first pass), so
// large inputs do not overflow exp.
template <typename T>
struct OpLogSumExp {
  using A = double;
  static constexpr bool kShift = true;
  static constexpr bool kNan = false;
  static A init() { return 0; }
  static A map(ew::compute_t<T> x, A shift) {
    // float inputs: exp in float (twice as fast, each term exact to float
    // precision), the sum still in double.
    if constexpr (std::is_same_v<ew::compute_t<T>, float>)
      return static_cast<A>(std::exp(static_cast<float>(static_cast<A>(x) - shift)));
    else
      return std::exp(static_cast<A>(x) - shift);
  }
  static A add(A a, A b) { return a + b; }
  static A fin(A a, int64_t, A shift) { return std::log(a) + shift; }
};

}  // namespace twinfer::reduce
