// cuDNN through a table of entry points resolved with dlsym from
// libcudnn.so.9 (opened by libraries.cc, never linked; its RUNPATH finds the
// sub-libraries and cuBLASLt in the sibling wheels). Convolution uses the
// long-standing descriptor API (cudnnConvolutionForward), deprecated in
// favour of the graph API but complete for plain, grouped and dilated
// convolutions. Only the conv files include this (it pulls in cudnn.h from
// NVIDIA's wheel; see CMakeLists.txt).
#pragma once
#include <mutex>
#include <cudnn.h>

#include "backends/cuda/libraries.h"

namespace twinfer::cuda {

struct CudnnApi {
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnCreateTensorDescriptor) tensor_create = nullptr;
  decltype(&cudnnSetTensorNdDescriptor) tensor_set = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) tensor_destroy = nullptr;
  decltype(&cudnnCreateFilterDescriptor) filter_create = nullptr;
  decltype(&cudnnSetFilterNdDescriptor) filter_set = nullptr;
  decltype(&cudnnDestroyFilterDescriptor) filter_destroy = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) conv_create = nullptr;
  decltype(&cudnnSetConvolutionNdDescriptor) conv_set = nullptr;
  decltype(&cudnnSetConvolutionGroupCount) conv_groups = nullptr;
  decltype(&cudnnSetConvolutionMathType) conv_math = nullptr;
  decltype(&cudnnDestroyConvolutionDescriptor) conv_destroy = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos = nullptr;
  decltype(&cudnnConvolutionForward) fwd = nullptr;
};

const CudnnApi& cudnn();
// One handle per device, used under cudnn_handle_mutex() (libraries.h).
cudnnHandle_t cudnn_handle(int device);
void check_cudnn(cudnnStatus_t s, const char* what);
// check_cudnn for building a kernel: a status of the BAD_PARAM or
// NOT_SUPPORTED families (a shape or combination cuDNN does not take) is
// Error(kUnsupportedOp), so the node falls back to the CPU with the reason.
void check_cudnn_setup(cudnnStatus_t s, const char* what);

}  // namespace twinfer::cuda
