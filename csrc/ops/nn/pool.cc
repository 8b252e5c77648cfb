// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool on plain NCHW
// (1-3 spatial dims): shape rules and CPU kernels, threaded over (n, c)
// planes. The windowed loops here are the reference and cover what the
// oneDNN kernel (backends/cpu/onednn_pool.cc) does not: MaxPool's Indices,
// float64 / int8, windows oneDNN rejects. The global pools are plain
// vectorised reductions and are the fast path too. float16 / bfloat16 are
// computed in float as the CUDA kernels do (backends/cuda/pool.cu: window
// sums and maxima in float; rows.cu: global averages summed in double,
// global maxima with NaN propagated), so the simulated device's numbers are
// the GPU's up to the order of a sum.
//
// Window rules follow onnxruntime: with ceil_mode a last window starting in
// the right padding is dropped (window.cc); AveragePool with
// count_include_pad divides by the window clipped to the padded extent
// [-pad_begin, in + pad_end); MaxPool's optional Indices output holds the
// flat index into X: row-major within each (n, c) plane, or column-major
// (the first spatial dim fastest) with storage_order=1, as onnxruntime does.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "graph/domains.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/nn/channels_last.h"
#include "ops/nn/pool.h"
#include "ops/nn/pool_indices.h"
#include "ops/reduce/reduce_walks.h"
#include "ops/schema.h"

namespace twinfer::nn {
namespace {

enum class PoolKind { kMax, kAvg };

PoolKind kind_of(const graph::Node& n) { return n.op_type == "MaxPool" ? PoolKind::kMax : PoolKind::kAvg; }

void check_storage_order(const graph::Node& n, bool wants_indices) {
  const int64_t order = n.attr_int("storage_order", 0);
  if (n.op_type == "MaxPool" && wants_indices && order != 0 && order != 1)
    throw Error(ErrorKind::kInvalidArgument, "storage_order must be 0 (row-major) or 1 (column-major), got " +
                                                 std::to_string(order), n.name, n.op_type);
}

void infer_pool(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  const bool is_max = kind_of(n) == PoolKind::kMax;
  if (!(dtype_is_float(dt) || (is_max && (dt == DType::kInt8 || dt == DType::kUInt8))))
    c.fail(ErrorKind::kDType, n.op_type + " does not support " + dtype_name(dt));
  check_storage_order(n, c.num_outputs() > 1 && c.has_output(1));
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, dt);
    if (is_max) c.set_output_rank_unknown(1, DType::kInt64);
    return;
  }
  const bool cl = n.domain == kChannelsLastDomain;  // [N, spatial..., C], no Indices
  if ((cl || stored_channels_last(n)) && c.num_outputs() > 1 && c.has_output(1))
    c.fail(ErrorKind::kModelFormat, "a channels-last MaxPool has no Indices output");
  const SymShape x = cl ? channels_first_shape(c.input_shape(0)) : c.input_shape(0);
  if (!(x.size() >= 3))
    c.fail(ErrorKind::kShape, n.op_type + " input must have rank >= 3, got " + sym_shape_str(c.input_shape(0)));
  Window w = parse_window(n, x.size() - 2, nullptr, WindowOptions{true, true});
  SymShape y{x[0], x[1]};
  for (size_t i = 0; i < w.nsp; ++i) y.push_back(window_output_dim(w, i, x[2 + i], n));
  c.set_output(0, dt, cl ? channels_last_shape(y) : y);
  if (is_max && !cl) c.set_output(1, DType::kInt64, y);
}

void infer_global_pool(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt))) c.fail(ErrorKind::kDType, c.node().op_type + " does not support " + dtype_name(dt));
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, dt);
    return;
  }
  const SymShape& x = c.input_shape(0);
  if (!(x.size() >= 3)) c.fail(ErrorKind::kShape, c.node().op_type + " input must have rank >= 3");
  SymShape y(x.size(), Dim(1));
  y[0] = x[0];
  y[1] = x[1];
  c.set_output(0, dt, y);
}

