#include "graph/passes/fold_pad_conv.h"

#include <vector>

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::passes {

namespace {

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// The Pad's pads for every dim of a rank-`rank` input ([begins..., ends...]),
// or false when they are not constant and non-negative.
bool constant_pads(const graph::Graph& g, const graph::Node& pad, const PassContext& ctx, size_t rank,
                   std::vector<int64_t>* pads) {
  std::vector<int64_t> given;
  if (ctx.opset < 11) {
    given = pad.attr_ints("pads");
  } else {
    if (pad.inputs.size() < 2 || pad.inputs[1] < 0) return false;
    const auto& p = g.values[pad.inputs[1]];
    if (!p.is_constant() || p.constant.dtype() != DType::kInt64) return false;
    given.assign(p.constant.data_as<int64_t>(), p.constant.data_as<int64_t>() + p.constant.numel());
  }
  std::vector<int64_t> axes;
  if (pad.inputs.size() > 3 && pad.inputs[3] >= 0) {  // opset 18: pads apply to these axes only
    const auto& a = g.values[pad.inputs[3]];
    if (!a.is_constant() || (a.constant.dtype() != DType::kInt64 && a.constant.dtype() != DType::kInt32)) return false;
    for (int64_t k = 0; k < a.constant.numel(); ++k) {
      int64_t ax = a.constant.dtype() == DType::kInt64 ? a.constant.data_as<int64_t>()[k] : a.constant.data_as<int32_t>()[k];
      if (ax < 0) ax += static_cast<int64_t>(rank);
      if (ax < 0 || ax >= static_cast<int64_t>(rank)) return false;
      axes.push_back(ax);
    }
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  if (given.size() != 2 * axes.size()) return false;
  pads->assign(2 * rank, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    if (given[k] < 0 || given[k + axes.size()] < 0) return false;
    (*pads)[axes[k]] += given[k];
    (*pads)[axes[k] + rank] += given[k + axes.size()];
  }
  return true;
}

// The fill value as an integer when it is absent (0) or a constant of the
// padded tensor's type `t` (float32: only 0 qualifies); false otherwise.
bool constant_fill(const graph::Graph& g, const graph::Node& pad, const PassContext& ctx, DType t, int64_t* fill) {
  if (pad.attr_string("mode", "constant") != "constant") return false;
  *fill = 0;
  if (ctx.opset < 11) return t == DType::kFloat32 && pad.attr_float("value", 0.f) == 0.f;
  if (pad.inputs.size() < 3 || pad.inputs[2] < 0) return true;
  const auto& v = g.values[pad.inputs[2]];
  if (!v.is_constant() || v.constant.numel() != 1 || v.constant.dtype() != t) return false;
  if (t == DType::kFloat32) return *v.constant.data_as<float>() == 0.f;
  *fill = t == DType::kUInt8 ? *v.constant.data_as<uint8_t>() : *v.constant.data_as<int8_t>();
  return true;
}

// The x zero point of a QConv (0 when absent), or false when not constant.
bool qconv_x_zero(const graph::Graph& g, const graph::Node& c, int64_t* zero) {
  *zero = 0;
  if (c.inputs.size() <= quant::kQXZero || c.inputs[quant::kQXZero] < 0) return true;
  const auto& z = g.values[c.inputs[quant::kQXZero]];
  if (!z.is_constant() || z.constant.numel() != 1) return false;
  *zero = z.constant.dtype() == DType::kUInt8 ? *z.constant.data_as<uint8_t>() : *z.constant.data_as<int8_t>();
  return true;
}

bool is_qconv(const graph::Node& n) { return n.domain == kTwinferDomain && n.op_type == quant::kQConvOp; }

}  // namespace

int fold_pad_into_conv(graph::Graph& g, const PassContext& ctx, std::map<std::string, std::string>* renamed) {
  const auto users = value_users(g);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& pad = g.nodes[i];
    if (!is_default(pad, "Pad") || pad.inputs.empty() || pad.inputs[0] < 0 || pad.outputs.empty()) continue;
    const int x = pad.inputs[0], y = pad.outputs[0];
    const auto& xv = g.values[x];
    const bool quantized = xv.dtype == DType::kUInt8 || xv.dtype == DType::kInt8;
    int64_t fill = 0;
    if (!xv.has_shape || xv.shape.size() < 3 || (xv.dtype != DType::kFloat32 && !quantized)) continue;
    if (users[y].empty() || is_graph_output(g, y) || !constant_fill(g, pad, ctx, xv.dtype, &fill)) continue;
    const size_t rank = xv.shape.size();
    std::vector<int64_t> pads;
    if (!constant_pads(g, pad, ctx, rank, &pads)) continue;
    if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) continue;  // batch or channel padding
    const size_t spatial = rank - 2;
    bool ok = true;
    for (int u : users[y]) {
      const graph::Node& c = g.nodes[u];
      // float: a Conv padding with 0. int8: a QConv, whose oneDNN kernel pads
      // with its x zero point (the integer standing for 0): the fill must be it.
      int64_t zero = 0;
      const bool conv_ok = quantized ? is_qconv(c) && qconv_x_zero(g, c, &zero) && zero == fill
                                     : is_default(c, "Conv");
      ok = ok && conv_ok && c.inputs[0] == y;
      for (size_t k = 1; ok && k < c.inputs.size(); ++k) ok = c.inputs[k] != y;
      ok = ok && c.attr_string("auto_pad", "NOTSET") == "NOTSET" &&
           c.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0)).size() == 2 * spatial;
    }
    if (!ok) continue;
    std::vector<graph::Node> padded;  // each reader with the pads folded in, committed only if all fit
    for (int u : users[y]) {
      graph::Node c = g.nodes[u];
      std::vector<int64_t> cp = c.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
      for (size_t d = 0; d < spatial; ++d) {
        cp[d] += pads[2 + d];
        cp[d + spatial] += pads[rank + 2 + d];
      }
      graph::Attribute a;
      a.type = graph::Attribute::Type::kInts;
      a.ints = cp;
      c.attrs["pads"] = a;
      c.inputs[0] = x;
      ok = ok && rewrite_fits(g, c, ctx);
      padded.push_back(std::move(c));
    }
    if (!ok) continue;
    for (size_t k = 0; k < padded.size(); ++k) g.nodes[users[y][k]] = std::move(padded[k]);
    (*renamed)[g.values[y].name] = xv.name;
    ++folded;
  }
  if (folded) {
    g.remove_dead();
    ctx.note("fold_pad_conv: " + std::to_string(folded) + " Pad folded into Conv pads");
  }
  return folded;
}

}  // namespace twinfer::passes
