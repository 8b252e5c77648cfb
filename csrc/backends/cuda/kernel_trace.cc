#include "backends/cuda/kernel_trace.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "backends/cuda/libraries.h"
#include "core/error.h"

#if __has_include(<cupti_activity.h>)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cupti_activity.h>
#include <cupti_result.h>
#define TWINFER_HAVE_CUPTI 1
#endif

namespace twinfer::cuda {

#ifdef TWINFER_HAVE_CUPTI
namespace {

// The CUPTI functions we call, from the dlopen'ed library.
struct CuptiApi {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiGetStreamIdEx) stream_id = nullptr;
  decltype(&cuptiGetContextId) context_id = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  PFN_cuStreamGetCtx_v9020 stream_ctx = nullptr;  // the driver's, for a stream's context
  std::string why;  // empty when every function is there
};

template <class F>
void load(CuptiApi& a, F* out, const char* symbol) {
  *out = reinterpret_cast<F>(library_symbol("cupti", symbol));
  if (!*out && a.why.empty()) a.why = std::string("libcupti lacks ") + symbol;
}

const CuptiApi& cupti() {
  static const CuptiApi api = [] {
    CuptiApi a;
    const Library& lib = library("cupti");
    if (!lib.handle) {
      a.why = lib.why;
      return a;
    }
    load(a, &a.register_callbacks, "cuptiActivityRegisterCallbacks");
    load(a, &a.enable, "cuptiActivityEnable");
    load(a, &a.disable, "cuptiActivityDisable");
    load(a, &a.flush_all, "cuptiActivityFlushAll");
    load(a, &a.next_record, "cuptiActivityGetNextRecord");
    load(a, &a.timestamp, "cuptiGetTimestamp");
    load(a, &a.stream_id, "cuptiGetStreamIdEx");
    load(a, &a.context_id, "cuptiGetContextId");
    load(a, &a.result_string, "cuptiGetResultString");
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamGetCtx", &fn, 9020, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      a.stream_ctx = reinterpret_cast<PFN_cuStreamGetCtx_v9020>(fn);
    else
      cudaGetLastError();
    return a;
  }();
  return api;
}

void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  if (cupti().result_string) cupti().result_string(r, &msg);
  throw Error(ErrorKind::kDevice, std::string(what) + ": " + (msg ? msg : "CUPTI error " + std::to_string(r)));
}

// What the buffer callbacks fill (CUPTI calls them from its own threads).
struct TraceState {
  std::mutex m;
  bool running = false, callbacks_registered = false;
  std::vector<KernelSpan> spans;
};

TraceState& state() {
  static TraceState* s = new TraceState();  // CUPTI may call back at exit
  return *s;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelSpan> got;
  CUpti_Activity* r = nullptr;
  while (cupti().next_record(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    // The fields read here sit where every CUpti_ActivityKernel version has them.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    got.push_back(KernelSpan{k->name ? k->name : "?", (uint64_t(k->contextId) << 32) | k->streamId, k->start,
                             k->end});
  }
  std::free(buffer);
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  s.spans.insert(s.spans.end(), got.begin(), got.end());
}

}  // namespace

void start_kernel_trace() {
  const CuptiApi& api = cupti();
  if (!api.why.empty()) throw Error(ErrorKind::kDevice, "kernel spans need CUPTI: " + api.why);
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  if (s.running) throw Error(ErrorKind::kDevice, "a kernel trace is already running in this process");
  if (!s.callbacks_registered) {
    check_cupti(api.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    s.callbacks_registered = true;
  }
  s.spans.clear();
  check_cupti(api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  s.running = true;
}

std::vector<KernelSpan> stop_kernel_trace() {
  const CuptiApi& api = cupti();
  if (!api.why.empty()) return {};
  {
    std::lock_guard<std::mutex> lock(state().m);
    if (!state().running) return {};
  }
  // Flush outside the lock: CUPTI calls buffer_completed, which takes it.
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(state().m);
  state().running = false;
  return std::move(state().spans);
}

uint64_t trace_clock_ns() {
  uint64_t t = 0;
  if (cupti().timestamp) cupti().timestamp(&t);
  return t;
}

uint64_t trace_stream_key(cudaStream_t s) {
  const CuptiApi& api = cupti();
  if (!api.why.empty() || !api.stream_ctx) return 0;
  CUcontext ctx = nullptr;
  uint32_t ctx_id = 0, stream_id = 0;
  if (api.stream_ctx(reinterpret_cast<CUstream>(s), &ctx) != CUDA_SUCCESS || !ctx) return 0;
  if (api.context_id(ctx, &ctx_id) != CUPTI_SUCCESS) return 0;
  if (api.stream_id(nullptr, reinterpret_cast<CUstream>(s), 0, &stream_id) != CUPTI_SUCCESS) return 0;
  return (uint64_t(ctx_id) << 32) | stream_id;
}

#else  // built without CUPTI's headers

void start_kernel_trace() {
  throw Error(ErrorKind::kDevice, "kernel spans need CUPTI, and this build had no cupti_activity.h");
}
std::vector<KernelSpan> stop_kernel_trace() { return {}; }
uint64_t trace_clock_ns() { return 0; }
uint64_t trace_stream_key(cudaStream_t) { return 0; }

#endif

}  // namespace twinfer::cuda
