// What the build and the machine offer, for build_info() / cuda_available().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace twinfer {
bool cuda_compiled();
int cuda_device_count();              // 0 when no driver/GPU (never throws)
std::string cuda_runtime_version();   // "" when not compiled
std::string cuda_device_name(int i);  // "" when unavailable

// The CUDA libraries from NVIDIA's wheels (cuBLASLt, cuDNN), opened with
// dlopen on first use, never linked: the module imports without them, a GPU
// or a driver. Python hands in where the wheels put them (twinfer/_libs.py).
void set_cuda_library_path(const std::string& name, const std::string& path);  // "cublasLt", "cudnn"
// "13.1.1" etc., or "" with *why set when the library cannot be opened.
std::string cuda_library_version(const std::string& name, std::string* why);
// Resolves every entry point the CUDA kernels take from those libraries (no
// GPU needed): the problems found, one line each; empty when all resolve.
std::vector<std::string> cuda_symbol_problems();
// Registers one library's resolution for cuda_symbol_problems (the GEMM and
// convolution files do, at static init).
void register_cuda_symbol_check(void (*resolve_all)());
// The CUTLASS int8 / FP8 GEMM kernels compiled in (backends/cuda/scaled_gemm.h),
// by name; empty without CUTLASS's headers at build time.
std::vector<std::string> cutlass_gemm_kernels();
// The cuDNN frontend version compiled in ("1.28.0"), "" without it (cuDNN's
// fused attention then stays off).
std::string cudnn_frontend_version();
// The frontend's own checks of a fused-attention graph (backends/cuda/
// sdpa_plan.h) for a GPU of sm_version, without a GPU: "" when they pass,
// else why. dims: B, H, Sq, Sk, D, Dv and optionally Hkv (grouped key and
// value heads); bias_dims: empty, or the additive
// mask's 4 dims; dtype "float16" or "bfloat16"; strides: empty (contiguous)
// or 12 ints, the b, h, s strides of q, k, v and o (d contiguous), as
// strided attention operands (ops/transformer/attention_views.h) hand them. For tests.
std::string cudnn_sdpa_validate(const std::vector<int64_t>& dims, const std::string& dtype, bool causal,
                                const std::vector<int64_t>& bias_dims, int sm_version,
                                const std::vector<int64_t>& strides);
// The same for a convolution's graph (backends/cuda/conv_graph.h): x, w, y
// NCHW dims, pads (begin = end), strides, dilations per spatial dim.
std::string cudnn_conv_validate(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                const std::vector<int64_t>& y, const std::vector<int64_t>& pads,
                                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                const std::string& dtype);
}  // namespace twinfer
