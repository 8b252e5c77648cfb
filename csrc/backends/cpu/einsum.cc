// Einsum(equation, inputs...) as a general contraction. The plan, made once
// per input shapes:
//   1. every operand is loaded into a compute buffer (float for float32/16-bit
//      floats, double for float64, int64 for integers) while taking its
//      diagonals (a label repeated in one operand), summing labels no other
//      operand or the output uses, and broadcasting size-1 dims;
//   2. operands are contracted left to right: each pair is multiplied as a
//      batched GEMM [batch, M, K] x [batch, K, N] (batch labels: in both and
//      still needed; K: in both and needed no more) — oneDNN's matmul for
//      float, a plain loop otherwise;
//   3. the result is permuted/summed into the output's label order.
// Copies are only made where needed: an operand that is already laid out as
// its labels (no diagonal, summed or broadcast label, the compute type) is
// read in place, and oneDNN reads each GEMM operand and writes its result
// through strides when the batch/M/K/N label groups are each one evenly
// strided run (e.g. attention's "bhid,bhjd->bhij", K transposed, and its
// output written straight into the node's output). Before this, every
// operand went through 3-4 element-by-element permuting copies around the
// GEMM, which made MaxViT's attention Einsums 8-12x slower than MatMul.
// Ellipsis dims broadcast numpy-style (aligned from the right). Without "->"
// the output is the labels used once, in ASCII order, after the ellipsis dims.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "backends/cpu/onednn_matmul.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/einsum.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

// dst[i over dst dims] = sum over sum dims of src[offset], offsets from
// per-dim source strides (0 for a broadcast dim; a repeated label's strides
// add up, which walks a diagonal).
struct GatherSum {
  Shape dims, strides;        // destination dims, row-major, and their source strides
  Shape sum_dims, sum_strides;
};

// gather_sum without sum dims: a strided copy, row by row.
template <typename Acc, typename Src>
void gather(const GatherSum& g, const Src* src, Acc* dst) {
  const size_t nd = g.dims.size();
  if (nd == 0) {
    dst[0] = static_cast<Acc>(ew::load(src[0]));
    return;
  }
  const int64_t inner = g.dims[nd - 1], is = g.strides[nd - 1];
  if (inner == 0) return;
  const int64_t rows = shape_numel(g.dims) / inner;
  std::vector<int64_t> ci(nd - 1, 0);
  int64_t base = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const Src* s = src + base;
    Acc* d = dst + r * inner;
    if (is == 1) {
      for (int64_t j = 0; j < inner; ++j) d[j] = static_cast<Acc>(ew::load(s[j]));
    } else {
      for (int64_t j = 0; j < inner; ++j) d[j] = static_cast<Acc>(ew::load(s[j * is]));
    }
    for (size_t d0 = nd - 1; d0-- > 0;) {
      base += g.strides[d0];
      if (++ci[d0] < g.dims[d0]) break;
      base -= g.strides[d0] * ci[d0];
      ci[d0] = 0;
    }
  }
}

