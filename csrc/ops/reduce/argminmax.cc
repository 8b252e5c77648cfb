// ArgMax / ArgMin over one axis (keepdims, select_last_index), int64 output.
// The tensor is seen as [outer, n, inner]: with inner == 1 each output scans
// a contiguous row; otherwise blocks of up to 256 inner positions keep their
// best value and index on the stack while the rows stream through in order.
#include <algorithm>

#include "core/parallel.h"
#include "ops/reduce/arg_better.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::reduce {
namespace {

constexpr unsigned kArgTypes = ew::kNumericTypes;
constexpr int64_t kBlock = 256;

template <typename Ctx>
int64_t arg_axis(const Ctx& c, int64_t rank) {
  int64_t axis = c.node().attr_int("axis", 0);
  if (axis < -rank || axis >= rank)
    c.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void arg_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kArgTypes, dt)))
    c.fail(ErrorKind::kDType, c.node().op_type + " does not support dtype " + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, DType::kInt64);
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  if (!(r >= 1)) c.fail(ErrorKind::kShape, "input must have rank >= 1");
  const int64_t axis = arg_axis(c, r);
  if (!(!in[axis].known() || in[axis].value > 0))
    c.fail(ErrorKind::kShape,
           "cannot take " + c.node().op_type + " over an empty axis (input " + sym_shape_str(in) + ")");
  SymShape out;
  const bool keep = c.node().attr_int("keepdims", 1) != 0;
  for (int64_t d = 0; d < r; ++d) {
    if (d != axis)
      out.push_back(in[d]);
    else if (keep)
      out.push_back(Dim(1));
  }
  c.set_output(0, DType::kInt64, out);
}

template <typename T, bool kMax, bool kLast>
void arg_run(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, int threads) {
  using C = ew::compute_t<T>;
  if (inner == 1) {
    // Contiguous rows, two passes over a row that stays in cache: the
    // extreme value in eight branch-free lanes (max/min instructions), then
    // the first (or last) index holding it. A NaN wins, at its first index.
    parallel_for(outer, threads, std::max<int64_t>(1, 32768 / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* xp = x + o * n;
        C lane[8];
        int nan[8] = {0};
        for (C& l : lane) l = ew::load(xp[0]);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
          for (int k = 0; k < 8; ++k) {
            const C v = ew::load(xp[i + k]);
            lane[k] = kMax ? (v > lane[k] ? v : lane[k]) : (v < lane[k] ? v : lane[k]);
            if constexpr (std::is_floating_point_v<C>) nan[k] |= v != v;
          }
        for (; i < n; ++i) {
          const C v = ew::load(xp[i]);
          lane[0] = kMax ? (v > lane[0] ? v : lane[0]) : (v < lane[0] ? v : lane[0]);
          if constexpr (std::is_floating_point_v<C>) nan[0] |= v != v;
        }
        C m = lane[0];
        for (int k = 1; k < 8; ++k) {
          m = kMax ? (lane[k] > m ? lane[k] : m) : (lane[k] < m ? lane[k] : m);
          nan[0] |= nan[k];
        }
        int64_t bi = 0;
        if (nan[0]) {
          while (!(ew::load(xp[bi]) != ew::load(xp[bi]))) ++bi;
        } else if (kLast) {
          bi = n - 1;
          while (ew::load(xp[bi]) != m) --bi;
        } else {
          while (ew::load(xp[bi]) != m) ++bi;
        }
        y[o] = bi;
      }
    });
    return;
  }
  const int64_t nb = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, 32768 / (n * std::min(inner, kBlock)));
  parallel_for(outer * nb, threads, grain, [&](int64_t b, int64_t e) {
    C best[kBlock];
    int64_t bi[kBlock];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nb, j0 = (t % nb) * kBlock, m = std::min(kBlock, inner - j0);
      const T* xo = x + o * n * inner + j0;
      for (int64_t j = 0; j < m; ++j) {
        best[j] = ew::load(xo[j]);
        bi[j] = 0;
      }
      for (int64_t i = 1; i < n; ++i) {
        const T* xi = xo + i * inner;
        for (int64_t j = 0; j < m; ++j) {
          const C v = ew::load(xi[j]);
          if (arg_better<kMax, kLast>(v, best[j])) {
            best[j] = v;
            bi[j] = i;
          }
        }
      }
      std::copy(bi, bi + m, y + o * inner + j0);
    }
  });
}

class ArgKernel final : public Kernel {
 public:
  explicit ArgKernel(const KernelBuildInfo& info)
      : max_(info.node().op_type == "ArgMax"), last_(info.node().attr_int("select_last_index", 0) != 0) {
    const Shape in = info.input_shape(0);
    const int64_t axis = arg_axis(info, static_cast<int64_t>(in.size()));
    for (int64_t d = 0; d < axis; ++d) outer_ *= in[d];
    n_ = in[axis];
    for (size_t d = axis + 1; d < in.size(); ++d) inner_ *= in[d];
    if (n_ == 0 && outer_ * inner_ > 0) info.fail(ErrorKind::kShape, "cannot reduce an empty axis");
  }

  void run(KernelContext& ctx) const override {
    if (outer_ * inner_ == 0) return;
    ew::dispatch_typeset<kArgTypes>(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      int64_t* y = ctx.outputs[0].as<int64_t>();
      const int th = ctx.num_threads;
      if (max_)
        last_ ? arg_run<T, true, true>(x, y, outer_, n_, inner_, th) : arg_run<T, true, false>(x, y, outer_, n_, inner_, th);
      else
        last_ ? arg_run<T, false, true>(x, y, outer_, n_, inner_, th) : arg_run<T, false, false>(x, y, outer_, n_, inner_, th);
    });
  }

 private:
  bool max_, last_;
  int64_t outer_ = 1, n_ = 0, inner_ = 1;
};

bool arg_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kArgTypes, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("ArgMax", arg_infer);
TWINFER_REGISTER_KERNEL("ArgMax", Backend::kCPU, 0, arg_supports, make_kernel<ArgKernel>);
TWINFER_REGISTER_SCHEMA("ArgMin", arg_infer);
TWINFER_REGISTER_KERNEL("ArgMin", Backend::kCPU, 0, arg_supports, make_kernel<ArgKernel>);

}  // namespace twinfer::reduce