TWINFER_REGISTER_SCHEMA("MaxPool", infer_pool);
TWINFER_REGISTER_SCHEMA("AveragePool", infer_pool);
TWINFER_REGISTER_SCHEMA("GlobalAveragePool", infer_global_pool);
TWINFER_REGISTER_SCHEMA("GlobalMaxPool", infer_global_pool);
// The blocked-layout forms (graph/passes/blocked_layout.h) keep logical shapes.
TWINFER_REGISTER_SCHEMA("MaxPool", infer_pool, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("AveragePool", infer_pool, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("GlobalAveragePool", infer_global_pool, kBlockedDomain);
TWINFER_REGISTER_SCHEMA("GlobalMaxPool", infer_global_pool, kBlockedDomain);
// The channels-last forms (graph/passes/channels_last.h): [N, spatial..., C].
TWINFER_REGISTER_SCHEMA("MaxPool", infer_pool, kChannelsLastDomain);
TWINFER_REGISTER_SCHEMA("AveragePool", infer_pool, kChannelsLastDomain);

// Per spatial dim (as 3-D: missing leading dims have size 1) and output
// position: the first input position inside the input, how many taps fall
// inside the input, and how many inside the padded extent.
struct DimTable {
  int64_t in = 1, out = 1, dil = 1;
  std::vector<int64_t> first, taps, padded_taps;
};

DimTable make_table(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  DimTable t;
  t.in = in;
  t.out = out;
  t.dil = d;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - pb;
    int64_t k_lo = start >= 0 ? 0 : (-start + d - 1) / d;
    int64_t k_hi = std::min<int64_t>(k, start > in - 1 ? 0 : (in - 1 - start) / d + 1);
    int64_t k_pad = std::min<int64_t>(k, start > in + pe - 1 ? 0 : (in + pe - 1 - start) / d + 1);
    t.first.push_back(start + k_lo * d);
    t.taps.push_back(std::max<int64_t>(0, k_hi - k_lo));
    t.padded_taps.push_back(std::max<int64_t>(0, k_pad));
  }
  return t;
}

// Row kernels of the separable float32 path, multiversioned
// (core/simd_clones.h): these loops are where the pooling time goes.

TWINFER_SIMD_CLONES void row_add(const float* __restrict src, float* __restrict acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
}
// out[j] = sum over k taps of row[j + t*d], for j in [0, n): the horizontal
// window at every start position (contiguous, so it vectorises).
TWINFER_SIMD_CLONES void window_add(const float* __restrict row, float* __restrict out, int64_t n, int64_t k,
                                    int64_t d) {
  for (int64_t j = 0; j < n; ++j) out[j] = row[j];
  for (int64_t t = 1; t < k; ++t) {
    const float* r = row + t * d;
    for (int64_t j = 0; j < n; ++j) out[j] += r[j];
  }
}

class PoolKernel final : public Kernel {
 public:
  explicit PoolKernel(const KernelBuildInfo& info) : kind_(kind_of(info.node())) {
    PoolSpec ps = pool_spec(info);
    want_indices_ = ps.want_indices;
    column_major_ = info.node().attr_int("storage_order", 0) == 1;
    include_pad_ = ps.include_pad;
    const Window& w = ps.win;
    const Shape &x = ps.x, &y = ps.y;
    const size_t off = 3 - w.nsp;
    full_k_ = w.kernel[w.nsp - 1];
    for (size_t i = 0; i < 3; ++i) {
      if (i < off) {
        dims_[i] = make_table(1, 1, 1, 1, 1, 0, 0);
      } else {
        size_t j = i - off;
        dims_[i] = make_table(x[2 + j], y[2 + j], w.kernel[j], w.stride[j], w.dilation[j], w.pad_begin[j],
                              w.pad_end[j]);
      }
    }
    planes_ = x[0] * x[1];
    // An int8 MaxPool pooling NHWC bytes (channels_last_storage) that oneDNN
    // refuses (a window past the padding): the loops below read NCHW, so x
    // is turned to NCHW in scratch and y back after.
    if (ps.channels_last && planes_ > 0) {  // (an empty x has nothing to copy)
      const size_t es = dtype_size(info.input_dtype(0));
      nhwc_ = {x[0], x[1], shape_numel(x) / (x[0] * x[1]), shape_numel(y) / (x[0] * x[1])};
      x_bytes_ = align64(static_cast<size_t>(shape_numel(x)) * es);
      y_bytes_ = align64(static_cast<size_t>(shape_numel(y)) * es);
    }
  }

  const char* impl_name() const override { return x_bytes_ ? "cpu loop (through NCHW copies)" : "cpu loop"; }
  size_t scratch_bytes() const override { return x_bytes_ + y_bytes_; }

  void run(KernelContext& ctx) const override {
    if (!x_bytes_) return run_nchw(ctx);
    const size_t es = dtype_size(ctx.inputs[0].dtype);
    char* scratch = static_cast<char*>(ctx.scratch);
    KernelContext nchw = ctx;
    nchw.inputs[0].data = scratch;
    nchw.outputs[0].data = scratch + x_bytes_;
    copy_to_channels_first(ctx.inputs[0].data, scratch, nhwc_.n, nhwc_.c, nhwc_.in, es, ctx.num_threads);
    run_nchw(nchw);
    copy_to_channels_last(scratch + x_bytes_, ctx.outputs[0].data, nhwc_.n, nhwc_.c, nhwc_.out, es, ctx.num_threads);
  }

 private:
  static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

  void run_nchw(KernelContext& ctx) const {
    DType dt = ctx.inputs[0].dtype;
    if (dt == DType::kFloat32 && kind_ == PoolKind::kAvg) return compute_average_f32(ctx);
    if (dt == DType::kInt8) return compute<int8_t>(ctx);
    if (dt == DType::kUInt8) return compute<uint8_t>(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dt, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

  // float32 AveragePool: the window sum is separable, so each output row
  // first adds its window's input rows (vertical, vectorised), then sums
  // the horizontal window at every column (vectorised) and picks the
  // strided starts.
  // Windows are clipped to the input as in compute(). (float32 MaxPool
  // reaches this file only for Indices or windows oneDNN rejects.)
  void compute_average_f32(KernelContext& ctx) const {
    const float* x = ctx.inputs[0].as<float>();
    float* y = ctx.outputs[0].as<float>();
    const DimTable &D = dims_[0], &H = dims_[1], &W = dims_[2];
    const int64_t in_plane = D.in * H.in * W.in, out_plane = D.out * H.out * W.out;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, out_plane));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t pb, int64_t pe) {
      std::vector<float> vrow(W.in), hrow(W.in);
      for (int64_t p = pb; p < pe; ++p) {
        const float* xp = x + p * in_plane;
        float* yp = y + p * out_plane;
        for (int64_t od = 0; od < D.out; ++od)
          for (int64_t oh = 0; oh < H.out; ++oh) {
            float* yr = yp + (od * H.out + oh) * W.out;
            const int64_t rows = D.taps[od] * H.taps[oh];
            if (rows == 0) {
              for (int64_t ow = 0; ow < W.out; ++ow) yr[ow] = 0.f;
              continue;
            }
            bool first = true;
            for (int64_t kd = 0, id = D.first[od]; kd < D.taps[od]; ++kd, id += D.dil)
              for (int64_t kh = 0, ih = H.first[oh]; kh < H.taps[oh]; ++kh, ih += H.dil) {
                const float* r = xp + (id * H.in + ih) * W.in;
                if (first) std::copy(r, r + W.in, vrow.begin());
                else row_add(r, vrow.data(), W.in);
                first = false;
              }
            // Full windows start at columns [0, W.in - ek]; edge ones are clipped.
            const int64_t ek = (full_k_ - 1) * W.dil + 1;
            const int64_t nfull = W.in - ek + 1;
            if (nfull > 0) window_add(vrow.data(), hrow.data(), nfull, full_k_, W.dil);
            for (int64_t ow = 0; ow < W.out; ++ow) {
              const int64_t w0 = W.first[ow], n = W.taps[ow];
              float acc;
              if (n == full_k_ && w0 < nfull) {
                acc = hrow[w0];
              } else {
                acc = 0.f;
                for (int64_t t = 0; t < n; ++t) acc += vrow[w0 + t * W.dil];
              }
              const int64_t cnt = include_pad_ ? D.padded_taps[od] * H.padded_taps[oh] * W.padded_taps[ow]
                                               : rows * n;
              yr[ow] = cnt > 0 ? acc / static_cast<float>(cnt) : 0.f;
            }
          }
      }
    });
  }

  // Any storage type T, computed in C (float for the 16-bit floats, T
  // otherwise).
  template <typename T>
  void compute(KernelContext& ctx) const {
    using C = ew::compute_t<T>;
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    int64_t* idx = want_indices_ ? ctx.outputs[1].as<int64_t>() : nullptr;
    const DimTable &D = dims_[0], &H = dims_[1], &W = dims_[2];
    const int64_t in_plane = D.in * H.in * W.in, out_plane = D.out * H.out * W.out;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, out_plane));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const T* xp = x + p * in_plane;
        T* yp = y + p * out_plane;
        for (int64_t od = 0; od < D.out; ++od)
          for (int64_t oh = 0; oh < H.out; ++oh)
            for (int64_t ow = 0; ow < W.out; ++ow) {
              const int64_t o = (od * H.out + oh) * W.out + ow;
              if (kind_ == PoolKind::kMax) {
                C best = std::numeric_limits<C>::lowest();
                int64_t best_i = -1;
                for (int64_t kd = 0, id = D.first[od]; kd < D.taps[od]; ++kd, id += D.dil)
                  for (int64_t kh = 0, ih = H.first[oh]; kh < H.taps[oh]; ++kh, ih += H.dil) {
                    const int64_t row = (id * H.in + ih) * W.in;
                    for (int64_t kw = 0, iw = W.first[ow]; kw < W.taps[ow]; ++kw, iw += W.dil) {
                      const C v = ew::load(xp[row + iw]);
                      if (v > best || best_i < 0) {
                        best = v;
                        best_i = max_pool_index(p * in_plane, id, ih, iw, D.in, H.in, W.in, column_major_);
                      }
                    }
                  }
                yp[o] = ew::store<T>(best);
                if (idx) idx[p * out_plane + o] = best_i;  // -1: an empty window
              } else {
                C sum = 0;
                for (int64_t kd = 0, id = D.first[od]; kd < D.taps[od]; ++kd, id += D.dil)
                  for (int64_t kh = 0, ih = H.first[oh]; kh < H.taps[oh]; ++kh, ih += H.dil) {
                    const T* row = xp + (id * H.in + ih) * W.in;
                    for (int64_t kw = 0, iw = W.first[ow]; kw < W.taps[ow]; ++kw, iw += W.dil) sum += ew::load(row[iw]);
                  }
                const int64_t cnt = include_pad_ ? D.padded_taps[od] * H.padded_taps[oh] * W.padded_taps[ow]
                                                 : D.taps[od] * H.taps[oh] * W.taps[ow];
                yp[o] = ew::store<T>(cnt > 0 ? sum / static_cast<C>(cnt) : C(0));
              }
            }
      }
    });
  }

  PoolKind kind_;
  bool want_indices_ = false, include_pad_ = false;
  bool column_major_ = false;  // storage_order=1: Indices count the first spatial dim fastest
  int64_t full_k_ = 1;  // kernel size along the innermost spatial dim
  DimTable dims_[3];
  int64_t planes_ = 0;
  struct {
    int64_t n = 0, c = 0, in = 0, out = 0;  // x and y as [n, c, spatial]: `in` / `out` spatial elements
  } nhwc_;
  size_t x_bytes_ = 0, y_bytes_ = 0;  // NCHW copies in scratch (channels_last_storage); 0: none
};