template <typename Acc, typename Src>
void gather_sum(const GatherSum& g, const Src* src, Acc* dst) {
  if (g.sum_dims.empty()) return gather(g, src, dst);
  const int64_t total = shape_numel(g.dims), inner = shape_numel(g.sum_dims);
  const size_t nd = g.dims.size(), ns = g.sum_dims.size();
  std::vector<int64_t> ci(nd, 0), cs(ns, 0);
  int64_t base = 0;
  for (int64_t t = 0; t < total; ++t) {
    Acc acc = Acc(0);
    int64_t off = 0;
    std::fill(cs.begin(), cs.end(), 0);
    for (int64_t u = 0; u < inner; ++u) {
      acc += static_cast<Acc>(ew::load(src[base + off]));
      for (size_t d = ns; d-- > 0;) {
        off += g.sum_strides[d];
        if (++cs[d] < g.sum_dims[d]) break;
        off -= g.sum_strides[d] * cs[d];
        cs[d] = 0;
      }
    }
    dst[t] = acc;
    for (size_t d = nd; d-- > 0;) {
      base += g.strides[d];
      if (++ci[d] < g.dims[d]) break;
      base -= g.strides[d] * ci[d];
      ci[d] = 0;
    }
  }
}

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(const KernelBuildInfo& info) : node_(info.node().name) {
    dt_ = info.input_dtype(0);
    std::vector<Shape> shapes;
    std::vector<size_t> ranks;
    for (size_t i = 0; i < info.num_inputs(); ++i) {
      shapes.push_back(info.input_shape(i));
      ranks.push_back(shapes.back().size());
    }
    const EinsumSpec s = parse_einsum(info, einsum_equation(info), ranks);
    dim_.assign(s.num_labels, 1);
    for (size_t k = 0; k < s.in.size(); ++k)
      for (size_t a = 0; a < shapes[k].size(); ++a) {
        int64_t& d = dim_[s.in[k][a]];
        const int64_t v = shapes[k][a];
        if (d != 1 && v != 1 && d != v)
          info.fail(ErrorKind::kShape, "label dims " + std::to_string(d) + " and " + std::to_string(v) + " differ");
        if (v != 1) d = v;
      }
    // Labels still needed after operand k: in the output or a later operand.
    const size_t n = s.in.size();
    auto needed_after = [&](size_t k, int l) {
      if (std::count(s.out.begin(), s.out.end(), l)) return true;
      for (size_t j = k + 1; j < n; ++j)
        if (std::count(s.in[j].begin(), s.in[j].end(), l)) return true;
      return false;
    };
    // 1. Loads.
    for (size_t k = 0; k < n; ++k) {
      Load ld;
      const Shape st = contiguous_strides(shapes[k]);
      std::vector<int64_t> lstride(s.num_labels, 0);
      std::vector<int> order;  // unique labels in first-appearance order
      for (size_t a = 0; a < shapes[k].size(); ++a) {
        const int l = s.in[k][a];
        if (shapes[k][a] != 1) lstride[l] += st[a];
        if (!std::count(order.begin(), order.end(), l)) order.push_back(l);
      }
      bool elsewhere;
      for (int l : order) {
        elsewhere = std::count(s.out.begin(), s.out.end(), l) > 0;
        for (size_t j = 0; j < n && !elsewhere; ++j)
          if (j != k && std::count(s.in[j].begin(), s.in[j].end(), l)) elsewhere = true;
        if (elsewhere) {
          ld.labels.push_back(l);
          ld.g.dims.push_back(dim_[l]);
          ld.g.strides.push_back(lstride[l]);
        } else {
          ld.g.sum_dims.push_back(dim_[l]);
          ld.g.sum_strides.push_back(lstride[l]);
        }
      }
      // Already laid out as its labels: read in place.
      bool in_place = ld.g.sum_dims.empty() && input_is_acc();
      const Shape want = contiguous_strides(ld.g.dims);
      for (size_t a = 0; a < want.size() && in_place; ++a)
        if (ld.g.dims[a] != 1 && ld.g.strides[a] != want[a]) in_place = false;
      if (in_place) ld.buf.input = static_cast<int>(k);
      else ld.buf.off = alloc(shape_numel(ld.g.dims));
      loads_.push_back(ld);
    }
    // 2. Contractions.
    std::vector<int> cur = loads_[0].labels;
    Ref cur_buf = loads_[0].buf;
    bool out_written = false;
    for (size_t k = 1; k < n; ++k) {
      const std::vector<int>& rhs = loads_[k].labels;
      Contract ct;
      auto in = [](const std::vector<int>& v, int l) { return std::count(v.begin(), v.end(), l) > 0; };
      std::vector<int> batch, m, kk, nn, a_sum, b_sum;
      for (int l : cur) {
        if (in(rhs, l)) (needed_after(k, l) ? batch : kk).push_back(l);
        else (needed_after(k, l) ? m : a_sum).push_back(l);
      }
      for (int l : rhs)
        if (!in(cur, l)) (needed_after(k, l) ? nn : b_sum).push_back(l);
      auto prod = [&](const std::vector<int>& v) {
        int64_t p = 1;
        for (int l : v) p *= dim_[l];
        return p;
      };
      ct.batch = prod(batch);
      ct.m = prod(m);
      ct.k = prod(kk);
      ct.n = prod(nn);
      auto arrange = [&](const std::vector<int>& from, std::vector<int> to, const std::vector<int>& sum) {
        GatherSum g;
        const Shape st = contiguous_strides(label_dims(from));
        auto stride_of = [&](int l) { return st[std::find(from.begin(), from.end(), l) - from.begin()]; };
        for (int l : to) {
          g.dims.push_back(dim_[l]);
          g.strides.push_back(stride_of(l));
        }
        for (int l : sum) {
          g.sum_dims.push_back(dim_[l]);
          g.sum_strides.push_back(stride_of(l));
        }
        return g;
      };
      std::vector<int> a_to = batch, b_to = batch;
      a_to.insert(a_to.end(), m.begin(), m.end());
      a_to.insert(a_to.end(), kk.begin(), kk.end());
      b_to.insert(b_to.end(), kk.begin(), kk.end());
      b_to.insert(b_to.end(), nn.begin(), nn.end());
      ct.ga = arrange(cur, a_to, a_sum);
      ct.gb = arrange(rhs, b_to, b_sum);
      ct.a = cur_buf;
      ct.b = loads_[k].buf;
      const bool use_mm = acc_is_float() && ct.batch * ct.m * ct.n > 0 && ct.k > 0;
      // Strided views in place of the copies (oneDNN only; the plain loop
      // reads [batch, M, K] x [batch, K, N]). Summed labels need the copy.
      dnnl::memory::dims sa, sb, sy;
      if (use_mm) {
        if (a_sum.empty()) sa = view_strides(cur, {&batch, &m, &kk}, false);
        if (b_sum.empty()) sb = view_strides(rhs, {&batch, &kk, &nn}, false);
        // The last product straight into the node's output when its labels
        // are batch, M and N (a contraction keeps only needed labels).
        if (k + 1 == n && dt_ == DType::kFloat32) sy = view_strides(s.out, {&batch, &m, &nn}, true);
      }
      for (int attempt = 0; attempt < 2; ++attempt) {
        ct.copy_a = sa.empty();
        ct.copy_b = sb.empty();
        ct.y = Ref{};
        ct.y.output = !sy.empty();
        if (use_mm) {
          cpu::onednn::MatmulDesc d;
          d.a = {ct.batch, ct.m, ct.k};
          d.b = {ct.batch, ct.k, ct.n};
          d.y = {ct.batch, ct.m, ct.n};
          d.a_strides = sa;
          d.b_strides = sb;
          d.y_strides = sy;
          const bool views = !(sa.empty() && sb.empty() && sy.empty());
          try {
            ct.mm = std::make_shared<cpu::onednn::MatmulCore>(d, node_, "Einsum");
          } catch (...) {
            if (!views) throw;
            ct.mm = nullptr;
          }
          // oneDNN's reference matmul takes any strides but is slower than
          // copying, and some strides it may refuse: then copy.
          if (views && (!ct.mm || ct.mm->impl_info().rfind("ref", 0) == 0)) {
            sa.clear(), sb.clear(), sy.clear();
            continue;
          }
          mm_scratch_ = std::max(mm_scratch_, ct.mm->scratch_bytes());
        }
        break;
      }
      if (ct.copy_a) ct.pa = alloc(ct.batch * ct.m * ct.k);
      if (ct.copy_b) ct.pb = alloc(ct.batch * ct.k * ct.n);
      if (!ct.y.output) ct.y.off = alloc(ct.batch * ct.m * ct.n);
      out_written = ct.y.output;
      cur = batch;
      cur.insert(cur.end(), m.begin(), m.end());
      cur.insert(cur.end(), nn.begin(), nn.end());
      cur_buf = ct.y;
      contracts_.push_back(ct);
    }
    // 3. To the output's order.
    out_written_ = out_written;
    if (out_written_) return;
    std::vector<int> rest;
    for (int l : cur)
      if (!std::count(s.out.begin(), s.out.end(), l)) rest.push_back(l);
    const Shape st = contiguous_strides(label_dims(cur));
    for (int l : s.out) {
      final_.dims.push_back(dim_[l]);
      final_.strides.push_back(st[std::find(cur.begin(), cur.end(), l) - cur.begin()]);
    }
    for (int l : rest) {
      final_.sum_dims.push_back(dim_[l]);
      final_.sum_strides.push_back(st[std::find(cur.begin(), cur.end(), l) - cur.begin()]);
    }
    final_src_ = cur_buf;
    final_buf_ = alloc(shape_numel(final_.dims));
  }

  size_t scratch_bytes() const override { return used_ + mm_scratch_ + 64; }
  const char* impl_name() const override { return acc_is_float() ? "onednn matmul contraction" : "reference"; }

  void run(KernelContext& ctx) const override {
    switch (dt_) {
      case DType::kFloat64: return go<double>(ctx);
      case DType::kFloat32: case DType::kFloat16: case DType::kBFloat16: return go<float>(ctx);
      default: return go<int64_t>(ctx);
    }
  }

 private:
  // Where a buffer lives: an input read in place, the node's output, or
  // scratch at an offset.
  struct Ref {
    int input = -1;
    bool output = false;
    size_t off = 0;
  };
  struct Load {
    std::vector<int> labels;  // the buffer holds these, contiguous, in this order
    GatherSum g;
    Ref buf;
  };
  struct Contract {
    GatherSum ga, gb;
    Ref a, b, y;
    bool copy_a = true, copy_b = true;  // into [batch, M, K] / [batch, K, N] at pa / pb
    size_t pa = 0, pb = 0;
    int64_t batch = 1, m = 1, k = 1, n = 1;
    std::shared_ptr<cpu::onednn::MatmulCore> mm;
  };

  // The inputs are already the compute type (no conversion on load).
  bool input_is_acc() const {
    return dt_ == DType::kFloat32 || dt_ == DType::kFloat64 || dt_ == DType::kInt64;
  }
  // Strides [s0, s1, s2] of a buffer holding `from` contiguously, seen as
  // [g0, g1, g2] with each label group one dim; empty when a group is not one
  // evenly strided run in `from`, or when the matrix has no unit-stride dim
  // (y: its last dim must be) — oneDNN's fast kernels need one.
  dnnl::memory::dims view_strides(const std::vector<int>& from, std::array<const std::vector<int>*, 3> groups,
                                  bool y) const {
    const Shape st = contiguous_strides(label_dims(from));
    int64_t s[3] = {0, 0, 0}, d[3] = {1, 1, 1};
    for (int g = 0; g < 3; ++g) {
      int64_t expect = -1;
      for (auto it = groups[g]->rbegin(); it != groups[g]->rend(); ++it) {
        const int l = *it;
        d[g] *= dim_[l];
        if (dim_[l] == 1) continue;
        const auto pos = std::find(from.begin(), from.end(), l);
        if (pos == from.end()) return {};
        const int64_t ls = st[pos - from.begin()];
        if (expect < 0) s[g] = ls;
        else if (ls != expect) return {};
        expect = ls * dim_[l];
      }
    }
    // A group of one element: any stride addresses it; pick the one that
    // makes the layout read as plain (or transposed).
    if (d[2] == 1) s[2] = 1;
    if (d[1] == 1) s[1] = s[2] == 1 ? d[2] : 1;
    if (s[2] != 1 && (y || s[1] != 1)) return {};
    if (d[0] == 1) s[0] = std::max(s[1] * d[1], s[2] * d[2]);
    return {s[0], s[1], s[2]};
  }

  bool acc_is_float() const {
    return dt_ == DType::kFloat32 || dt_ == DType::kFloat16 || dt_ == DType::kBFloat16;
  }
  Shape label_dims(const std::vector<int>& labels) const {
    Shape s;
    for (int l : labels) s.push_back(dim_[l]);
    return s;
  }
  // Scratch offsets in elements of 8 bytes (enough for every compute type).
  size_t alloc(int64_t elems) {
    const size_t off = used_;
    used_ += cpu::onednn::align_up(static_cast<size_t>(std::max<int64_t>(elems, 1)) * 8);
    return off;
  }

  template <typename Acc>
  void go(KernelContext& ctx) const {
    char* base = static_cast<char*>(ctx.scratch);
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    auto buf = [&](size_t off) { return reinterpret_cast<Acc*>(base + off); };
    auto at = [&](const Ref& r) -> Acc* {
      if (r.input >= 0) return static_cast<Acc*>(const_cast<void*>(ctx.inputs[r.input].data));
      if (r.output) return static_cast<Acc*>(ctx.outputs[0].data);
      return buf(r.off);
    };
    for (size_t k = 0; k < loads_.size(); ++k) {
      if (loads_[k].buf.input >= 0) continue;
      ew::dispatch_typeset<kEinsumTypes>(dt_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        gather_sum<Acc>(loads_[k].g, ctx.inputs[k].as<const T>(), at(loads_[k].buf));
      });
    }
    for (const Contract& ct : contracts_) {
      const Acc* pa = at(ct.a);
      const Acc* pb = at(ct.b);
      Acc* y = at(ct.y);
      if (ct.copy_a) {
        gather_sum<Acc>(ct.ga, pa, buf(ct.pa));
        pa = buf(ct.pa);
      }
      if (ct.copy_b) {
        gather_sum<Acc>(ct.gb, pb, buf(ct.pb));
        pb = buf(ct.pb);
      }
      if (ct.mm) {
        KernelContext mc = ctx;
        mc.scratch = base + used_;
        ct.mm->run(mc, pa, pb, nullptr, nullptr, y);
        continue;
      }
      std::fill(y, y + ct.batch * ct.m * ct.n, Acc(0));
      for (int64_t b = 0; b < ct.batch; ++b)
        for (int64_t i = 0; i < ct.m; ++i) {
          Acc* yr = y + (b * ct.m + i) * ct.n;
          const Acc* ar = pa + (b * ct.m + i) * ct.k;
          for (int64_t p = 0; p < ct.k; ++p) {
            const Acc av = ar[p];
            const Acc* br = pb + (b * ct.k + p) * ct.n;
            for (int64_t j = 0; j < ct.n; ++j) yr[j] += av * br[j];
          }
        }
    }
    if (out_written_) return;
    Acc* out = buf(final_buf_);
    gather_sum<Acc>(final_, at(final_src_), out);
    ew::dispatch_typeset<kEinsumTypes>(dt_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = ctx.outputs[0].as<T>();
      const int64_t total = ctx.outputs[0].numel();
      for (int64_t i = 0; i < total; ++i) y[i] = ew::store<T>(static_cast<ew::compute_t<T>>(out[i]));
    });
  }

  std::string node_;
  DType dt_;
  std::vector<int64_t> dim_;
  std::vector<Load> loads_;
  std::vector<Contract> contracts_;
  GatherSum final_;
  Ref final_src_;
  bool out_written_ = false;  // the last product went straight to the output
  size_t final_buf_ = 0, used_ = 0, mm_scratch_ = 0;
};

bool einsum_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kEinsumTypes, why)) return false;
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (!ew::check_same_dtype(info, {0, i}, why)) return false;
  return true;
}

}  // namespace

TWINFER_REGISTER_KERNEL("Einsum", Backend::kCPU, 0, einsum_supports, make_kernel<EinsumKernel>);

}  // namespace twinfer::tensor
