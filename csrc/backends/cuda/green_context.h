// Green contexts: a stream whose kernels run on a share of the GPU's SMs
// (sm_share on a Parallel or Pipeline member). Driver API only (CUDA 12.4+
// drivers), fetched through cudaGetDriverEntryPointByVersion so twinfer
// never links libcuda; a driver without it gets a plain kDevice error.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

namespace twinfer::cuda {

// One green context on `share` of the device's SMs, holding its SM groups
// (core/sm_partition.h) until it goes. Its streams must not outlive it.
class GreenContext {
 public:
  // Throws kDevice where the driver cannot (too old, or a GPU without
  // partitioning), kInvalidArgument for a share outside (0, 1].
  static std::shared_ptr<GreenContext> create(int device, double share);
  ~GreenContext();
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;

  // A non-blocking stream on the partition (destroy with cudaStreamDestroy).
  cudaStream_t create_stream(int priority);
  int sm_count() const { return sm_count_; }
  // Makes the green context current on this thread until the guard goes
  // (PyTorch does the same while it enqueues on a green stream). A green
  // context may be current on one thread at a time, the driver does not
  // synchronise its users (cuGreenCtxCreate): the guard holds a lock too,
  // reentrant, so a thread inside may enter again.
  std::shared_ptr<void> enter();
  void* context() const { return context_; }  // its CUcontext
  // The share's groups back to the device's bookkeeping now (the context
  // that used the partition is gone; the green context lives on for its
  // streams' last frees).
  void release_groups();

 private:
  GreenContext() = default;
  int device_ = 0;
  int sm_count_ = 0;
  std::vector<int> groups_;
  std::recursive_mutex mutex_;  // held while current on a thread
  void* green_ = nullptr;  // CUgreenCtx
  void* context_ = nullptr;  // its CUcontext
};

// Events belong to the context current where they were created, and CUDA
// records an event only on a stream of that same context. Green streams live
// in their green context; every other stream in the device's primary one.
// The CUcontext of the green context entered on this thread (GreenContext::
// enter), or null for the primary context.
void* current_green_context();
// Makes `device`'s primary context current until the guard goes (pushed even
// over an entered green context).
std::shared_ptr<void> enter_primary_context(int device);

// SMs of the whole device and the green-context split (for build_info).
int device_sm_count(int device);

}  // namespace twinfer::cuda
