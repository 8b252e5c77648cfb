// NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class,
// iou_threshold, score_threshold) -> selected_indices [K, 3] of (batch, class, box).
// Per batch and class: boxes scoring above score_threshold (all of them when
// it is absent), taken by descending score (equal scores: lower box index
// first; NaN first; ops/tensor/nms_math.h, shared with CUDA's), each kept unless its IoU with a box already kept exceeds
// iou_threshold, until max_output_boxes_per_class are kept (0 or absent:
// none). center_point_box=0 reads boxes as two corners [y1, x1, y2, x2] in
// any order, 1 as [x_center, y_center, width, height]. K depends on the
// values: the shape rule runs the selection for constant inputs, except the
// eager evaluator's larger ones, whose output the kernel makes itself.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <numeric>

#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/nms_math.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kBoxTypes = ew::kFloatTypes;

struct NmsParams {
  int64_t max_out = 0;
  double iou = 0;
  bool has_score = false;
  double score = 0;
};

double scalar_float(const TensorView& t) {
  double v = 0;
  ew::dispatch_typeset<ew::kFloatTypes>(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(ew::load(*t.as<const T>()));
  });
  return v;
}

// Reads the optional scalar inputs (views with data == nullptr are absent).
NmsParams nms_params(const TensorView* max_out, const TensorView* iou, const TensorView* score) {
  NmsParams p;
  if (max_out && max_out->data && max_out->numel() > 0) p.max_out = std::max<int64_t>(0, view_scalar_int(*max_out));
  if (iou && iou->data && iou->numel() > 0) p.iou = scalar_float(*iou);
  if (score && score->data && score->numel() > 0) {
    p.has_score = true;
    p.score = scalar_float(*score);
  }
  return p;
}

// The boxes kept so far by their x range, so that a candidate is tested only
// against those whose range meets its own (nms_suppresses() needs an overlap in
// x): the same decisions as testing every kept box, far fewer tests where the
// boxes spread out (torchvision's batched_nms shifts each class's boxes apart
// along x, so one NMS over 90 classes tests a box against its class's only).
class KeptByX {
 public:
  void clear() {
    by_lo_.clear();
    wide_.clear();
    max_width_ = 0;
  }
  void add(double lo, double hi, int64_t box) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) {
      wide_.push_back(box);  // NaN or infinite: tested with every candidate
      return;
    }
    const std::pair<double, int64_t> e{lo, box};
    by_lo_.insert(std::upper_bound(by_lo_.begin(), by_lo_.end(), e), e);
    max_width_ = std::max(max_width_, hi - lo);
  }
  // Whether test(k) holds for a kept box k whose x range may meet [lo, hi].
  template <typename Test>
  bool any(double lo, double hi, const std::vector<int64_t>& all_kept, Test&& test) const {
    if (!std::isfinite(lo) || !std::isfinite(hi))
      return std::any_of(all_kept.begin(), all_kept.end(), test);
    for (int64_t k : wide_)
      if (test(k)) return true;
    // A kept box meets [lo, hi) only if its own lo is above lo - max_width
    // (the margin covers the rounding of the widths) and below hi.
    const double from = lo - max_width_ - (std::abs(lo) + max_width_) * 1e-9 - 1e-30;
    auto it = std::lower_bound(by_lo_.begin(), by_lo_.end(), std::pair<double, int64_t>{from, INT64_MIN});
    for (; it != by_lo_.end() && it->first < hi; ++it)
      if (test(it->second)) return true;
    return false;
  }

 private:
  std::vector<std::pair<double, int64_t>> by_lo_;  // (lowest x, box), sorted
  std::vector<int64_t> wide_;
  double max_width_ = 0;
};

std::vector<std::array<int64_t, 3>> nms_compute(const TensorView& boxes, const TensorView& scores,
                                                const NmsParams& p, bool center) {
  std::vector<std::array<int64_t, 3>> out;
  const int64_t nb = boxes.shape[0], n = boxes.shape[1], nc = scores.shape[1];
  if (p.max_out == 0) return out;
  ew::dispatch_typeset<kBoxTypes>(boxes.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ew::compute_t<T>;
    const T* bx = boxes.as<const T>();
    const T* sc = scores.as<const T>();
    std::vector<NmsBox<C>> box(static_cast<size_t>(n));
    std::vector<std::pair<C, int64_t>> cand;
    std::vector<int64_t> kept;
    KeptByX index;
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        C v[4];
        for (int j = 0; j < 4; ++j) v[j] = ew::load(bx[(b * n + i) * 4 + j]);
        box[i] = nms_corners(v, center);
      }
      for (int64_t c = 0; c < nc; ++c) {
        const T* s = sc + (b * nc + c) * n;
        cand.clear();
        for (int64_t i = 0; i < n; ++i) {
          const C v = ew::load(s[i]);
          if (nms_candidate(v, p.has_score, p.score)) cand.push_back({v, i});
        }
        std::sort(cand.begin(), cand.end(),
                  [](const auto& x, const auto& y) { return nms_before(x.first, x.second, y.first, y.second); });
        kept.clear();
        index.clear();
        for (const auto& [v, i] : cand) {
          if (static_cast<int64_t>(kept.size()) >= p.max_out) break;
          const auto& bi = box[static_cast<size_t>(i)];
          const double lo = std::min<double>(bi.x0, bi.x1), hi = std::max<double>(bi.x0, bi.x1);
          if (index.any(lo, hi, kept,
                        [&](int64_t k) { return nms_suppresses(bi, box[static_cast<size_t>(k)], p.iou); }))
            continue;
          kept.push_back(i);
          index.add(lo, hi, i);
          out.push_back({b, c, i});
        }
      }
    }
  });
  return out;
}

