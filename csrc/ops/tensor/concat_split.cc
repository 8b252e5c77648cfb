// Concat and Split: both see the tensor as [outer, axis, inner] and move
// whole contiguous chunks of axis * inner elements with memcpy.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/tensor/split_sizes.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// Bytes of one [axis-slab] chunk per outer index, for each of `shapes`.
struct ChunkGeom {
  int64_t outer = 1;
  std::vector<size_t> chunk;  // bytes per outer index, one per part
  size_t total = 0;           // sum of chunk
};

ChunkGeom chunk_geom(const std::vector<Shape>& parts, int64_t axis, size_t elem) {
  ChunkGeom g;
  const Shape& s0 = parts.front();
  for (int64_t d = 0; d < axis; ++d) g.outer *= s0[d];
  for (const Shape& s : parts) {
    int64_t n = 1;
    for (size_t d = axis; d < s.size(); ++d) n *= s[d];
    g.chunk.push_back(static_cast<size_t>(n) * elem);
    g.total += g.chunk.back();
  }
  return g;
}

// ---- Concat ------------------------------------------------------------------

void concat_infer(InferContext& c) {
  const int64_t axis_attr = c.node().required_attr("axis").i;
  if (!(c.num_inputs() > 0)) c.fail(ErrorKind::kModelFormat, "Concat needs at least one input");
  const DType dt = c.input_dtype(0);
  int first = -1;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!(c.input_dtype(i) == dt))
      c.fail(ErrorKind::kDType,
             std::string("inputs have different dtypes: ") + dtype_name(dt) + " and " + dtype_name(c.input_dtype(i)));
    if (first < 0 && c.input_has_shape(i)) first = static_cast<int>(i);
  }
  if (first < 0) return c.set_output_rank_unknown(0, dt);
  SymShape out = c.input_shape(first);
  const int64_t r = static_cast<int64_t>(out.size());
  if (!(r > 0)) c.fail(ErrorKind::kShape, "cannot concatenate scalars");
  const int64_t axis = normalize_axis(c, axis_attr, r);
  int64_t sum = 0;
  int unknown = 0;
  const Dim* sym = nullptr;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.input_has_shape(i)) {
      unknown += 2;  // an unknown rank: the axis dim cannot be named
      continue;
    }
    const SymShape& s = c.input_shape(i);
    if (!(static_cast<int64_t>(s.size()) == r))
      c.fail(ErrorKind::kShape,
             "input " + std::to_string(i) + " has rank " + std::to_string(s.size()) + ", input " +
                 std::to_string(first) + " rank " + std::to_string(r));
    for (int64_t d = 0; d < r; ++d) {
      if (d == axis) continue;
      if (s[d].known() && out[d].known()) {
        if (s[d].value != out[d].value)
          c.fail(ErrorKind::kShape, "input shapes " + sym_shape_str(c.input_shape(first)) + " and " + sym_shape_str(s) +
                                        " differ outside axis " + std::to_string(axis));
      } else if (s[d].known())
        out[d] = s[d];
    }
    if (s[axis].known()) {
      sum += s[axis].value;
    } else {
      ++unknown;
      sym = &s[axis];
    }
  }
  if (unknown == 0)
    out[axis] = Dim(sum);
  else if (unknown == 1 && sum == 0 && !sym->symbol.empty())
    out[axis] = *sym;
  else
    out[axis] = Dim();
  c.set_output(0, dt, out);
}

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelBuildInfo& info) {
    std::vector<Shape> parts;
    for (size_t i = 0; i < info.num_inputs(); ++i) parts.push_back(info.input_shape(i));
    const int64_t r = static_cast<int64_t>(parts[0].size());
    int64_t axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += r;
    g_ = chunk_geom(parts, axis, dtype_size(info.input_dtype(0)));
  }
  void run(KernelContext& ctx) const override {
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const size_t n = g_.chunk.size();
    if (g_.outer == 1) {
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        copy_bytes(y + off, ctx.inputs[i].data, g_.chunk[i], ctx.num_threads);
        off += g_.chunk[i];
      }
      return;
    }
    const int64_t grain = std::max<int64_t>(1, (kCopyGrain * 4) / std::max<size_t>(1, g_.total));
    parallel_for(g_.outer, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        char* dst = y + o * g_.total;
        for (size_t i = 0; i < n; ++i) {
          if (g_.chunk[i]) std::memcpy(dst, static_cast<const char*>(ctx.inputs[i].data) + o * g_.chunk[i], g_.chunk[i]);
          dst += g_.chunk[i];
        }
      }
    });
  }

 private:
  ChunkGeom g_;
};

bool concat_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (!check_movable(info, i, why)) return false;
  return true;
}

// ---- Split -------------------------------------------------------------------

