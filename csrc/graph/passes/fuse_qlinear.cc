#include "graph/passes/fuse_qlinear.h"

#include <algorithm>
#include <string>
#include <vector>

#include "graph/domains.h"
#include "graph/passes/qdq_util.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::passes {

namespace {

using graph::Graph;
using graph::Node;

bool is_default(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }
bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// Input i of n when it is a constant (behind Identity nodes), else nullptr.
const Tensor* constant_input(const Graph& g, const Node& n, size_t i) {
  return i < n.inputs.size() ? constant_behind_identity(g, n.inputs[i]) : nullptr;
}

// The value behind the Identity chain ending in input i of n: the fused
// node reads the constant directly, since its kernels ask for constant
// weights and zero points.
int behind_identity(const Graph& g, const Node& n, size_t i) { return passes::behind_identity(g, n.inputs[i]); }

// A float32 constant of one element, positive and finite (a scale).
bool scalar_scale(const Tensor* t) {
  if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1) return false;
  const float s = *t->data_as<float>();
  return s > 0.f && s < 3.0e38f;
}

// Input i is absent or a one-element constant of type `type` (a zero point).
bool scalar_zero(const Graph& g, const Node& n, size_t i, DType type) {
  if (i >= n.inputs.size() || n.inputs[i] < 0) return true;
  const Tensor* t = constant_input(g, n, i);
  return t && t->numel() == 1 && t->dtype() == type;
}

// The weights' scales as `channels` floats: one per channel, or one for all
// (shape [], [1] or [channels]); false for anything else.
bool channel_scales(const Tensor* t, int64_t channels, std::vector<float>* out) {
  if (!t || t->dtype() != DType::kFloat32) return false;
  const int64_t n = t->numel();
  if (n != 1 && !(n == channels && t->shape().size() == 1)) return false;
  out->resize(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const float s = t->data_as<float>()[n == 1 ? 0 : c];
    if (!(s > 0.f && s < 3.0e38f)) return false;
    (*out)[c] = s;
  }
  return true;
}

// The weights as the fused kernels take them, int8 with zero point 0: w less
// its zero point (absent: 0; one, or one per output channel), exact when
// every difference fits int8 (uint8 weights around 128, int8 ones around
// 0), else false. `channel_of(i)`: element i's output channel. *out is the
// input's own tensor when nothing changes.
template <typename ChannelOf>
bool centered_weights(const Graph& g, const Node& n, size_t wi, size_t zi, int64_t channels, ChannelOf channel_of,
                      Tensor* out) {
  const Tensor* w = constant_input(g, n, wi);
  if (!w || !is_q8(w->dtype())) return false;
  const Tensor* z = zi < n.inputs.size() && n.inputs[zi] >= 0 ? constant_input(g, n, zi) : nullptr;
  if (zi < n.inputs.size() && n.inputs[zi] >= 0 &&
      (!z || z->dtype() != w->dtype() || (z->numel() != 1 && z->numel() != channels)))
    return false;
  auto at = [](const Tensor& t, int64_t i) -> int32_t {
    return t.dtype() == DType::kUInt8 ? t.data_as<uint8_t>()[i] : t.data_as<int8_t>()[i];
  };
  bool zero = true;
  for (int64_t k = 0; z && k < z->numel(); ++k) zero = zero && at(*z, k) == 0;
  if (zero && w->dtype() == DType::kInt8) {
    *out = *w;
    return true;
  }
  Tensor c = Tensor::empty(DType::kInt8, w->shape());
  int8_t* d = c.data_as<int8_t>();
  for (int64_t i = 0; i < w->numel(); ++i) {
    const int32_t v = at(*w, i) - (z ? at(*z, z->numel() == 1 ? 0 : channel_of(i)) : 0);
    if (v < -128 || v > 127) return false;
    d[i] = static_cast<int8_t>(v);
  }
  *out = std::move(c);
  return true;
}

