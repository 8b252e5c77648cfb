// The reduction walks (see reduce.cc): the input's dims merged into a
// geometry once per kernel, and the three ways of walking it, templated on
// the element type and an op from reduce_ops.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/parallel.h"
#include "core/shape.h"
#include "ops/reduce/reduce_f32.h"
#include "ops/reduce/reduce_ops.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::reduce {

// ---- geometry ------------------------------------------------------------------

struct Geom {
  enum Kind { kCopy, kRows, kCols, kGeneral } kind = kRows;
  int64_t outer = 1, n = 1, inner = 1;      // rows: [outer, n]; columns: [outer, n, inner]
  int64_t out_numel = 1;
  Shape kdims, kstrides, rdims, rstrides;   // general: kept / reduced dims and input strides
};

inline Geom make_geom(const Shape& in, const std::vector<char>& red, bool noop) {
  Geom g;
  g.out_numel = 1;
  for (size_t d = 0; d < in.size(); ++d)
    if (!red[d]) g.out_numel *= in[d];
  if (noop) {
    g.kind = Geom::kCopy;
    return g;
  }
  Shape dims;
  std::vector<char> kind;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    if (!dims.empty() && kind.back() == red[d]) {
      dims.back() *= in[d];
    } else {
      dims.push_back(in[d]);
      kind.push_back(red[d]);
    }
  }
  const size_t r = dims.size();
  if (r == 0) return g;  // one element: rows [1, 1]
  if (r == 1) {
    if (kind[0]) g.n = dims[0];
    else g.outer = dims[0];
    return g;
  }
  if (r == 2 && !kind[0]) {
    g.outer = dims[0];
    g.n = dims[1];
    return g;
  }
  if ((r == 2 && kind[0]) || (r == 3 && !kind[0])) {
    g.kind = Geom::kCols;
    g.outer = r == 3 ? dims[0] : 1;
    g.n = dims[r - 2];
    g.inner = dims[r - 1];
    return g;
  }
  g.kind = Geom::kGeneral;
  const Shape st = contiguous_strides(dims);
  for (size_t d = 0; d < r; ++d) {
    (kind[d] ? g.rdims : g.kdims).push_back(dims[d]);
    (kind[d] ? g.rstrides : g.kstrides).push_back(st[d]);
  }
  g.n = shape_numel(g.rdims);
  if (g.rdims.size() > 16) throw Error(ErrorKind::kUnsupportedOp, "reduction over more than 16 separate dims");
  return g;
}

// ---- walks -------------------------------------------------------------------

// float32 Sum / Mean (a double sum of the elements), Max / Min and
// LogSumExp, whose loops go to reduce_f32.h's multiversioned functions.
template <typename Op>
inline constexpr bool kFloatSum = std::is_same_v<Op, OpSum<float>> || std::is_same_v<Op, OpMean<float>>;
template <typename Op>
inline constexpr bool kFloatMax = std::is_same_v<Op, OpMax<float>>;
template <typename Op>
inline constexpr bool kFloatMin = std::is_same_v<Op, OpMin<float>>;
template <typename Op>
inline constexpr bool kFloatLogSumExp = std::is_same_v<Op, OpLogSumExp<float>>;

constexpr int64_t kColBlock = 256;  // inner positions per column task
constexpr int64_t kReduceGrain = 32768;

template <typename T, typename Op>
typename Op::A row_shift(const T* x, int64_t n, int64_t stride) {
  using A = typename Op::A;
  if constexpr (!Op::kShift) {
    return A(0);
  } else {
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t i = 0; i < n; ++i) m = std::max<A>(m, static_cast<A>(ew::load(x[i * stride])));
    return std::isfinite(m) ? m : A(0);
  }
}

// NaN tracking for Max/Min. Their add() drops NaN (so it vectorises to
// max/min instructions); a separate branch-free pass sums v - v, which is 0
// unless some v is NaN or infinite, and only then is the run rescanned for a
// real NaN. (Folding the check into the max loop stops GCC vectorising it.)
template <typename T>
inline bool has_nan(const T* x, int64_t n, int64_t stride) {
  if constexpr (ew::is_float_v<T>) {
    for (int64_t i = 0; i < n; ++i) {
      const auto v = ew::load(x[i * stride]);
      if (v != v) return true;
    }
  }
  return false;
}

