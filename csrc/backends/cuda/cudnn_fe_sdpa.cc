// cuDNN's fused flash attention (the frontend's sdpa node) for
// sdpa_plan.h: the graph is built and its plan chosen once, when the
// kernel is built (heuristics A, then FALLBACK); a run only executes it.
// The composite implementation is tried first, then the frontend's own
// choice (the unified node on cuDNN >= 9.13.1). Any refusal while building
// (a head dim not a multiple of 8, an unsupported bias layout, no engine)
// comes back as null with cuDNN's message, and attention.cu runs its own
// kernel instead.
#include <unordered_map>

#include "backends/cuda/cudnn_fe_setup.h"
#include "backends/cuda/sdpa_plan.h"
#include "core/error.h"
#include "core/shape.h"

namespace twinfer::cuda {

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kBias };

// The frontend graph of `s`: [B, H (Hkv for k and v), S, D] tensors (contiguous or at the
// spec's strides), float
// statistics, no softmax statistics output (inference). sm_version > 0
// targets that GPU instead of the current one (set before the node is made:
// nodes copy the graph's context when created). `impl`: COMPOSITE is the
// long-standing flash-attention graph, checked by the frontend itself (head
// dims, shapes); the newer UNIFIED node leaves its checks to cuDNN.
std::shared_ptr<fe::graph::Graph> sdpa_graph(const SdpaSpec& s, fe::AttentionImplementation_t impl,
                                             int sm_version = -1) {
  auto graph = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) graph->set_sm_version(sm_version);
  graph->set_io_data_type(fe_type(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
  };
  const int64_t hkv = s.kv_heads();
  const std::vector<int64_t> qd{s.B, s.H, s.Sq, s.D}, kd{s.B, hkv, s.Sk, s.D}, vd{s.B, hkv, s.Sk, s.Dv};
  auto q = tensor("q", kQ, qd, s.strides_of(0, qd));
  auto k = tensor("k", kK, kd, s.strides_of(1, kd));
  auto v = tensor("v", kV, vd, s.strides_of(2, vd));
  auto attrs = fe::graph::SDPA_attributes()
                   .set_name("attention")
                   .set_generate_stats(false)
                   .set_attn_scale(s.scale)
                   .set_implementation(impl);
  if (s.causal) attrs.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  if (s.has_bias) {
    auto bias = tensor("bias", kBias, {s.bias_dims, s.bias_dims + 4}, {s.bias_strides, s.bias_strides + 4});
    attrs.set_bias(bias);
  }
  auto [o, stats] = graph->sdpa(q, k, v, attrs);
  (void)stats;  // not generated
  const std::vector<int64_t> od{s.B, s.H, s.Sq, s.Dv};
  o->set_output(true).set_uid(kO).set_dim(od).set_stride(s.strides_of(3, od));
  return graph;
}

class CudnnSdpa final : public SdpaPlan {
 public:
  CudnnSdpa(const SdpaSpec& s, fe::AttentionImplementation_t impl)
      : has_bias_(s.has_bias), graph_(sdpa_graph(s, impl), "SDPA") {}

  size_t workspace_bytes() const override { return graph_.workspace_bytes(); }
  const std::string& plan_name() const override { return graph_.plan_name(); }

  void run(const void* q, const void* k, const void* v, const void* bias, void* o, void* workspace,
           cudaStream_t s) const override {
    std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)},
                                            {kK, const_cast<void*>(k)},
                                            {kV, const_cast<void*>(v)},
                                            {kO, o}};
    if (has_bias_) pack.emplace(kBias, const_cast<void*>(bias));
    graph_.execute(pack, workspace, s);
  }

 private:
  bool has_bias_;
  FeGraph graph_;
};

// Why cuDNN cannot take this bias, or "". Its kernels read the bias with
// the keys contiguous, and frontend 1.28 checks that stride for q, k, v and
// o but not for the bias (later frontends do: cudnn-frontend PR #823), so a
// mask broadcast over the keys (stride 0 there) would be read wrongly.
std::string bias_refusal(const SdpaSpec& s) {
  if (s.has_bias && s.bias_dims[3] > 1 && s.bias_strides[3] != 1)
    return "a mask broadcast over the keys (cuDNN reads the bias with its keys contiguous)";
  return "";
}

}  // namespace

std::string validate_cudnn_sdpa(const SdpaSpec& spec, int sm_version) {
  const std::string refused = bias_refusal(spec);
  if (!refused.empty()) return refused;
  try {
    fe_ready();
    auto graph = sdpa_graph(spec, fe::AttentionImplementation_t::COMPOSITE, sm_version);
    fe::error_t e = graph->validate();
    return e.is_good() ? "" : e.get_message();
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::shared_ptr<const SdpaPlan> make_cudnn_sdpa(const SdpaSpec& spec, std::string* why) {
  if (spec.dtype != DType::kFloat16 && spec.dtype != DType::kBFloat16) {
    if (why) *why = "cuDNN's fused attention takes float16 and bfloat16 only";
    return nullptr;
  }
  const std::string refused = bias_refusal(spec);
  if (!refused.empty()) {
    if (why) *why = refused;
    return nullptr;
  }
  static PlanCache<SdpaPlan>* cache = new PlanCache<SdpaPlan>();  // never destroyed: plans outlive statics
  std::string key = std::to_string(static_cast<int>(spec.dtype)) + (spec.causal ? "c" : "") + exact_key(spec.scale);
  for (int64_t v : {spec.B, spec.H, spec.kv_heads(), spec.Sq, spec.Sk, spec.D, spec.Dv}) key += "," + std::to_string(v);
  for (const auto& st : spec.strides) key += "/" + std::to_string(st[0]) + ":" + std::to_string(st[1]) + ":" + std::to_string(st[2]);
  if (spec.has_bias)
    for (int d = 0; d < 4; ++d) key += ";" + std::to_string(spec.bias_dims[d]) + ":" + std::to_string(spec.bias_strides[d]);
  return cache->get(key, [&](std::string* reason) -> std::shared_ptr<const SdpaPlan> {
    // The composite graph first; the frontend's own choice (the unified node)
    // after it, where that is not the composite again (with a bias before
    // cuDNN 9.21 it would be).
    std::vector<fe::AttentionImplementation_t> impls{fe::AttentionImplementation_t::COMPOSITE};
    if (!spec.has_bias) impls.push_back(fe::AttentionImplementation_t::AUTO);
    for (auto impl : impls)
      if (auto p = try_build<SdpaPlan>([&] { return std::make_shared<const CudnnSdpa>(spec, impl); }, reason)) return p;
    return nullptr;
  }, why);
}

}  // namespace twinfer::cuda
