// A build without cuDNN's frontend (see CMakeLists.txt): fused attention
// keeps twinfer's own kernel.
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/sdpa_plan.h"
#include "core/device_info.h"

namespace twinfer {
std::string cudnn_frontend_version() { return ""; }
}  // namespace twinfer

namespace twinfer::cuda {

std::shared_ptr<const SdpaPlan> make_cudnn_sdpa(const SdpaSpec&, std::string* why) {
  if (why) *why = "this build has no cuDNN frontend (pip install nvidia-cudnn-frontend==1.28.0, then rebuild)";
  return nullptr;
}

std::string validate_cudnn_sdpa(const SdpaSpec&, int) { return "this build has no cuDNN frontend"; }

std::string validate_cudnn_conv_graph(const ConvGraphSpec&) { return "this build has no cuDNN frontend"; }

bool conv_graph_fuses(const nn::Activation&, std::string* why) {
  if (why) *why = "built without cuDNN's frontend";
  return false;
}

std::shared_ptr<const ConvGraphPlan> make_cudnn_conv_graph(const ConvGraphSpec&, std::string* why) {
  if (why) *why = "this build has no cuDNN frontend";
  return nullptr;
}

}  // namespace twinfer::cuda
