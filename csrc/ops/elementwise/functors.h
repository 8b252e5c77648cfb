// The arithmetic of every unary elementwise op, written once. Each functor is
// a small struct whose operator() takes and returns the *compute* type
// (float/double, or the integer type itself); the kernels load 16-bit floats
// into float before calling and round the result back. Attributes live in the
// struct as plain floats, so the same struct can be copied into a CUDA kernel.
// Binary/comparison/logic functors are in binary_functors.h.
#pragma once
#include <type_traits>

#include "ops/elementwise/scalar.h"

namespace twinfer::ew {

// -x for signed integers with two's-complement wrap-around (so -INT_MIN does
// not hit undefined behaviour); plain negation for floats.
template <typename T> TWINFER_HD T negate(T x) {
  if constexpr (std::is_integral<T>::value) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
  } else {
    return -x;
  }
}

// ---- plain math -------------------------------------------------------------
struct Abs {
  template <typename T> TWINFER_HD T operator()(T x) const {
    if constexpr (std::is_floating_point<T>::value) return m_abs(x);
    else if constexpr (std::is_unsigned<T>::value) return x;
    else return x < T(0) ? negate(x) : x;
  }
};
struct Neg {
  template <typename T> TWINFER_HD T operator()(T x) const { return negate(x); }
};
// Sign of NaN is NaN (the comparisons both fail and x comes back).
struct Sign {
  template <typename T> TWINFER_HD T operator()(T x) const {
    if constexpr (std::is_unsigned<T>::value) return x > T(0) ? T(1) : T(0);
    else return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);
  }
};
struct Reciprocal {
  template <typename T> TWINFER_HD T operator()(T x) const { return T(1) / x; }
};

#define TWINFER_EW_LIBM_FUNCTOR(Name, fn)                              \
  struct Name {                                                        \
    template <typename T> TWINFER_HD T operator()(T x) const { return fn(x); } \
  };
TWINFER_EW_LIBM_FUNCTOR(Exp, m_exp)
TWINFER_EW_LIBM_FUNCTOR(Log, m_log)
TWINFER_EW_LIBM_FUNCTOR(Sqrt, m_sqrt)
TWINFER_EW_LIBM_FUNCTOR(Sin, m_sin)
TWINFER_EW_LIBM_FUNCTOR(Cos, m_cos)
TWINFER_EW_LIBM_FUNCTOR(Tan, m_tan)
TWINFER_EW_LIBM_FUNCTOR(Asin, m_asin)
TWINFER_EW_LIBM_FUNCTOR(Acos, m_acos)
TWINFER_EW_LIBM_FUNCTOR(Atan, m_atan)
TWINFER_EW_LIBM_FUNCTOR(Sinh, m_sinh)
TWINFER_EW_LIBM_FUNCTOR(Cosh, m_cosh)
TWINFER_EW_LIBM_FUNCTOR(Asinh, m_asinh)
TWINFER_EW_LIBM_FUNCTOR(Acosh, m_acosh)
TWINFER_EW_LIBM_FUNCTOR(Atanh, m_atanh)
TWINFER_EW_LIBM_FUNCTOR(Tanh, m_tanh)
TWINFER_EW_LIBM_FUNCTOR(Erf, m_erf)
TWINFER_EW_LIBM_FUNCTOR(Floor, m_floor)
TWINFER_EW_LIBM_FUNCTOR(Ceil, m_ceil)
TWINFER_EW_LIBM_FUNCTOR(Round, m_round_even)  // half to even
#undef TWINFER_EW_LIBM_FUNCTOR

// ---- predicates (bool out) and logic ----------------------------------------
struct IsNaN {
  template <typename T> TWINFER_HD bool operator()(T x) const { return m_isnan(x); }
};
struct IsInf {
  bool detect_positive = true, detect_negative = true;
  template <typename T> TWINFER_HD bool operator()(T x) const {
    return m_isinf(x) && (x > T(0) ? detect_positive : detect_negative);
  }
};
struct Not {
  TWINFER_HD bool operator()(bool x) const { return !x; }
};
struct BitwiseNot {
  template <typename T> TWINFER_HD T operator()(T x) const { return static_cast<T>(~x); }
};

