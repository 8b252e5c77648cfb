// conv_graph.h on cuDNN's graph API: one conv_fprop node on contiguous
// NCHW tensors (dims always in N, C, spatial order; the layout is the
// strides), float accumulation; groups follow from the filter's channel dim.
// Built once with the kernel; a refusal comes back as null with cuDNN's
// message, and conv.cc uses the legacy API instead.
#include <unordered_map>

#include "backends/cuda/conv_graph.h"
#include "backends/cuda/cudnn_fe_setup.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {

enum Uid : int64_t { kX = 1, kW, kY };

std::vector<int64_t> contiguous(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
  return st;
}

// `y_out`: where the output tensor goes; when set, y's dims are left for
// the frontend to infer (validate_cudnn_conv_graph compares them with ours).
std::shared_ptr<fe::graph::Graph> conv_graph(const ConvGraphSpec& s,
                                             std::shared_ptr<fe::graph::Tensor_attributes>* y_out = nullptr) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe_type(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim(dims)
                             .set_stride(contiguous(dims))
                             .set_data_type(fe_type(s.dtype)));
  };
  auto x = tensor("x", kX, s.x);
  auto w = tensor("w", kW, s.w);
  auto attrs = fe::graph::Conv_fprop_attributes()
                   .set_name("conv")
                   .set_pre_padding(s.pad_begin)
                   .set_post_padding(s.pad_end)
                   .set_stride(s.stride)
                   .set_dilation(s.dilation);
  auto y = graph->conv_fprop(x, w, attrs);
  y->set_output(true).set_uid(kY).set_data_type(fe_type(s.dtype));
  if (y_out) {
    *y_out = y;
  } else {
    y->set_dim(s.y).set_stride(contiguous(s.y));
  }
  return graph;
}

class CudnnConvGraph final : public ConvGraphPlan {
 public:
  explicit CudnnConvGraph(const ConvGraphSpec& s)
      : graph_(conv_graph(s), "conv", [&s](fe::graph::Graph& g) {
          if (s.max_workspace) g.deselect_workspace_greater_than(static_cast<int64_t>(s.max_workspace));
          // Exact float32: no engine that rounds the inputs to TF32 on tensor cores.
          if (s.exact) g.deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
        }) {}

  size_t workspace_bytes() const override { return graph_.workspace_bytes(); }
  const std::string& plan_name() const override { return graph_.plan_name(); }

  void run(const void* x, const void* w, void* y, void* workspace, cudaStream_t s) const override {
    std::unordered_map<int64_t, void*> pack{{kX, const_cast<void*>(x)}, {kW, const_cast<void*>(w)}, {kY, y}};
    graph_.execute(pack, workspace, s);
  }

 private:
  FeGraph graph_;
};

}  // namespace

std::string validate_cudnn_conv_graph(const ConvGraphSpec& spec) {
  try {
    fe_ready();
    std::shared_ptr<fe::graph::Tensor_attributes> y;
    fe::error_t e = conv_graph(spec, &y)->validate();
    if (!e.is_good()) return e.get_message();
    if (y->get_dim() != spec.y) {
      std::string got;
      for (int64_t d : y->get_dim()) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return "cuDNN infers the output as [" + got + "], not the given y";
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::unique_ptr<ConvGraphPlan> make_cudnn_conv_graph(const ConvGraphSpec& spec, std::string* why) {
  try {
    return std::make_unique<CudnnConvGraph>(spec);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupportedOp) throw;  // out of memory, a device fault: not a refusal
    if (why) *why = e.what();
  } catch (const std::runtime_error& e) {  // the frontend's own (a missing symbol or library)
    if (why) *why = std::string("cuDNN frontend: ") + e.what();
  }
  return nullptr;
}

}  // namespace twinfer::cuda