// On a device: whether its kernels take the fused node (the CUDA QConv has no
// 3-D form, where QLinearConv's direct kernel has). Shapes not yet known
// when the question is asked (a build info that throws) count as a yes, as
// in rewrite_fits: the plan's placement decides then.
bool device_takes(const Graph& g, const Node& f, const PassContext& ctx) {
  if (ctx.backend == Backend::kCPU) return true;
  try {
    KernelBuildInfo info(g, f, ctx.opset, ctx.backend, ctx.precision);
    std::string why;
    return select_kernel(info, &why) != nullptr;
  } catch (const Error&) {
    return true;
  }
}

struct QLinearRewrite {
  Graph& g;
  const PassContext& ctx;

  // The fused node's common part: x and its zero point, the weights, y's zero
  // point, and the requantization as one multiplier per output channel,
  // float(x_scale * w_scale[m] / y_scale) as the definition (and
  // onnxruntime) computes it, in the weights' scales with x's and y's set to
  // 1: the kernels then round acc * mult[m] once, as the definition does,
  // where x_scale * w_scale[m] and / y_scale would round twice and move the
  // results that sit on half levels (which quantizers' scales make common).
  Node fused(const Node& n, const char* op, const std::vector<float>& mult, const Tensor& w) {
    Node f;
    f.name = n.name;
    f.domain = kTwinferDomain;
    f.op_type = op;
    f.attrs["activation"] = string_attr("");
    f.attrs["activation_params"] = floats_attr({});
    f.inputs.assign(quant::kQNumInputs, -1);
    const std::string base = n.name.empty() ? g.values[n.outputs[0]].name : n.name;
    f.inputs[quant::kQX] = n.inputs[0];
    f.inputs[quant::kQXScale] = scalar(base + "_unit_x_scale", 1.f);
    f.inputs[quant::kQXZero] = behind_identity(g, n, 2);
    // The weights: the input's own when they were int8 around 0, else the centred copy.
    const Tensor* own = constant_input(g, n, 3);
    f.inputs[quant::kQW] =
        own && own->data() == w.data() ? behind_identity(g, n, 3) : add_constant(g, base + "_weights_int8", w);
    Tensor s = Tensor::empty(DType::kFloat32, {static_cast<int64_t>(mult.size())});
    std::copy(mult.begin(), mult.end(), s.data_as<float>());
    f.inputs[quant::kQWScale] = add_constant(g, base + "_requant_scale", std::move(s));
    f.inputs[quant::kQYScale] = scalar(base + "_unit_y_scale", 1.f);
    f.inputs[quant::kQYZero] = behind_identity(g, n, 7);
    f.outputs = {n.outputs[0]};
    return f;
  }
  int scalar(const std::string& name, float v) {
    Tensor t = Tensor::empty(DType::kFloat32, {});
    *t.data_as<float>() = v;
    return add_constant(g, name, std::move(t));
  }
  // The per-channel multipliers x_scale * w_scale[m] / y_scale (float, in that order).
  std::vector<float> multipliers(const Node& n, const std::vector<float>& wscale) const {
    const float xs = *constant_input(g, n, 1)->data_as<float>(), ys = *constant_input(g, n, 6)->data_as<float>();
    std::vector<float> mult(wscale.size());
    for (size_t m = 0; m < wscale.size(); ++m) mult[m] = xs * wscale[m] / ys;
    return mult;
  }

  // What both ops need of inputs 1, 2, 6, 7 (x's and y's scale and zero
  // point) and of the output.
  bool activations_fit(const Node& n) const {
    if (n.inputs.size() < 8 || n.outputs.size() != 1 || n.inputs[0] < 0 || n.inputs[7] < 0) return false;
    const DType xt = g.values[n.inputs[0]].dtype, yt = g.values[n.outputs[0]].dtype;
    if (!is_q8(xt) || !is_q8(yt)) return false;
    if (!scalar_scale(constant_input(g, n, 1)) || !scalar_scale(constant_input(g, n, 6))) return false;
    return scalar_zero(g, n, 2, xt) && constant_input(g, n, 7) && scalar_zero(g, n, 7, yt);
  }

