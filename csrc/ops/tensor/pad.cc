// Pad (opset 11+: pads / constant_value / axes as inputs; before 11 the
// attributes pads ("paddings" in opset 1) and value) in constant,
// reflect, edge and wrap modes. Negative pads crop first; the cropped region
// is then padded. Each dim gets a map from output index to input index (-1 =
// the constant), built once; a run walks output rows, copying the part of a
// row that maps straight through with memcpy.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/host_memory.h"
#include "core/parallel.h"
#include "core/shape_limits.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/pad_plan.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

template <typename Ctx>
PadMode pad_mode(const Ctx& c) {
  const std::string m = c.node().attr_string("mode", "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  if (m == "wrap" && c.opset() >= 19) return PadMode::kWrap;
  c.fail(ErrorKind::kUnsupportedOp, "unsupported pad mode '" + m + "'");
}

// The pads: the attribute before opset 11, else a constant input 1 (false
// when that input is not a constant).
template <typename Ctx>
bool pads_of(const Ctx& c, std::vector<int64_t>* pads) {
  if (c.opset() < 11) {
    *pads = c.node().attr_ints(c.opset() < 2 ? "paddings" : "pads");
    return true;
  }
  if constexpr (std::is_same_v<Ctx, InferContext>) {
    return c.constant_ints(1, pads);
  } else {
    return const_ints(c, 1, pads);
  }
}

// (begin, end) pads for every dim from the pads values and optional axes.
template <typename Ctx>
std::vector<std::pair<int64_t, int64_t>> full_pads(const Ctx& c, const std::vector<int64_t>& pads,
                                                   const std::vector<int64_t>* axes, int64_t rank) {
  std::vector<int64_t> ax;
  if (axes) {
    ax = normalize_axes(c, *axes, rank);
  } else {
    for (int64_t i = 0; i < rank; ++i) ax.push_back(i);
  }
  if (pads.size() != 2 * ax.size())
    c.fail(ErrorKind::kShape, "pads has " + std::to_string(pads.size()) + " values, expected " +
                                  std::to_string(2 * ax.size()));
  std::vector<std::pair<int64_t, int64_t>> r(rank, {0, 0});
  for (size_t i = 0; i < ax.size(); ++i) r[ax[i]] = {pads[i], pads[ax.size() + i]};
  return r;
}

template <typename Ctx>
void check_dim(const Ctx& c, int64_t d, int64_t b, int64_t e, PadMode mode, size_t axis) {
  // Pads past +-kMaxElements are refused before any sum (d <= kMaxElements),
  // so nothing below can wrap.
  const bool crops_all = b < -kMaxElements || e < -kMaxElements;
  const int64_t kept = crops_all ? -1 : d - std::max<int64_t>(0, -b) - std::max<int64_t>(0, -e);
  if (kept < 0 || (b <= kMaxElements && e <= kMaxElements && d + b + e < 0))
    c.fail(ErrorKind::kShape, "pads " + std::to_string(b) + ", " + std::to_string(e) + " crop more than axis " +
                                  std::to_string(axis) + " of size " + std::to_string(d) + " holds");
  if (b > kMaxElements || e > kMaxElements || d + b + e > kMaxElements)
    c.fail(ErrorKind::kShape, "pads " + std::to_string(b) + ", " + std::to_string(e) + " grow axis " +
                                  std::to_string(axis) + " of size " + std::to_string(d) +
                                  " past what a tensor can hold (2^47 elements)");
  if (mode != PadMode::kConstant && kept == 0 && (b > 0 || e > 0))
    c.fail(ErrorKind::kShape, "cannot pad an empty axis " + std::to_string(axis) + " in this mode");
}

void pad_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const PadMode mode = pad_mode(c);
  if (c.opset() >= 11) {
    if (c.input_dtype(1) != DType::kInt64)
      c.fail(ErrorKind::kDType, std::string("pads must be int64, got ") + dtype_name(c.input_dtype(1)));
  } else if (!dtype_is_float(dt)) {
    c.fail(ErrorKind::kDType, std::string("Pad before opset 11 takes floats, got ") + dtype_name(dt));
  }
  if (c.opset() >= 11 && c.has_input(2))
    if (!(c.input_dtype(2) == dt)) c.fail(ErrorKind::kDType, "constant_value must have the data's dtype");
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& in = c.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> pads, axes;
  const bool has_axes = c.opset() >= 18 && c.has_input(3);
  // Both asked for (no short-circuit): fed pads and axes both key the plan
  // (graph/passes/shape_inputs.h).
  const bool pads_known = pads_of(c, &pads);
  const bool axes_known = !has_axes || c.constant_ints(3, &axes);
  if (!pads_known || !axes_known) {
    return c.set_output(0, dt, unknown_dims(r));
  }
  auto p = full_pads(c, pads, has_axes ? &axes : nullptr, r);
  SymShape out = in;
  for (int64_t d = 0; d < r; ++d) {
    if (in[d].known()) {
      check_dim(c, in[d].value, p[d].first, p[d].second, mode, d);
      out[d] = Dim(in[d].value + p[d].first + p[d].second);
    } else if (p[d].first != 0 || p[d].second != 0) {
      out[d] = Dim();
    }
  }
  c.set_output(0, dt, out);
}

