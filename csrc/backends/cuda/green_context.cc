#include "backends/cuda/green_context.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <map>
#include <mutex>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"
#include "core/sm_partition.h"

namespace twinfer::cuda {

namespace {

// The driver functions, fetched once (null where the driver lacks one).
struct DriverApi {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetDevResource_v12040 get_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 split = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 green_create = nullptr;
  PFN_cuGreenCtxDestroy_v12040 green_destroy = nullptr;
  PFN_cuCtxFromGreenCtx_v12040 context_of = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create = nullptr;
  PFN_cuCtxPushCurrent_v4000 push = nullptr;
  PFN_cuCtxPopCurrent_v4000 pop = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_retain = nullptr;
  std::string missing;  // the first function the driver did not give

  bool complete() const { return missing.empty(); }
};

template <class F>
void fetch(DriverApi& d, F* out, const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    if (d.missing.empty()) d.missing = name;
    return;
  }
  *out = reinterpret_cast<F>(fn);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi d;
    fetch(d, &d.device_get, "cuDeviceGet", 2000);
    fetch(d, &d.get_resource, "cuDeviceGetDevResource", 12040);
    fetch(d, &d.split, "cuDevSmResourceSplitByCount", 12040);
    fetch(d, &d.generate_desc, "cuDevResourceGenerateDesc", 12040);
    fetch(d, &d.green_create, "cuGreenCtxCreate", 12040);
    fetch(d, &d.green_destroy, "cuGreenCtxDestroy", 12040);
    fetch(d, &d.context_of, "cuCtxFromGreenCtx", 12040);
    fetch(d, &d.stream_create, "cuGreenCtxStreamCreate", 12050);
    fetch(d, &d.push, "cuCtxPushCurrent", 4000);
    fetch(d, &d.pop, "cuCtxPopCurrent", 4000);
    fetch(d, &d.error_string, "cuGetErrorString", 6000);
    fetch(d, &d.primary_retain, "cuDevicePrimaryCtxRetain", 7000);
    return d;
  }();
  return api;
}

void check_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* s = nullptr;
  if (driver().error_string) driver().error_string(r, &s);
  throw Error(ErrorKind::kDevice, std::string(what) + ": " + (s ? s : "CUDA driver error " + std::to_string(r)));
}

// One split of a device's SMs into groups of the smallest partition size;
// every green context takes whole groups of this one split (CUDA combines
// only groups of one split into a context, and separate splits overlap).
struct DeviceSplit {
  CUdevice dev = 0;
  CUdevResource whole{};
  std::vector<CUdevResource> groups;
  std::unique_ptr<SmPartitioner> partitioner;
};

DeviceSplit& split_of(int device) {
  static std::mutex m;
  static auto* splits = new std::map<int, std::unique_ptr<DeviceSplit>>();  // never destroyed
  std::lock_guard<std::mutex> lock(m);
  auto& s = (*splits)[device];
  if (s) return *s;
  const DriverApi& d = driver();
  if (!d.complete())
    throw Error(ErrorKind::kDevice, "sm_share needs green contexts, which this CUDA driver does not offer (" +
                                        d.missing + " is missing; a CUDA 12.5 or newer driver has them)");
  auto ns = std::make_unique<DeviceSplit>();
  check_cu(d.device_get(&ns->dev, device), "cuDeviceGet");
  check_cu(d.get_resource(ns->dev, &ns->whole, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)");
  const unsigned min_count = std::max(1u, ns->whole.sm.minSmPartitionSize);
  unsigned n = 0;
  check_cu(d.split(nullptr, &n, &ns->whole, nullptr, 0, min_count), "cuDevSmResourceSplitByCount (query)");
  if (n == 0)
    throw Error(ErrorKind::kDevice, "cuda:" + std::to_string(device) + " cannot be split into SM partitions");
  ns->groups.resize(n);
  check_cu(d.split(ns->groups.data(), &n, &ns->whole, nullptr, 0, min_count), "cuDevSmResourceSplitByCount");
  ns->groups.resize(n);
  std::vector<int> sizes;
  for (const auto& g : ns->groups) sizes.push_back(static_cast<int>(g.sm.smCount));
  ns->partitioner = std::make_unique<SmPartitioner>("cuda:" + std::to_string(device),
                                                    static_cast<int>(ns->whole.sm.smCount), sizes);
  s = std::move(ns);
  return *s;
}

}  // namespace