class GlobalPoolKernel final : public Kernel {
 public:
  explicit GlobalPoolKernel(const KernelBuildInfo& info) : is_max_(info.node().op_type == "GlobalMaxPool") {
    Shape x = info.input_shape(0);
    if (x.size() < 3) info.fail(ErrorKind::kShape, "input must have rank >= 3");
    planes_ = x[0] * x[1];
    plane_ = 1;
    for (size_t i = 2; i < x.size(); ++i) plane_ *= x[i];
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const DType dt = ctx.inputs[0].dtype;
    if (dt == DType::kFloat16) return compute_16<half_t>(ctx);
    if (dt == DType::kBFloat16) return compute_16<bfloat16_t>(ctx);
    // Maxima of every float type with NaN propagated, as CUDA's (rows.cu) and
    // the header promise; the plain loop below would pass NaN over.
    if (is_max_) return dispatch_float(dt, [&](auto tag) { compute_16<typename decltype(tag)::type>(ctx); });
    dispatch_float(dt, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  // float16 / bfloat16 (and the maxima of float32 / float64): ReduceMean /
  // ReduceMax over each plane, with the CPU Reduce kernels' and CUDA's
  // arithmetic (sums in double, maxima in the compute type with NaN propagated;
  // ops/reduce/reduce_ops.h).
  template <typename T>
  void compute_16(KernelContext& ctx) const {
    reduce::Geom g;
    g.outer = planes_;
    g.n = plane_;
    g.out_numel = planes_;
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    if (is_max_) reduce::rows<T, reduce::OpMax<T>>(g, x, y, ctx.num_threads);
    else reduce::rows<T, reduce::OpMean<T>>(g, x, y, ctx.num_threads);
  }

  // float32 / float64 averages.
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t plane = plane_;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x + p * plane;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < plane; ++i) s += xp[i];
        y[p] = plane > 0 ? s / static_cast<T>(plane) : T(0);
      }
    });
  }

  bool is_max_;
  int64_t planes_ = 0, plane_ = 1;
};

