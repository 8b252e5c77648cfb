// Convolution on cuDNN's graph API (built through the frontend in
// cudnn_fe_conv.cc) behind an interface free of the frontend's headers, so
// conv.cc can try it first: its heuristics (mode A, as PyTorch's) choose
// among the engines cuDNN 9 has, where the legacy API's
// cudnnGetConvolutionForwardAlgorithm_v7 picks from the old algorithm list.
// Without the frontend in the build, no_cudnn_fe.cc answers null.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/nn/activation.h"

namespace twinfer::cuda {

// x [N, C, ...], w [M, C/group, k...], y [N, M, ...] (dims in this order
// whatever the layout), 2 or 3 spatial dims (a 1-d convolution comes with a
// height of 1). Float types: contiguous NCHW (NCDHW), or with
// `channels_last` x and y NHWC (NDHWC) and w KRSC ([M, k..., C/group]: the
// layout cuDNN's fast NHWC engines want the filter in). int8: x and w
// channels-last (NHWC, and w as [M, KH, KW, C]), y int32 channels-last
// (the accumulator, for the layer's own epilogue): QConv's form.
struct ConvGraphSpec {
  std::vector<int64_t> x, w, y;
  bool channels_last = false;  // float types only; int8 is always channels-last
  std::vector<int64_t> pad_begin, pad_end, stride, dilation;  // one per spatial dim
  DType dtype = DType::kFloat32;  // float32, float16, bfloat16, or int8
  // ConvTranspose: y is the data gradient of a convolution from y to x
  // (cuDNN's dgrad), w is ONNX's [C, M/group, k...] as that convolution's
  // filter; pads and strides are that convolution's (ConvTranspose's own).
  bool transpose = false;
  bool exact = false;        // float32 without TF32: engines using tensor cores are left out
  size_t max_workspace = 0;  // engines needing more are left out (0: no bound, but with sm_count)
  // The fused Conv's epilogue inside the graph (float forward convolutions):
  // y = act(conv + bias[M] + residual), the sum in float, one write of y.
  // cuDNN's runtime-fusion engines take such graphs (on NHWC, with tensor
  // cores); when none does, the caller asks again without it and runs its
  // own epilogue kernel. `act` must be one conv_graph_fuses().
  bool bias = false, residual = false;
  nn::Activation act;
  // int8 only: the layer's requantization inside the graph instead of int32
  // sums out, y = int8(act(conv * scale[M] + bias[M])) channels-last, scale
  // and bias float32 device vectors (QConv folds 1 / y_scale into both),
  // `act` none or ReLU. cuDNN's runtime-fusion engines list int8 convolution
  // with float pointwise ops and an int8 output on Hopper (the graph API's
  // support surface 90); where no engine takes it, QConv asks for the int32
  // form and runs its own epilogue.
  bool int8_requantize = false;
  // The SMs cuDNN plans for (the frontend's target SM count): a green
  // context's share, for the plan a partitioned stream runs; 0 for the whole
  // device. Such a plan is the heuristics' choice for that count, not timed
  // (the trials would run on the whole device), within max_workspace even
  // when it is 0, and never one cuDNN compiles at run time.
  int sm_count = 0;
};

// Whether `act` goes inside cuDNN's graph: those its pointwise modes express
// exactly (ReLU, LeakyReLU as RELU_FWD's slope, Sigmoid, SiLU as SWISH, erf
// and tanh GELU, Tanh). Not HardSigmoid / HardSwish, and not Clip (ReLU6),
// which RELU_FWD's clips express but cuDNN 9.19 put on a slow engine. `why`: the
// reason when not.
bool conv_graph_fuses(const nn::Activation& act, std::string* why = nullptr);

class ConvGraphPlan {
 public:
  virtual ~ConvGraphPlan() = default;
  virtual size_t workspace_bytes() const = 0;
  virtual const std::string& plan_name() const = 0;
  // bias and residual: the spec's fused epilogue's operands (null without);
  // scale: int8_requantize's per-channel vector.
  virtual void run(const void* x, const void* w, void* y, void* workspace, cudaStream_t s,
                   const void* bias = nullptr, const void* residual = nullptr, const void* scale = nullptr) const = 0;
};

// cuDNN's plan for `spec` on the current device, or null with `why`.
// Kernels of the same spec share one plan.
std::shared_ptr<const ConvGraphPlan> make_cudnn_conv_graph(const ConvGraphSpec& spec, std::string* why);

// The frontend's own checks of `spec`'s graph (shapes inferred and compared
// with y), without a GPU: "" when they pass, else the message.
std::string validate_cudnn_conv_graph(const ConvGraphSpec& spec);

}  // namespace twinfer::cuda