std::shared_ptr<GreenContext> GreenContext::create(int device, double share) {
  DeviceSplit& sp = split_of(device);
  const DriverApi& d = driver();
  SmPartitioner::Grant grant = sp.partitioner->acquire(share);
  std::shared_ptr<GreenContext> g(new GreenContext());
  g->device_ = device;
  g->sm_count_ = grant.sms;
  g->groups_ = grant.groups;  // released by the destructor from here on
  std::vector<CUdevResource> mine;
  for (int i : grant.groups) mine.push_back(sp.groups[i]);
  CUdevResourceDesc desc = nullptr;
  check_cu(d.generate_desc(&desc, mine.data(), static_cast<unsigned>(mine.size())), "cuDevResourceGenerateDesc");
  CUgreenCtx green = nullptr;
  check_cu(d.green_create(&green, desc, sp.dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  g->green_ = green;
  CUcontext ctx = nullptr;
  check_cu(d.context_of(&ctx, green), "cuCtxFromGreenCtx");
  g->context_ = ctx;
  return g;
}

GreenContext::~GreenContext() {
  if (green_ && driver().green_destroy) driver().green_destroy(static_cast<CUgreenCtx>(green_));
  release_groups();
}

void GreenContext::release_groups() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!groups_.empty()) split_of(device_).partitioner->release(groups_);
  groups_.clear();
}

cudaStream_t GreenContext::create_stream(int priority) {
  CUstream s = nullptr;
  check_cu(driver().stream_create(&s, static_cast<CUgreenCtx>(green_), CU_STREAM_NON_BLOCKING, priority),
           "cuGreenCtxStreamCreate");
  return reinterpret_cast<cudaStream_t>(s);
}

namespace {
thread_local void* tls_green = nullptr;  // the entered green context's CUcontext

// Pushes ctx (a CUcontext) and records which green context is current.
std::shared_ptr<void> push_context(void* ctx, void* green) {
  const DriverApi& d = driver();
  check_cu(d.push(static_cast<CUcontext>(ctx)), "cuCtxPushCurrent");
  void* prev = tls_green;
  tls_green = green;
  return std::shared_ptr<void>(ctx, [&d, prev](void*) {
    CUcontext popped = nullptr;
    d.pop(&popped);
    tls_green = prev;
  });
}
}  // namespace

std::shared_ptr<void> GreenContext::enter() {
  auto lock = std::make_shared<std::unique_lock<std::recursive_mutex>>(mutex_);
  std::shared_ptr<void> pushed = push_context(context_, context_);
  // Popped first, then unlocked.
  return std::shared_ptr<void>(context_, [lock, pushed](void*) mutable {
    pushed.reset();
    lock.reset();
  });
}

void* current_green_context() { return tls_green; }

std::shared_ptr<void> enter_primary_context(int device) {
  // The primary context: retained once per device, never released (it lives
  // as long as the process uses the device).
  static std::mutex m;
  static std::map<int, CUcontext>* primary = new std::map<int, CUcontext>();
  CUcontext p = nullptr;
  {
    std::lock_guard<std::mutex> lock(m);
    CUcontext& slot = (*primary)[device];
    if (!slot) {
      const DriverApi& d = driver();
      if (!d.primary_retain || !d.device_get) throw Error(ErrorKind::kDevice, "the driver lacks cuDevicePrimaryCtxRetain");
      CUdevice dev = 0;
      check_cu(d.device_get(&dev, device), "cuDeviceGet");
      check_cu(d.primary_retain(&slot, dev), "cuDevicePrimaryCtxRetain");
    }
    p = slot;
  }
  return push_context(p, nullptr);
}

int device_sm_count(int device) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) cudaGetLastError();
  return n;
}

}  // namespace twinfer::cuda