bool pool_supports(const KernelBuildInfo& info, std::string* why) {
  if (stored_channels_last(info.node()) &&
      (info.node().op_type != "MaxPool" || (info.num_outputs() > 1 && info.has_output(1)))) {
    *why = "channels-last bytes reach the pooling loops only as an int8 MaxPool's, without Indices";
    return false;
  }
  DType dt = info.input_dtype(0);
  bool ok = ew::in_typeset(ew::kFloatTypes, dt) ||
            (info.node().op_type == "MaxPool" && (dt == DType::kInt8 || dt == DType::kUInt8));
  if (!ok) *why = info.node().op_type + " does not support " + dtype_name(dt);
  return ok;
}

TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCPU, 0, pool_supports, make_kernel<PoolKernel>);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCPU, 0, pool_supports, make_kernel<PoolKernel>);
TWINFER_REGISTER_KERNEL("GlobalAveragePool", Backend::kCPU, 0, pool_supports, make_kernel<GlobalPoolKernel>);
TWINFER_REGISTER_KERNEL("GlobalMaxPool", Backend::kCPU, 0, pool_supports, make_kernel<GlobalPoolKernel>);

}  // namespace

PoolSpec pool_spec(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  PoolSpec ps;
  ps.is_max = kind_of(n) == PoolKind::kMax;
  const bool nhwc_form = n.domain == kChannelsLastDomain;  // [N, spatial..., C] shapes
  ps.channels_last = nhwc_form || stored_channels_last(n);
  ps.x = nhwc_form ? channels_first_shape(info.input_shape(0)) : info.input_shape(0);
  if (ps.x.size() < 3 || ps.x.size() > 5) info.fail(ErrorKind::kUnsupportedOp, "pooling supports 1-3 spatial dims");
  ps.want_indices = ps.is_max && info.num_outputs() > 1 && info.has_output(1);
  check_storage_order(n, ps.want_indices);
  ps.include_pad = !ps.is_max && n.attr_int("count_include_pad", 0) != 0;
  ps.win = parse_window(n, ps.x.size() - 2, nullptr, WindowOptions{true, true});
  resolve_pads(ps.win, Shape(ps.x.begin() + 2, ps.x.end()));
  ps.y = {ps.x[0], ps.x[1]};
  for (size_t i = 0; i < ps.win.nsp; ++i) ps.y.push_back(window_output_size(ps.win, i, ps.x[2 + i], n));
  const Shape y_stored = nhwc_form ? channels_last_shape(ps.y) : ps.y;
  if (y_stored != info.output_shape(0))
    info.fail(ErrorKind::kShape, "output shape " + shape_str(info.output_shape(0)) + " differs from the expected " +
                                     shape_str(y_stored));
  return ps;
}

}  // namespace twinfer::nn