// ---- activations ------------------------------------------------------------
// With e = exp(-|x|) <= 1 nothing overflows: 1/(1+e) for x >= 0, e/(1+e)
// below, picked by m_select (no branch on the sign).
struct Sigmoid {
  template <typename T> TWINFER_HD T operator()(T x) const {
    T e = m_exp(-m_abs(x));
    return m_select(x >= T(0), T(1), e) / (T(1) + e);
  }
};
// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow for large x,
// no loss for very negative x, no branch.
struct Softplus {
  template <typename T> TWINFER_HD T operator()(T x) const {
    return (x > T(0) ? x : T(0)) + m_log1p(m_exp(-m_abs(x)));
  }
};
struct Softsign {
  template <typename T> TWINFER_HD T operator()(T x) const { return x / (T(1) + m_abs(x)); }
};
// x < 0 rather than x > 0 so NaN passes through (as in PyTorch/onnxruntime).
struct Relu {
  template <typename T> TWINFER_HD T operator()(T x) const {
    if constexpr (std::is_unsigned<T>::value) return x;
    else return x < T(0) ? T(0) : x;
  }
};
struct LeakyRelu {
  float alpha = 0.01f;
  template <typename T> TWINFER_HD T operator()(T x) const { return x < T(0) ? T(alpha) * x : x; }
};
struct Elu {
  float alpha = 1.0f;
  template <typename T> TWINFER_HD T operator()(T x) const {
    return x < T(0) ? T(alpha) * m_expm1(x) : x;
  }
};
struct Selu {
  float alpha = 1.67326319217681884765625f;
  float gamma = 1.05070102214813232421875f;
  template <typename T> TWINFER_HD T operator()(T x) const {
    return x <= T(0) ? T(gamma) * (T(alpha) * m_exp(x) - T(alpha)) : T(gamma) * x;
  }
};
struct Celu {
  float alpha = 1.0f;
  template <typename T> TWINFER_HD T operator()(T x) const {
    if (m_isnan(x)) return x;  // both selects below would drop it
    T a = T(alpha);
    T neg = a * m_expm1(x / a);
    return (x > T(0) ? x : T(0)) + (neg < T(0) ? neg : T(0));
  }
};
struct ThresholdedRelu {
  float alpha = 1.0f;
  template <typename T> TWINFER_HD T operator()(T x) const { return x > T(alpha) ? x : T(0); }
};
// Clamps to [0, 1]; NaN passes through (both compares are false).
template <typename T> TWINFER_HD T clamp_unit(T y) {
  const T lo = y < T(0) ? T(0) : y;
  return lo > T(1) ? T(1) : lo;
}
struct HardSigmoid {
  float alpha = 0.2f, beta = 0.5f;
  template <typename T> TWINFER_HD T operator()(T x) const { return clamp_unit(T(alpha) * x + T(beta)); }
};
// x * HardSigmoid(alpha = 1/6, beta = 0.5)(x), as the ONNX spec defines it.
struct HardSwish {
  template <typename T> TWINFER_HD T operator()(T x) const { return x * clamp_unit(x * T(1.0f / 6.0f) + T(0.5)); }
};
struct Mish {
  template <typename T> TWINFER_HD T operator()(T x) const { return x * m_tanh(Softplus{}(x)); }
};
// Swish (opset 24): x * sigmoid(alpha x).
struct Swish {
  float alpha = 1.0f;
  template <typename T> TWINFER_HD T operator()(T x) const { return x * Sigmoid{}(T(alpha) * x); }
};
// approximate = "none": 0.5 x (1 + erf(x / sqrt 2)).
struct Gelu {
  template <typename T> TWINFER_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + m_erf(x * T(0.70710678118654752440)));
  }
};
// approximate = "tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <typename T> TWINFER_HD T operator()(T x) const {
    T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + m_tanh(inner));
  }
};
// Integers are shrunk in float (lambd/bias are float attributes), as
// onnxruntime does, and converted back with the defined float->int rule.
struct Shrink {
  float bias = 0.0f, lambd = 0.5f;
  template <typename T> TWINFER_HD T operator()(T x) const {
    using C = std::conditional_t<std::is_same<T, double>::value, double, float>;
    C v = static_cast<C>(x);
    if (v < -C(lambd)) return convert<T>(v + C(bias));
    if (v > C(lambd)) return convert<T>(v - C(bias));
    return T(0);
  }
};

// Clip with bounds of the compute type (read at run time: min/max may be
// graph inputs). min > max gives max everywhere, as the spec says.
template <typename T> struct Clip {
  T lo, hi;
  TWINFER_HD T operator()(T x) const {
    T y = x < lo ? lo : x;
    return y > hi ? hi : y;
  }
};

}  // namespace twinfer::ew