template <typename T>
inline bool row_has_nan(const T* x, int64_t n) {
  if constexpr (ew::is_float_v<T>) {
    using C = ew::compute_t<T>;
    C chk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) {
        const C v = ew::load(x[i + k]);
        chk[k] += v - v;
      }
    for (; i < n; ++i) {
      const C v = ew::load(x[i]);
      chk[0] += v - v;
    }
    for (int k = 1; k < 8; ++k) chk[0] += chk[k];
    return chk[0] != C(0) && has_nan(x, n, 1);
  }
  return false;
}

// The output of an accumulator, NaN when a tracked NaN was seen.
template <typename T, typename Op>
T finish(typename Op::A a, int64_t n, typename Op::A s, bool nan) {
  if constexpr (Op::kNan) {
    if (nan) return ew::store<T>(std::numeric_limits<typename Op::A>::quiet_NaN());
  }
  return ew::store<T>(Op::fin(a, n, s));
}

// One row: eight independent lanes, so the adds pipeline (and vectorise)
// instead of waiting on one accumulator.
template <typename T, typename Op>
T rows_one(const T* xp, int64_t n) {
  using A = typename Op::A;
  const A s = row_shift<T, Op>(xp, n, 1);
  A lane[8];
  for (A& l : lane) l = Op::init();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = Op::add(lane[k], Op::map(ew::load(xp[i + k]), s));
  for (; i < n; ++i) lane[0] = Op::add(lane[0], Op::map(ew::load(xp[i]), s));
  A a = lane[0];
  for (int k = 1; k < 8; ++k) a = Op::add(a, lane[k]);
  return finish<T, Op>(a, n, s, Op::kNan && row_has_nan(xp, n));
}

template <typename T, typename Op>
void rows(const Geom& g, const T* x, T* y, int threads) {
  using A = typename Op::A;
  const int64_t n = g.n;
  parallel_for(g.outer, threads, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* xp = x + o * n;
      if constexpr (kFloatSum<Op>) {  // the same lanes, multiversioned (reduce_f32.h)
        y[o] = finish<T, Op>(sum_float_row(xp, n), n, A(0), false);
      } else if constexpr (kFloatMax<Op> || kFloatMin<Op>) {
        bool nan = false;
        const float a = kFloatMax<Op> ? max_float_row(xp, n, &nan) : min_float_row(xp, n, &nan);
        y[o] = finish<T, Op>(a, n, A(0), nan);
      } else if constexpr (kFloatLogSumExp<Op>) {  // the shift as row_shift has it: the max, 0 when not finite
        bool nan = false;
        const float m = max_float_row(xp, n, &nan);
        const float shift = std::isfinite(m) ? m : 0.f;
        y[o] = finish<T, Op>(sum_exp_float_row(xp, n, shift), n, A(shift), false);
      } else {
        y[o] = rows_one<T, Op>(xp, n);
      }
    }
  });
}

template <typename T, typename Op>
void cols(const Geom& g, const T* x, T* y, int threads) {
  using A = typename Op::A;
  const int64_t n = g.n, inner = g.inner, nb = (inner + kColBlock - 1) / kColBlock;
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, n * std::min(inner, kColBlock)));
  parallel_for(g.outer * nb, threads, grain, [&](int64_t b, int64_t e) {
    A acc[kColBlock], sh[kColBlock], chk[kColBlock];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nb, j0 = (t % nb) * kColBlock, m = std::min(kColBlock, inner - j0);
      const T* xo = x + o * n * inner + j0;
      for (int64_t j = 0; j < m; ++j) {
        acc[j] = Op::init();
        chk[j] = A(0);
      }
      if constexpr (Op::kShift) {
        for (int64_t j = 0; j < m; ++j) sh[j] = -std::numeric_limits<A>::infinity();
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < m; ++j) sh[j] = std::max<A>(sh[j], static_cast<A>(ew::load(xo[k * inner + j])));
        for (int64_t j = 0; j < m; ++j)
          if (!std::isfinite(sh[j])) sh[j] = 0;
      } else {
        for (int64_t j = 0; j < m; ++j) sh[j] = A(0);
      }
      if constexpr (kFloatSum<Op>) {
        add_float_columns(xo, n, inner, m, acc);
      } else {
        for (int64_t k = 0; k < n; ++k) {
          const T* xk = xo + k * inner;
          for (int64_t j = 0; j < m; ++j) acc[j] = Op::add(acc[j], Op::map(ew::load(xk[j]), sh[j]));
          if constexpr (Op::kNan)
            for (int64_t j = 0; j < m; ++j) {
              const A v = ew::load(xk[j]);
              chk[j] += v - v;
            }
        }
      }
      T* yo = y + o * inner + j0;
      for (int64_t j = 0; j < m; ++j)
        yo[j] = finish<T, Op>(acc[j], n, sh[j], Op::kNan && chk[j] != A(0) && has_nan(xo + j, n, inner));
    }
  });
}