void nms_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kBoxTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("NonMaxSuppression does not support dtype ") + dtype_name(dt));
  if (!(c.input_dtype(1) == dt)) c.fail(ErrorKind::kDType, "boxes and scores must have one dtype");
  if (c.input_has_shape(0) && c.input_has_shape(1)) {
    const SymShape &b = c.input_shape(0), &s = c.input_shape(1);
    if (!(b.size() == 3 && s.size() == 3))
      c.fail(ErrorKind::kShape,
             "boxes " + sym_shape_str(b) + " must be [B, N, 4] and scores " + sym_shape_str(s) + " [B, C, N]");
    if (!(!b[2].known() || b[2].value == 4))
      c.fail(ErrorKind::kShape, "boxes " + sym_shape_str(b) + " must end in 4");
    if (!(!(b[0].known() && s[0].known()) || b[0].value == s[0].value))
      c.fail(ErrorKind::kShape, "boxes " + sym_shape_str(b) + " and scores " + sym_shape_str(s) + " differ in batch");
    if (!(!(b[1].known() && s[2].known()) || b[1].value == s[2].value))
      c.fail(ErrorKind::kShape,
             "boxes " + sym_shape_str(b) + " and scores " + sym_shape_str(s) + " differ in box count");
  }
  Dim k;
  const Tensor *bx = c.input_constant(0), *sc = c.input_constant(1);
  bool all = bx && sc;
  TensorView opt[3];
  for (size_t i = 2; i < 5 && all; ++i) {
    if (!c.has_input(i)) continue;
    const Tensor* t = c.input_constant(i);
    if (!t) {
      all = false;
    } else {
      opt[i - 2] = t->view();
    }
  }
  // Constant inputs: the count now, so a plan knows K (and the node folds
  // at load). The eager evaluator, with larger inputs, leaves K to the
  // kernel's run_dynamic instead: counting here would select twice.
  const bool count_now = all && (!c.evaluating() || (bx->numel() <= 4 * 4096 && sc->numel() <= 4096));
  if (count_now) {
    const NmsParams p = nms_params(&opt[0], &opt[1], &opt[2]);
    k = Dim(static_cast<int64_t>(nms_compute(bx->view(), sc->view(), p,
                                             c.node().attr_int("center_point_box", 0) != 0).size()));
  }
  c.set_output(0, DType::kInt64, SymShape{k, Dim(3)});
}

class NmsKernel final : public Kernel {
 public:
  explicit NmsKernel(const KernelBuildInfo& info)
      : center_(info.node().attr_int("center_point_box", 0) != 0), node_(info.node().name) {}

  bool dynamic_outputs() const override { return true; }
  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const auto sel = select(ctx);
    Tensor y = Tensor::empty(DType::kInt64, {static_cast<int64_t>(sel.size()), 3});
    int64_t* o = y.data_as<int64_t>();
    for (size_t i = 0; i < sel.size(); ++i)
      for (int j = 0; j < 3; ++j) o[i * 3 + j] = sel[i][j];
    return {y};
  }

  void run(KernelContext& ctx) const override {
    const auto sel = select(ctx);
    const TensorView& y = ctx.outputs[0];
    if (static_cast<int64_t>(sel.size()) != y.shape[0])
      throw Error(ErrorKind::kInvalidArgument, "selection differs from the planned output", node_,
                  "NonMaxSuppression");
    int64_t* o = y.as<int64_t>();
    for (size_t i = 0; i < sel.size(); ++i)
      for (int j = 0; j < 3; ++j) o[i * 3 + j] = sel[i][j];
  }

 private:
  std::vector<std::array<int64_t, 3>> select(const KernelContext& ctx) const {
    auto in = [&](size_t i) -> const TensorView* { return ctx.inputs.size() > i ? &ctx.inputs[i] : nullptr; };
    return nms_compute(ctx.inputs[0], ctx.inputs[1], nms_params(in(2), in(3), in(4)), center_);
  }

  bool center_;
  std::string node_;
};

bool nms_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kBoxTypes, why) && ew::check_same_dtype(info, {0, 1}, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("NonMaxSuppression", nms_infer);
TWINFER_REGISTER_KERNEL("NonMaxSuppression", Backend::kCPU, 0, nms_supports, make_kernel<NmsKernel>);

}  // namespace twinfer::tensor