// The chunk sizes along the axis for a known axis dim `len`; empty when the
// sizes come from a split input that is not a constant.
template <typename Ctx>
std::vector<int64_t> split_sizes(const Ctx& c, int64_t len, bool* known) {
  *known = true;
  const int64_t nout = static_cast<int64_t>(c.num_outputs());
  std::vector<int64_t> split;
  bool given = false;
  if (c.opset() >= 13) {
    if (c.has_input(1)) {
      given = true;
      if constexpr (std::is_same_v<Ctx, InferContext>)
        *known = c.constant_ints(1, &split);
      else
        *known = const_ints(c, 1, &split);
      if (!*known) return {};
    }
  } else if (c.node().has_attr("split")) {
    given = true;
    split = c.node().attr_ints("split");
  }
  if (given) {
    if (static_cast<int64_t>(split.size()) != nout)
      c.fail(ErrorKind::kShape, "split has " + std::to_string(split.size()) + " entries for " +
                                    std::to_string(nout) + " outputs");
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) c.fail(ErrorKind::kShape, "negative split size " + std::to_string(s));
      sum += s;
    }
    if (len >= 0 && sum != len)
      c.fail(ErrorKind::kShape, "split sizes add up to " + std::to_string(sum) + ", the axis has " +
                                    std::to_string(len));
    return split;
  }
  if (len < 0) {
    *known = false;
    return {};
  }
  int64_t n = nout;
  if (c.opset() >= 18 && c.node().has_attr("num_outputs")) {
    n = c.node().attr_int("num_outputs", nout);
    if (n != nout || n < 1)
      c.fail(ErrorKind::kShape, "num_outputs is " + std::to_string(n) + " but the node has " +
                                    std::to_string(nout) + " outputs");
    // Opset 18: chunks of ceil(len / n), the last one smaller.
    const int64_t chunk = (len + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, len - i * chunk)));
    if (split.back() == 0 && len > 0 && chunk * (n - 1) >= len)
      c.fail(ErrorKind::kShape, "cannot split " + std::to_string(len) + " into " + std::to_string(n) + " outputs");
    return split;
  }
  // Neither split nor num_outputs (invalid from opset 18, accepted anyway):
  // equal parts, one per output.
  if (len % n != 0)
    c.fail(ErrorKind::kShape, "cannot split an axis of " + std::to_string(len) + " evenly into " +
                                  std::to_string(n) + " outputs");
  return std::vector<int64_t>(n, len / n);
}

void split_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!c.input_has_shape(0)) {
    for (size_t i = 0; i < c.num_outputs(); ++i) c.set_output_rank_unknown(i, dt);
    return;
  }
  const SymShape& in = c.input_shape(0);
  const int64_t axis = normalize_axis(c, c.node().attr_int("axis", 0), static_cast<int64_t>(in.size()));
  bool known = true;
  std::vector<int64_t> sizes = split_sizes(c, in[axis].known() ? in[axis].value : -1, &known);
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    SymShape s = in;
    s[axis] = known ? Dim(sizes[i]) : Dim();
    c.set_output(i, dt, s);
  }
}

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelBuildInfo& info) {
    const Shape in = info.input_shape(0);
    int64_t axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in.size());
    // The sizes the outputs were inferred from (a missing output still
    // takes its share of the axis).
    bool known = true;
    std::vector<int64_t> sizes = split_sizes(info, in[axis], &known);
    std::vector<Shape> parts;
    for (size_t i = 0; i < info.num_outputs(); ++i) {
      Shape s = in;
      s[axis] = known ? sizes[i] : info.output_shape(i)[axis];
      parts.push_back(s);
    }
    g_ = chunk_geom(parts, axis, dtype_size(info.input_dtype(0)));
  }
  void run(KernelContext& ctx) const override {
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    const size_t n = g_.chunk.size();
    const int64_t grain = std::max<int64_t>(1, (kCopyGrain * 4) / std::max<size_t>(1, g_.total));
    parallel_for(g_.outer, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const char* src = x + o * g_.total;
        for (size_t i = 0; i < n; ++i) {
          if (g_.chunk[i] && i < ctx.outputs.size() && ctx.outputs[i].data)
            std::memcpy(static_cast<char*>(ctx.outputs[i].data) + o * g_.chunk[i], src, g_.chunk[i]);
          src += g_.chunk[i];
        }
      }
    });
  }

 private:
  ChunkGeom g_;
};

bool split_supports(const KernelBuildInfo& info, std::string* why) {
  return check_movable(info, 0, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Concat", concat_infer);
TWINFER_REGISTER_KERNEL("Concat", Backend::kCPU, 0, concat_supports, make_kernel<ConcatKernel>);
TWINFER_REGISTER_SCHEMA("Split", split_infer);
TWINFER_REGISTER_KERNEL("Split", Backend::kCPU, 0, split_supports, make_kernel<SplitKernel>);

std::vector<int64_t> split_chunk_sizes(const KernelBuildInfo& info, int64_t len, bool* known) {
  return split_sizes(info, len, known);
}

}  // namespace twinfer::tensor