  bool conv(const Node& n, std::vector<Node>& out) {
    if (!is_default(n, "QLinearConv") || !activations_fit(n)) return false;
    const Tensor* w = constant_input(g, n, 3);  // read before add_constant can move g.values
    if (!w || w->shape().size() < 3 || w->shape().size() > 5) return false;
    const int64_t channels = w->shape()[0], per_channel = w->numel() / std::max<int64_t>(1, channels);
    std::vector<float> wscale;
    Tensor wc;
    if (!channel_scales(constant_input(g, n, 4), channels, &wscale) ||
        !centered_weights(g, n, 3, 5, channels, [&](int64_t i) { return i / per_channel; }, &wc))
      return false;
    const std::vector<float> mult = multipliers(n, wscale);
    std::vector<float> bias;
    if (n.inputs.size() > 8 && n.inputs[8] >= 0) {
      const Tensor* b = constant_input(g, n, 8);
      if (!b || b->dtype() != DType::kInt32 || b->numel() != channels || b->shape().size() != 1) return false;
      bias.resize(static_cast<size_t>(channels));
      // The int32 bias is in the sum's units; the fused kernel adds it scaled, in y's.
      for (int64_t m = 0; m < channels; ++m)
        bias[m] = static_cast<float>(static_cast<double>(b->data_as<int32_t>()[m]) * mult[m]);
    }
    Node f = fused(n, quant::kQConvOp, mult, wc);
    for (const auto& [name, attr] : n.attrs) f.attrs[name] = attr;
    if (!bias.empty()) {
      Tensor t = Tensor::empty(DType::kFloat32, {channels});
      std::copy(bias.begin(), bias.end(), t.data_as<float>());
      const std::string base = n.name.empty() ? g.values[n.outputs[0]].name : n.name;
      f.inputs[quant::kQBias] = add_constant(g, base + "_bias", std::move(t));
    }
    if (!rewrite_fits(g, f, ctx) || !device_takes(g, f, ctx)) return false;
    out.push_back(std::move(f));
    return true;
  }

  bool matmul(const Node& n, std::vector<Node>& out) {
    if (!is_default(n, "QLinearMatMul") || !activations_fit(n)) return false;
    const Tensor* b = constant_input(g, n, 3);
    if (!b || b->shape().size() != 2) return false;
    const auto& av = g.values[n.inputs[0]];
    if (av.has_shape && av.shape.size() < 2) return false;  // a vector a drops its dim: MatMul's rule, not QMatMul's
    const int64_t channels = b->shape()[1];
    std::vector<float> wscale;
    Tensor bc;
    if (!channel_scales(constant_input(g, n, 4), channels, &wscale) ||
        !centered_weights(g, n, 3, 5, channels, [&](int64_t i) { return i % channels; }, &bc))
      return false;
    Node f = fused(n, quant::kQMatMulOp, multipliers(n, wscale), bc);
    if (!rewrite_fits(g, f, ctx) || !device_takes(g, f, ctx)) return false;
    out.push_back(std::move(f));
    return true;
  }
};

}  // namespace

bool has_qlinear_layer(const Graph& g) {
  for (const auto& n : g.nodes)
    if (is_default(n, "QLinearConv") || is_default(n, "QLinearMatMul")) return true;
  return false;
}

int fuse_qlinear(Graph& g, const PassContext& ctx) {
  if (!ctx.allow_fusion || !any_kernel_for(kTwinferDomain, quant::kQMatMulOp, ctx.backend) ||
      !any_kernel_for(kTwinferDomain, quant::kQConvOp, ctx.backend))
    return 0;
  QLinearRewrite r{g, ctx};
  int convs = 0;
  const int n = rewrite_each_node(g, [&](size_t i, std::vector<Node>& out) {
    const Node node = g.nodes[i];  // a copy: add_constant may grow g's vectors
    if (r.conv(node, out)) {
      ++convs;
      return true;
    }
    return r.matmul(node, out);
  });
  if (n)
    ctx.note("fuse_qlinear: " + std::to_string(convs) + " QLinearConv -> com.twinfer::QConv, " +
             std::to_string(n - convs) + " QLinearMatMul -> com.twinfer::QMatMul");
  return n;
}

}  // namespace twinfer::passes
