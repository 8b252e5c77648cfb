#include "ops/transformer/attention_views.h"

#include <algorithm>

#include "graph/domains.h"
#include "ops/kernel.h"

namespace twinfer::tx {

const char* const kAttnViewAttrs[3] = {"q_view", "k_view", "v_view"};

namespace {

bool any_negative(const std::vector<int64_t>& v) {
  return std::any_of(v.begin(), v.end(), [](int64_t x) { return x < 0; });
}

}  // namespace

std::string read_attention_views(const graph::Node& n, AttnViews* out) {
  *out = AttnViews{};
  if (n.domain != kTwinferDomain) return "";
  for (int i = 0; i < 3; ++i) {
    if (!n.has_attr(kAttnViewAttrs[i])) continue;
    const std::vector<int64_t> a = n.attr_ints(kAttnViewAttrs[i]);
    if (a.size() != 8 || any_negative(a))
      return std::string(kAttnViewAttrs[i]) + " must be 8 non-negative ints [offset, B, H, S, D, stride_b, stride_h, stride_s]";
    AttnView& v = out->in[i];
    v.offset = a[0];
    std::copy(a.begin() + 1, a.begin() + 5, v.dims);
    v.st = AttnStrides{a[5], a[6], a[7]};
    out->has[i] = true;
  }
  const bool ov = n.has_attr("out_view"), os = n.has_attr("out_shape");
  if (ov != os) return "out_view and out_shape go together";
  if (ov) {
    const std::vector<int64_t> a = n.attr_ints("out_view");
    out->out_shape = n.attr_ints("out_shape");
    if (a.size() != 3 || any_negative(a)) return "out_view must be 3 non-negative ints [stride_b, stride_h, stride_s]";
    if (any_negative(out->out_shape)) return "out_shape has a negative dim";
    out->out = AttnStrides{a[0], a[1], a[2]};
    out->has_out = true;
  }
  return "";
}

std::string attention_view_fits(const AttnView& v, int64_t numel, const char* name) {
  for (int64_t d : v.dims)
    if (d == 0) return "";  // nothing is read
  // A stride of 0 would let a view declare any length over a few elements
  // (and the kernels size their work by it): only a dim of 1 may have one.
  const int64_t strides[3] = {v.st.b, v.st.h, v.st.s};
  for (int d = 0; d < 3; ++d)
    if (v.dims[d] > 1 && strides[d] == 0)
      return std::string(name) + " view repeats elements (stride 0 on a dim of " + std::to_string(v.dims[d]) + ")";
  // The last element's index, term by term: each stays below numel when the
  // view fits, so the sum cannot overflow before the check fails.
  const int64_t steps[4][2] = {{v.dims[0] - 1, v.st.b}, {v.dims[1] - 1, v.st.h}, {v.dims[2] - 1, v.st.s}, {v.dims[3] - 1, 1}};
  int64_t reach = v.offset;
  for (const auto& s : steps) {
    if (reach >= numel || (s[0] > 0 && s[1] > (numel - 1 - reach) / s[0]))
      return std::string(name) + " view reaches past its tensor of " + std::to_string(numel) + " elements";
    reach += s[0] * s[1];
  }
  return "";
}

std::string attention_out_view_fits(const AttnStrides& st, const int64_t dims[4], int64_t numel) {
  int64_t count = 1;
  const bool empty = dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0;
  for (int d = 0; d < 4 && !empty; ++d) {
    if (count > numel / dims[d]) return "out_shape holds " + std::to_string(numel) + " elements, the attention writes more";
    count *= dims[d];
  }
  if (empty) count = 0;
  if (count != numel)
    return "out_shape holds " + std::to_string(numel) + " elements, the attention writes " + std::to_string(count);
  if (count == 0) return "";
  // Every element once: sorted by stride, each (non-unit) dim's stride is
  // the product of the sizes inside it, starting from d's stride 1.
  struct Axis {
    int64_t size, stride;
  };
  std::vector<Axis> axes{{dims[0], st.b}, {dims[1], st.h}, {dims[2], st.s}, {dims[3], 1}};
  axes.erase(std::remove_if(axes.begin(), axes.end(), [](const Axis& a) { return a.size == 1; }), axes.end());
  std::sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) { return a.stride < b.stride; });
  int64_t expect = 1;
  for (const Axis& a : axes) {
    if (a.stride != expect) return "out_view does not write each element of the output exactly once";
    expect *= a.size;
  }
  return "";
}

std::string attention_view_dims(const AttnViews& v, AttnDims* d) {
  if (!(v.has[0] && v.has[1] && v.has[2])) return "q_view, k_view and v_view go together";
  const int64_t* q = v.in[0].dims;
  const int64_t* k = v.in[1].dims;
  const int64_t* w = v.in[2].dims;
  *d = AttnDims{q[0], q[1], k[1], q[2], k[2], q[3], w[3]};
  if (k[0] != q[0] || w[0] != q[0]) return "the q, k and v views have different batch sizes";
  if (k[3] != q[3]) return "the q and k views have different head sizes";
  if (w[1] != k[1] || w[2] != k[2]) return "the k and v views have different head counts or lengths";
  if (k[1] <= 0 || q[1] % k[1] != 0) return "the q view's head count is not a multiple of the k view's";
  return "";
}

std::string attention_views_fit(const AttnViews& v, const AttnDims& d, const int64_t numel[3]) {
  for (int i = 0; i < 3; ++i) {
    const std::string why = attention_view_fits(v.in[i], numel[i], kAttnViewAttrs[i]);
    if (!why.empty()) return why;
  }
  if (!v.has_out) return "";
  int64_t out_numel = 1;
  for (int64_t x : v.out_shape) {
    if (x != 0 && out_numel > (int64_t{1} << 62) / x) return "out_shape is too large";
    out_numel *= x;
  }
  const int64_t dims[4] = {d.B, d.Hq, d.Sq, d.Dv};
  return attention_out_view_fits(v.out, dims, out_numel);
}

std::string check_attention_views(const KernelBuildInfo& info, const AttnViews& v) {
  AttnDims d;
  std::string why = attention_view_dims(v, &d);
  if (!why.empty()) return why;
  int64_t numel[3];
  for (int i = 0; i < 3; ++i) numel[i] = shape_numel(info.input_shape(i));
  why = attention_views_fit(v, d, numel);
  if (!why.empty()) return why;
  const Shape expect = v.has_out ? Shape(v.out_shape.begin(), v.out_shape.end()) : Shape{d.B, d.Hq, d.Sq, d.Dv};
  if (info.has_output(0) && info.output_shape(0) != expect)
    return "the output's shape " + shape_str(info.output_shape(0)) + " is not the views' " + shape_str(expect);
  for (size_t i = 4; i < info.node().inputs.size(); ++i)
    if (info.has_input(i)) return "Attention with views takes no input after the mask";
  for (size_t i = 1; i < info.num_outputs(); ++i)
    if (info.has_output(i)) return "Attention with views has one output";
  return "";
}

}  // namespace twinfer::tx
