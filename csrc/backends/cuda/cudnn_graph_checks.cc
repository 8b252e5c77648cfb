// cudnn_sdpa_validate and cudnn_conv_validate (core/device_info.h): a
// test's way to the frontend's checks of our graphs, in every CUDA build.
// A conv's dtype may carry options after colons ("float16:nhwc:bias:relu"):
// "nhwc", the channels-last form (ConvGraphSpec::channels_last: NHWC x and
// y, a KRSC filter) that the com.twinfer.nhwc Conv hands cuDNN; "bias",
// "residual" and an activation name, the epilogue fused into the graph;
// "requantize" (int8), QConv's requantization in the graph, int8 out.
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/sdpa_plan.h"
#include "core/device_info.h"
#include "core/error.h"

namespace twinfer {

std::string cudnn_sdpa_validate(const std::vector<int64_t>& dims, const std::string& dtype, bool causal,
                                const std::vector<int64_t>& bias_dims, int sm_version,
                                const std::vector<int64_t>& strides) {
  if (dims.size() != 6 && dims.size() != 7)
    throw Error(ErrorKind::kInvalidArgument, "dims are B, H, Sq, Sk, D, Dv and optionally Hkv");
  if (!strides.empty() && strides.size() != 12)
    throw Error(ErrorKind::kInvalidArgument, "strides are the b, h, s strides of q, k, v and o");
  if (!bias_dims.empty() && bias_dims.size() != 4) throw Error(ErrorKind::kInvalidArgument, "bias_dims are 4 dims");
  cuda::SdpaSpec s;
  s.B = dims[0], s.H = dims[1], s.Sq = dims[2], s.Sk = dims[3], s.D = dims[4], s.Dv = dims[5];
  if (dims.size() == 7) s.Hkv = dims[6];
  s.dtype = dtype == "bfloat16" ? DType::kBFloat16 : DType::kFloat16;
  s.scale = 0.125f;
  s.causal = causal;
  if (!bias_dims.empty()) s.set_broadcast_bias(bias_dims.data());  // as attention.cu hands it
  if (!strides.empty()) {
    const auto st = [&](int t) { return tx::AttnStrides{strides[3 * t], strides[3 * t + 1], strides[3 * t + 2]}; };
    s.set_strides(st(0), st(1), st(2), st(3));
  }
  return cuda::validate_cudnn_sdpa(s, sm_version);
}

std::string cudnn_conv_validate(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                const std::vector<int64_t>& y, const std::vector<int64_t>& pads,
                                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                const std::string& dtype_layout) {
  std::vector<std::string> parts;  // "float16:nhwc:bias:residual:relu"
  for (size_t at = 0;;) {
    const size_t colon = dtype_layout.find(':', at);
    parts.push_back(dtype_layout.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  const std::string& dtype = parts[0];
  cuda::ConvGraphSpec s;
  s.x = x, s.w = w, s.y = y, s.pad_begin = pads, s.pad_end = pads, s.stride = strides, s.dilation = dilations;
  s.dtype = dtype == "float32"    ? DType::kFloat32
            : dtype == "bfloat16" ? DType::kBFloat16
            : dtype == "int8"     ? DType::kInt8
                                  : DType::kFloat16;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "nhwc") s.channels_last = true;
    else if (p == "bias") s.bias = true;
    else if (p == "residual") s.residual = true;
    else if (p == "relu") s.act.kind = nn::ActKind::kRelu;
    else if (p == "leakyrelu") s.act = {nn::ActKind::kLeakyRelu, 0.1f, 0.f};
    else if (p == "clip") s.act = {nn::ActKind::kClip, 0.f, 6.f};
    else if (p == "sigmoid") s.act.kind = nn::ActKind::kSigmoid;
    else if (p == "silu") s.act.kind = nn::ActKind::kSilu;
    else if (p == "gelu") s.act.kind = nn::ActKind::kGelu;
    else if (p == "tanh") s.act.kind = nn::ActKind::kTanh;
    else if (p == "requantize") s.int8_requantize = true;
    else throw Error(ErrorKind::kInvalidArgument, "unknown conv graph option '" + p + "'");
  }
  return cuda::validate_cudnn_conv_graph(s);
}

}  // namespace twinfer
