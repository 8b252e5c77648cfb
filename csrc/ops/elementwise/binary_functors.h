// The arithmetic of every binary (and variadic/comparison/logic) elementwise
// op, written once for the CPU kernels and the future CUDA ones. operator()
// takes compute types (float/double or the integer type; 16-bit floats are
// loaded into float by the kernels) and returns the compute/result type.
#pragma once
#include <type_traits>

#include "ops/elementwise/functors.h"

namespace twinfer::ew {

// Unsigned type at least as wide as int, so integer arithmetic wraps
// (two's complement) instead of overflowing signed ints (undefined), also
// for 8/16-bit types that C++ promotes to int.
template <typename T>
using wrap_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct Add {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(wrap_t<T>(a) + wrap_t<T>(b));
    else return a + b;
  }
};
struct Sub {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(wrap_t<T>(a) - wrap_t<T>(b));
    else return a - b;
  }
};
struct Mul {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) return static_cast<T>(wrap_t<T>(a) * wrap_t<T>(b));
    else return a * b;
  }
};
// Integer division truncates toward zero (C, onnxruntime). x/0 would trap on
// x86 (SIGFPE) and kill the interpreter, so it gives 0 (as NumPy does);
// INT_MIN / -1 wraps to INT_MIN instead of trapping.
struct Div {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed<T>::value) {
        if (b == T(-1)) return negate(a);
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};
// Mod with fmod = 0: the remainder with the sign of the divisor (Python's %,
// numpy.mod). Integer zero divisors give 0 (see Div). Floats follow the ONNX
// rules: a zero result takes the divisor's sign, x % inf is x when the signs
// agree and inf otherwise, x % 0 and inf % y are NaN.
struct Mod {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point<T>::value) {
      T r = m_fmod(a, b);
      if (r != T(0)) {
        if ((r < T(0)) != (b < T(0))) r += b;
      } else {
        r = b < T(0) ? -T(0) : T(0);
      }
      return r;
    } else if constexpr (std::is_signed<T>::value) {
      if (b == T(0)) return T(0);
      if (b == T(-1)) return T(0);
      T r = static_cast<T>(a % b);
      return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b) : r;
    } else {
      if (b == T(0)) return T(0);
      return static_cast<T>(a % b);
    }
  }
};
// Mod with fmod = 1: C's fmod / %, the result has the sign of the dividend.
struct FMod {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed<T>::value) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    } else {
      return m_fmod(a, b);
    }
  }
};

// Pow: base of type A, exponent of type B (ONNX lets them differ). Float
// bases use libm pow; integer bases with integer exponents multiply exactly
// (wrapping on overflow); a negative exponent truncates 1/x^n toward zero.
struct Pow {
  template <typename A, typename B> TWINFER_HD A operator()(A a, B b) const {
    if constexpr (std::is_floating_point<A>::value) {
      return m_pow(a, static_cast<A>(b));
    } else if constexpr (std::is_integral<B>::value) {
      if constexpr (std::is_signed<B>::value) {
        if (b < B(0)) {
          if (a == A(1)) return A(1);
          if constexpr (std::is_signed<A>::value) {
            if (a == A(-1)) return (b & B(1)) ? A(-1) : A(1);
          }
          return A(0);
        }
      }
      wrap_t<A> base = static_cast<wrap_t<A>>(a), r = 1;
      for (B e = b; e != B(0); e = static_cast<B>(e >> 1)) {
        if (e & B(1)) r *= base;
        base *= base;
      }
      return static_cast<A>(r);
    } else {
      // Integer base, float exponent: pow in double, truncated toward zero.
      return convert<A>(m_pow(static_cast<double>(a), static_cast<double>(b)));
    }
  }
};
struct Square {  // Pow with a constant exponent of 2
  template <typename A, typename B> TWINFER_HD A operator()(A a, B) const { return Mul{}(a, a); }
};

struct PRelu {
  template <typename T> TWINFER_HD T operator()(T x, T slope) const {
    if constexpr (std::is_unsigned<T>::value) return x;
    else return x < T(0) ? Mul{}(slope, x) : x;
  }
};

// Max/Min propagate NaN from either side (NumPy's maximum/minimum).
struct Max {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    return (a > b || m_isnan(a)) ? a : b;
  }
};
struct Min {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    return (a < b || m_isnan(a)) ? a : b;
  }
};

// ---- comparisons (bool out) -------------------------------------------------
struct Equal {
  template <typename T> TWINFER_HD bool operator()(T a, T b) const { return a == b; }
};
struct Less {
  template <typename T> TWINFER_HD bool operator()(T a, T b) const { return a < b; }
};
struct Greater {
  template <typename T> TWINFER_HD bool operator()(T a, T b) const { return a > b; }
};
struct LessOrEqual {
  template <typename T> TWINFER_HD bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOrEqual {
  template <typename T> TWINFER_HD bool operator()(T a, T b) const { return a >= b; }
};

// ---- logic on bool, bitwise on integers -------------------------------------
struct And {
  TWINFER_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  TWINFER_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct Xor {
  TWINFER_HD bool operator()(bool a, bool b) const { return a != b; }
};
struct BitwiseAnd {
  template <typename T> TWINFER_HD T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
struct BitwiseOr {
  template <typename T> TWINFER_HD T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
struct BitwiseXor {
  template <typename T> TWINFER_HD T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};
// Shifts. A shift by a negative amount or by the bit width or more gives what
// the sign fill alone gives (C++ leaves it undefined): 0, or -1 for a right
// shift of a negative signed value. Signed right shifts are arithmetic; signed
// left shifts shift the two's complement bits, dropping those past the sign.
template <typename T> TWINFER_HD bool shift_out_of_range(T b) {
  if constexpr (std::is_signed<T>::value) {
    if (b < T(0)) return true;
  }
  return static_cast<uint64_t>(b) >= sizeof(T) * 8;
}
struct BitShiftLeft {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    if (shift_out_of_range(b)) return T(0);
    return static_cast<T>(static_cast<U>(wrap_t<T>(static_cast<U>(a)) << b));
  }
};
struct BitShiftRight {
  template <typename T> TWINFER_HD T operator()(T a, T b) const {
    if (shift_out_of_range(b)) {
      if constexpr (std::is_signed<T>::value) return a < T(0) ? T(-1) : T(0);
      return T(0);
    }
    return static_cast<T>(a >> b);
  }
};

}  // namespace twinfer::ew
