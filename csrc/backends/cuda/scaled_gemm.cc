#include "backends/cuda/scaled_gemm.h"

#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/device_info.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {

std::vector<ScaledGemmKernel>& kernels() {
  static std::vector<ScaledGemmKernel> k;  // filled at static init, read after
  return k;
}

const ScaledGemmKernel* find(DType in, DType out) {
  for (const ScaledGemmKernel& k : kernels())
    if (k.in == in && k.out == out) return &k;
  return nullptr;
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

}  // namespace

void register_scaled_gemm(const ScaledGemmKernel& k) { kernels().push_back(k); }

std::string scaled_gemm_unsupported(const ScaledGemmShape& s) {
  if (kernels().empty())
    return "this build has no CUTLASS kernels (its headers come from the nvidia-cutlass wheel, a CUDA build "
           "requirement)";
  if (!find(s.in, s.out))
    return std::string("no CUTLASS kernel multiplies ") + dtype_name(s.in) + " into " + dtype_name(s.out);
  if (s.out == DType::kInt8 && !(s.y_scale > 0.f)) return "int8 y needs a positive y_scale";
  const int dev = current_device();
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  if (major != 9 || minor != 0)
    return "the CUTLASS kernels are built for compute capability 9.0 (sm_90a), this GPU is " +
           std::to_string(major) + "." + std::to_string(minor);
  if (s.k % 16 != 0) return "K must be a multiple of 16 (TMA), got " + std::to_string(s.k);
  const int64_t align = 16 / static_cast<int64_t>(dtype_size(s.out));
  if (s.n % align != 0)
    return "N must be a multiple of " + std::to_string(align) + " for " + dtype_name(s.out) + " rows, got " +
           std::to_string(s.n);
  if (s.m < 1 || s.n < 1 || s.m > INT32_MAX || s.n > INT32_MAX || s.k > INT32_MAX)
    return "the CUTLASS kernels take sizes from 1 to 2^31 - 1";
  return "";
}

ScaledGemm::ScaledGemm(const ScaledGemmShape& s) : s_(s) {
  const std::string why = scaled_gemm_unsupported(s);
  if (!why.empty()) throw Error(ErrorKind::kUnsupportedOp, why);
  k_ = find(s.in, s.out);
  check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, current_device()),
        "cudaDeviceGetAttribute(multiprocessors)");
  // The shared-memory attribute is per device and process; setting it again
  // for each layer is harmless, and keeps it out of the runs (and captures).
  if (k_->prepare() != 0) {
    cudaGetLastError();
    throw Error(ErrorKind::kUnsupportedOp, std::string(k_->name) + ": cannot set its shared-memory size on this GPU");
  }
  workspace_ = k_->workspace(s, sm_count_);
  params_ = ::operator new(k_->params_size, std::align_val_t(k_->params_align));
  name_ = k_->name;
}

ScaledGemm::~ScaledGemm() {
  if (params_) ::operator delete(params_, std::align_val_t(k_->params_align));
}

namespace {
bool same(const ScaledGemmOperands& a, const ScaledGemmOperands& b) {
  return a.x == b.x && a.w == b.w && a.col_scale == b.col_scale && a.row_scale == b.row_scale && a.bias == b.bias &&
         a.y == b.y;
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

void ScaledGemm::run(const ScaledGemmOperands& o, void* workspace, cudaStream_t stream) const {
  if (!aligned16(o.x) || !aligned16(o.w) || !aligned16(o.y))
    throw Error(ErrorKind::kRuntime, name_ + ": x, w and y must start 16-byte aligned (TMA)");
  std::lock_guard<std::mutex> lock(m_);  // params_ is shared by the contexts running this layer
  int st = 0;
  // A workspace the kernel uses is initialised for each launch.
  if (!have_params_ || !same(o, params_for_) || workspace != params_workspace_ || workspace_ > 0) {
    have_params_ = false;
    st = k_->make_params(s_, o, sm_count_, workspace, stream, params_);
    if (st == 0) have_params_ = true, params_for_ = o, params_workspace_ = workspace;
  }
  if (st == 0) {
    // The launcher reports any earlier error left on this thread as its own.
    cudaGetLastError();
    st = k_->launch(params_, stream);
  }
  if (st != 0) {
    const cudaError_t e = cudaGetLastError();
    throw Error(ErrorKind::kRuntime, name_ + " refused the launch (CUTLASS status " + std::to_string(st) +
                                         (e != cudaSuccess ? std::string(", ") + cudaGetErrorString(e) : "") + ")");
  }
}

}  // namespace twinfer::cuda

namespace twinfer {
std::vector<std::string> cutlass_gemm_kernels() {
  std::vector<std::string> names;
  for (const cuda::ScaledGemmKernel& k : cuda::kernels()) names.push_back(k.name);
  return names;
}
}  // namespace twinfer