template <typename T, typename Op>
void general(const Geom& g, const T* x, T* y, int threads) {
  using A = typename Op::A;
  const size_t nk = g.kdims.size(), nr = g.rdims.size();
  const int64_t rlast = g.rdims[nr - 1], rls = g.rstrides[nr - 1];
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, g.n));
  // Calls f(pointer to a run of the last reduced dim) for every run.
  auto each_run = [&](const T* base, auto&& f) {
    int64_t idx[16] = {0};
    int64_t off = 0;
    for (;;) {
      f(base + off);
      int d = static_cast<int>(nr) - 2;
      for (; d >= 0; --d) {
        off += g.rstrides[d];
        if (++idx[d] < g.rdims[d]) break;
        off -= g.rstrides[d] * g.rdims[d];
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  };
  parallel_for(g.out_numel, threads, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, base = 0;
      for (size_t d = nk; d-- > 0;) {
        base += (rem % g.kdims[d]) * g.kstrides[d];
        rem /= g.kdims[d];
      }
      A s = A(0);
      if constexpr (Op::kShift) {
        A m = -std::numeric_limits<A>::infinity();
        each_run(x + base, [&](const T* p) {
          for (int64_t i = 0; i < rlast; ++i) m = std::max<A>(m, static_cast<A>(ew::load(p[i * rls])));
        });
        s = std::isfinite(m) ? m : A(0);
      }
      A a = Op::init();
      bool nan = false;
      each_run(x + base, [&](const T* p) {
        for (int64_t i = 0; i < rlast; ++i) {
          const A v = Op::map(ew::load(p[i * rls]), s);
          a = Op::add(a, v);
          if constexpr (Op::kNan) nan |= v != v;
        }
      });
      y[o] = finish<T, Op>(a, g.n, s, nan);
    }
  });
}

template <typename T, template <typename> class OpT>
void run_typed(const Geom& g, const void* xv, void* yv, int threads) {
  using Op = OpT<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  if (g.out_numel == 0) return;
  if (g.kind == Geom::kCopy) {
    // No axis to reduce (noop_with_empty_axes): each element is a set of
    // one, which the op still maps, as the reference evaluator does:
    // ReduceSumSquare squares, ReduceL1/L2 give |x|, ReduceLogSum log(x);
    // Sum, Mean, Prod, Max, Min and LogSumExp give x back.
    parallel_for(g.out_numel, threads, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto v = ew::load(x[i]);
        const typename Op::A s = row_shift<T, Op>(x + i, 1, 1);
        y[i] = finish<T, Op>(Op::add(Op::init(), Op::map(v, s)), 1, s, Op::kNan && v != v);
      }
    });
    return;
  }
  if (g.n == 0) {  // reducing an empty set: the op's identity
    std::fill(y, y + g.out_numel, ew::store<T>(Op::fin(Op::init(), 0, typename Op::A(0))));
    return;
  }
  switch (g.kind) {
    case Geom::kRows: return rows<T, Op>(g, x, y, threads);
    case Geom::kCols: return cols<T, Op>(g, x, y, threads);
    default: return general<T, Op>(g, x, y, threads);
  }
}

}  // namespace twinfer::reduce