// Output index -> input index (-1: the constant) along one dim.
void dim_map(int64_t d, int64_t b, int64_t e, PadMode mode, std::vector<int64_t>* map) {
  const int64_t lo = std::max<int64_t>(0, -b), m = d - lo - std::max<int64_t>(0, -e);
  const int64_t pb = std::max<int64_t>(0, b), out = d + b + e;
  for (int64_t o = 0; o < out; ++o) {
    int64_t v = o - pb;
    if (v < 0 || v >= m) {
      switch (mode) {
        case PadMode::kConstant: v = -1 - lo; break;
        case PadMode::kEdge: v = std::clamp<int64_t>(v, 0, m - 1); break;
        case PadMode::kWrap: v = ((v % m) + m) % m; break;
        case PadMode::kReflect: {
          if (m == 1) {
            v = 0;
          } else {
            const int64_t period = 2 * (m - 1);
            v = ((v % period) + period) % period;
            if (v >= m) v = period - v;
          }
          break;
        }
      }
    }
    map->push_back(v + lo);
  }
}

class PadKernel final : public PadPlanKernel {
 public:
  explicit PadKernel(const KernelBuildInfo& info)
      : mode_(pad_mode(info)), in_(info.input_shape(0)), out_(info.output_shape(0)),
        elem_(dtype_size(info.input_dtype(0))), has_axes_(info.opset() >= 18 && info.has_input(3)) {
    std::vector<int64_t> pads, axes;
    if (pads_of(info, &pads) && (!has_axes_ || const_ints(info, 3, &axes))) {
      build_maps(info, pads, has_axes_ ? &axes : nullptr, &maps_);
      constant_ = true;
    }
    if (info.opset() < 11) {  // the value attribute, as the data's type
      attr_value_ = true;
      const float v = info.node().attr_float("value", 0.f);
      ew::dispatch_typeset<ew::kFloatTypes>(info.input_dtype(0), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T t = ew::store<T>(v);
        std::memcpy(&value_bytes_, &t, sizeof(T));
      });
    }
  }

  bool fixed_maps() const override { return constant_; }
  const std::vector<int64_t>& map_indices() const override { return maps_.idx; }
  const std::vector<size_t>& map_offsets() const override { return maps_.offset; }
  const Shape& input_shape() const override { return in_; }
  const Shape& output_shape() const override { return out_; }
  bool value_from_attribute(uint64_t* bytes) const override {
    *bytes = value_bytes_;
    return attr_value_;
  }

  void run(KernelContext& ctx) const override {
    if (constant_) return go(ctx, maps_);
    // Computed pads (the output shape was known anyway): maps per run.
    Maps m;
    std::vector<int64_t> axes;
    if (has_axes_) axes = view_ints(ctx.inputs[3]);
    RunCheck rc;
    build_maps(rc, view_ints(ctx.inputs[1]), has_axes_ ? &axes : nullptr, &m);
    go(ctx, m);
  }

 private:
  struct Maps {
    std::vector<int64_t> idx;     // all dims' maps, one after another
    std::vector<size_t> offset;   // where dim d's map starts in idx
  };
  struct RunCheck {
    int64_t opset() const { return 18; }
    [[noreturn]] void fail(ErrorKind k, const std::string& m) const { throw Error(k, m, "", "Pad"); }
  };

  template <typename Ctx>
  void build_maps(const Ctx& c, const std::vector<int64_t>& pads, const std::vector<int64_t>* axes, Maps* m) const {
    const int64_t r = static_cast<int64_t>(in_.size());
    auto p = full_pads(c, pads, axes, r);
    int64_t entries = 0;
    for (int64_t d = 0; d < r; ++d) {
      check_dim(c, in_[d], p[d].first, p[d].second, mode_, d);
      if (in_[d] + p[d].first + p[d].second != out_[d])
        c.fail(ErrorKind::kShape, "pads do not give the planned output shape");
      entries += out_[d];
    }
    check_host_allocation(static_cast<size_t>(entries) * sizeof(int64_t), 0, "Pad's index maps");
    m->idx.reserve(static_cast<size_t>(entries));
    for (int64_t d = 0; d < r; ++d) {
      m->offset.push_back(m->idx.size());
      dim_map(in_[d], p[d].first, p[d].second, mode_, &m->idx);
    }
  }

  void go(KernelContext& ctx, const Maps& m) const {
    const size_t r = in_.size();
    const int64_t total = shape_numel(out_);
    if (total == 0) return;
    // The pad value's bytes (zero when constant_value is absent).
    uint64_t value = value_bytes_;
    if (!attr_value_ && ctx.inputs.size() > 2 && ctx.inputs[2].data && ctx.inputs[2].numel() > 0)
      std::memcpy(&value, ctx.inputs[2].data, elem_);
    if (r == 0) {  // a scalar: nothing to pad
      std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, elem_);
      return;
    }
    dispatch_bytes(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      std::memcpy(&v, &value, sizeof(T));
      rows<T>(ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), v, m, ctx.num_threads);
    });
  }

  template <typename T>
  void rows(const T* x, T* y, T value, const Maps& m, int threads) const {
    const size_t r = in_.size();
    const Shape st = contiguous_strides(in_);
    const int64_t last = out_[r - 1];
    const int64_t* lmap = m.idx.data() + m.offset[r - 1];
    // The longest stretch of the last dim that maps straight through: one
    // memcpy. (Not the first one: reflect's left pad maps 3, 2, 1, 0, 1, 2, ...,
    // whose first stretch is one element long.)
    int64_t j0 = 0, j1 = 0;
    for (int64_t s = 0; s < last;) {
      if (lmap[s] < 0) {
        ++s;
        continue;
      }
      int64_t t = s + 1;
      while (t < last && lmap[t] == lmap[s] + (t - s)) ++t;
      if (t - s > j1 - j0) j0 = s, j1 = t;
      s = t;
    }
    const int64_t nrows = shape_numel(out_) / last;
    const size_t lead = r - 1;  // the dims that number the rows
    parallel_for(nrows, threads, std::max<int64_t>(1, kCopyGrain / last), [&](int64_t b, int64_t e) {
      // The row's index in each leading dim, decoded once per chunk and then
      // counted up like an odometer: the offset into x changes by one map
      // lookup a row, with no divisions (they cost as much as a short row's copy).
      std::vector<int64_t> digit(lead + 1, 0);
      for (int64_t rem = b, d = static_cast<int64_t>(lead); d-- > 0;) {
        digit[d] = rem % out_[d];
        rem /= out_[d];
      }
      // Offset and padding of the dims before the last leading one, which
      // change only when the last one wraps.
      int64_t outer_off = 0;
      bool outer_pad = false;
      auto outer = [&] {
        outer_off = 0;
        outer_pad = false;
        for (size_t d = 0; d + 1 < lead; ++d) {
          const int64_t i = m.idx[m.offset[d] + digit[d]];
          if (i < 0) outer_pad = true;
          outer_off += i * st[d];
        }
      };
      outer();
      const int64_t* inner_map = lead ? m.idx.data() + m.offset[lead - 1] : nullptr;
      for (int64_t row = b; row < e; ++row) {
        T* yp = y + row * last;
        bool pad_row = outer_pad;
        int64_t off = outer_off;
        if (lead) {
          const int64_t i = inner_map[digit[lead - 1]];
          pad_row = pad_row || i < 0;
          off += i * st[lead - 1];
          if (++digit[lead - 1] == out_[lead - 1]) {  // carry into the outer dims
            digit[lead - 1] = 0;
            for (size_t d = lead - 1; d-- > 0;) {
              if (++digit[d] < out_[d]) break;
              digit[d] = 0;
            }
            outer();
          }
        }
        if (pad_row) {
          std::fill(yp, yp + last, value);
          continue;
        }
        const T* xp = x + off;
        for (int64_t j = 0; j < j0; ++j) yp[j] = lmap[j] < 0 ? value : xp[lmap[j]];
        if (j1 > j0) std::memcpy(yp + j0, xp + lmap[j0], sizeof(T) * (j1 - j0));
        for (int64_t j = j1; j < last; ++j) yp[j] = lmap[j] < 0 ? value : xp[lmap[j]];
      }
    });
  }

  PadMode mode_;
  Shape in_, out_;
  size_t elem_;
  bool has_axes_;
  bool constant_ = false;
  bool attr_value_ = false;  // opset < 11: the value attribute
  uint64_t value_bytes_ = 0;
  Maps maps_;
};

bool pad_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.opset() < 11) return ew::check_input_dtype(info, 0, ew::kFloatTypes, why);
  return check_movable(info, 0, why) && check_index_dtype(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Pad", pad_infer);
TWINFER_REGISTER_KERNEL("Pad", Backend::kCPU, 0, pad_supports, make_kernel<PadKernel>);

}  // namespace twinfer::tensor
