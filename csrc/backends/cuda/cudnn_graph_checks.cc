// cudnn_sdpa_validate and cudnn_conv_validate (core/device_info.h): a
// test's way to the frontend's checks of our graphs, in every CUDA build.
// A float conv dtype ending in ":nhwc" ("float16:nhwc") checks the
// channels-last form (ConvGraphSpec::channels_last: NHWC x and y, a KRSC
// filter) that the com.twinfer.nhwc Conv hands cuDNN.
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/sdpa_plan.h"
#include "core/device_info.h"
#include "core/error.h"

namespace twinfer {

std::string cudnn_sdpa_validate(const std::vector<int64_t>& dims, const std::string& dtype, bool causal,
                                const std::vector<int64_t>& bias_dims, int sm_version) {
  if (dims.size() != 6) throw Error(ErrorKind::kInvalidArgument, "dims are B, H, Sq, Sk, D, Dv");
  if (!bias_dims.empty() && bias_dims.size() != 4) throw Error(ErrorKind::kInvalidArgument, "bias_dims are 4 dims");
  cuda::SdpaSpec s;
  s.B = dims[0], s.H = dims[1], s.Sq = dims[2], s.Sk = dims[3], s.D = dims[4], s.Dv = dims[5];
  s.dtype = dtype == "bfloat16" ? DType::kBFloat16 : DType::kFloat16;
  s.scale = 0.125f;
  s.causal = causal;
  if (!bias_dims.empty()) s.set_broadcast_bias(bias_dims.data());  // as attention.cu hands it
  return cuda::validate_cudnn_sdpa(s, sm_version);
}

std::string cudnn_conv_validate(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                const std::vector<int64_t>& y, const std::vector<int64_t>& pads,
                                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                const std::string& dtype_layout) {
  static const std::string kNhwc = ":nhwc";
  const bool nhwc = dtype_layout.size() > kNhwc.size() &&
                    dtype_layout.compare(dtype_layout.size() - kNhwc.size(), kNhwc.size(), kNhwc) == 0;
  const std::string dtype = nhwc ? dtype_layout.substr(0, dtype_layout.size() - kNhwc.size()) : dtype_layout;
  cuda::ConvGraphSpec s;
  s.x = x, s.w = w, s.y = y, s.pad_begin = pads, s.pad_end = pads, s.stride = strides, s.dilation = dilations;
  s.channels_last = nhwc;
  s.dtype = dtype == "float32"    ? DType::kFloat32
            : dtype == "bfloat16" ? DType::kBFloat16
            : dtype == "int8"     ? DType::kInt8
                                  : DType::kFloat16;
  return cuda::validate_cudnn_conv_graph(s);
}

}  // namespace twinfer
