// The device layer (core/device_api.h) on CUDA: a thin layer over the runtime
// API. Memory from the device's stream-ordered pool (cudaMallocAsync), kept
// cached by the pool so steady-state runs do not go to the driver; pinned
// host memory from cudaHostAlloc; non-blocking streams with priorities, and
// on green contexts (sm_share); events without timing unless asked;
// thread-local graph capture, so other threads' models are undisturbed while
// one captures.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backends/cuda/capture_mode.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/green_context.h"
#include "backends/cuda/kernel_trace.h"
#include "backends/cuda/libraries.h"
#include "core/device_api.h"

namespace twinfer::cuda {

namespace {

// Whether `device`'s primary context exists (the driver's
// cuDevicePrimaryCtxGetState, through the runtime's entry point so nothing
// links the driver library). True when that cannot be asked.
// Graph captures of ours under way in this process (any device): while one
// is, a device-wide synchronisation is invalid whatever this thread's
// capture mode, and would invalidate it.
std::atomic<int> captures_under_way{0};

bool primary_context_active(int device) {
  using GetState = int (*)(int, unsigned int*, int*);  // CUresult (CUdevice, flags, active)
  static const GetState get_state = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 7000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetState{nullptr};
    }
    return reinterpret_cast<GetState>(fn);
  }();
  unsigned int flags = 0;
  int active = 1;
  return !get_state || get_state(device, &flags, &active) != 0 || active != 0;
}

// Makes `index` the calling thread's current device for the guard's life
// (the static runtime keeps its own per-thread current device). The device
// before is restored only when its context exists: cudaSetDevice creates
// one (hundreds of MB), and a thread's untouched default is device 0, so a
// process on cuda:1 alone would get a context on GPU 0 from every fresh
// thread that builds or runs a plan (the plan-ahead worker, a server's).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    cudaGetDevice(&prev_);
    if (prev_ != index) check(cudaSetDevice(index), "cudaSetDevice");
    index_ = index;
  }
  ~DeviceGuard() {
    if (prev_ == index_ || !primary_context_active(prev_)) return;
    if (cudaSetDevice(prev_) != cudaSuccess) cudaGetLastError();
  }

 private:
  int prev_ = 0, index_ = 0;
};

void throw_oom(int index, size_t bytes) {
  throw Error(ErrorKind::kOutOfMemory,
              "out of memory on cuda:" + std::to_string(index) + " allocating " + std::to_string(bytes) + " bytes");
}

class CudaEvent final : public Event {
 public:
  CudaEvent(int index, bool timing) : index_(index), timing_(timing) {
    DeviceGuard g(index);
    create();
  }
  ~CudaEvent() override {
    if (cudaEventDestroy(e_) != cudaSuccess) cudaGetLastError();
  }
  // Remade in `green`'s context (null: the primary one) when it is to be
  // recorded on a stream of another context than its own (CUDA records only
  // on streams of the event's context). Recording replaces whatever the
  // event held, so nothing is lost.
  void rebind(GreenContext* green) {
    if ((green ? green->context() : nullptr) == ctx_) return;
    const std::shared_ptr<void> in = green ? green->enter() : enter_primary_context(index_);
    if (cudaEventDestroy(e_) != cudaSuccess) cudaGetLastError();
    e_ = nullptr;
    create();
  }
  void synchronize() override {
    // Relaxed: a host wait for one of our events, while torch captures a
    // graph in global mode on another thread, is neither refused nor a
    // threat to that capture (an event wait syncs no stream of theirs).
    RelaxedCaptureScope relaxed;
    check(cudaEventSynchronize(e_), "cudaEventSynchronize");
  }
  bool ready() override {
    // A thread capturing in thread-local mode may not query events (the
    // query would invalidate its capture): relaxed mode for this one call.
    cudaError_t r;
    {
      RelaxedCaptureScope relaxed;
      r = cudaEventQuery(e_);
    }
    if (r == cudaErrorNotReady) return false;
    if (r == cudaErrorCapturedEvent || r == cudaErrorStreamCaptureUnsupported) {
      cudaGetLastError();
      return false;  // recorded inside a capture: the graph's launches say when, not the event
    }
    check(r, "cudaEventQuery");
    return true;
  }
  bool captured() const override { return capture_ != 0; }
  uint64_t capture_sequence() const override { return capture_; }
  bool timed() const override { return timing_; }
  cudaEvent_t get() const { return e_; }
  void set_capture(uint64_t id) { capture_ = id; }

 private:
  void create() {
    check(cudaEventCreateWithFlags(&e_, timing_ ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
    ctx_ = current_green_context();
  }

  int index_;
  bool timing_;
  uint64_t capture_ = 0;  // CUDA cannot be asked; the stream that records it says
  cudaEvent_t e_ = nullptr;
  void* ctx_ = nullptr;  // the green context it was made in (null: the primary one)
};

CudaEvent& cuda_event(Event& e) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  if (!ce) throw Error(ErrorKind::kDevice, "an event of another device used on a CUDA stream");
  return *ce;
}
cudaEvent_t native(Event& e) { return cuda_event(e).get(); }

class CudaGraph final : public GraphExec {
 public:
  CudaGraph(cudaGraphExec_t exec, size_t nodes) : exec_(exec), nodes_(nodes) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void launch(Stream& s) override {
    check(cudaGraphLaunch(exec_, reinterpret_cast<cudaStream_t>(s.handle())), "cudaGraphLaunch");
  }
  size_t num_nodes() const override { return nodes_; }

 private:
  cudaGraphExec_t exec_;
  size_t nodes_;
};

class CudaStream final : public Stream {
 public:
  // Owned: a new non-blocking stream (it never syncs with the legacy default stream).
  CudaStream(int index, int priority) : index_(index), priority_(priority), owned_(true) {
    DeviceGuard g(index);
    check(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority), "cudaStreamCreateWithPriority");
  }
  // Owned, on a green context's share of the SMs.
  CudaStream(int index, int priority, std::shared_ptr<GreenContext> green)
      : index_(index), priority_(priority), owned_(true), green_(std::move(green)) {
    DeviceGuard g(index);
    s_ = green_->create_stream(priority);
  }
  // Borrowed: a caller's stream. 0 and 1 are the legacy default stream, 2 the
  // per-thread one: the values of cudaStreamLegacy / cudaStreamPerThread.
  CudaStream(int index, uintptr_t handle) : index_(index), owned_(false) {
    s_ = reinterpret_cast<cudaStream_t>(handle);
    if (handle > 2) {
      int p = 0;
      if (cudaStreamGetPriority(s_, &p) == cudaSuccess) priority_ = p;
      else cudaGetLastError();
    }
  }
  ~CudaStream() override {
    // Pending work still completes; a green context goes after its stream,
    // so that stream's work is waited for first.
    if (green_ && cudaStreamSynchronize(s_) != cudaSuccess) cudaGetLastError();
    if (owned_ && cudaStreamDestroy(s_) != cudaSuccess) cudaGetLastError();
  }
  Device device() const override { return Device::cuda(index_); }
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(s_); }
  bool borrowed() const override { return !owned_; }
  int priority() const override { return priority_; }
  int sm_count() const override { return green_ ? green_->sm_count() : 0; }
  void release_sm_share() override {
    if (green_) green_->release_groups();
  }
  std::shared_ptr<void> enter() override { return green_ ? green_->enter() : nullptr; }
  const std::shared_ptr<GreenContext>& green() const { return green_; }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    DeviceGuard g(index_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_), "cudaMemcpyAsync");
  }
  void memset(void* dst, int value, size_t bytes) override {
    if (!bytes) return;
    DeviceGuard g(index_);
    check(cudaMemsetAsync(dst, value, bytes, s_), "cudaMemsetAsync");
  }
  void host_task(std::function<void()> fn, Accesses) override {
    // The trampoline frees its function after one call: a graph replaying it
    // would call freed memory. (CUDA kernels never need host tasks; only the
    // simulated device runs its kernels this way.)
    if (capturing())
      throw Error(ErrorKind::kRuntime, "a host task cannot be captured into a CUDA graph");
    auto* f = new std::function<void()>(std::move(fn));
    DeviceGuard g(index_);
    const cudaError_t r = cudaLaunchHostFunc(s_, &CudaStream::trampoline, f);
    if (r != cudaSuccess) delete f;
    check(r, "cudaLaunchHostFunc");
  }
  void record(Event& e) override {
    DeviceGuard g(index_);  // handles 1 and 2 name the current device's default streams
    CudaEvent& ce = cuda_event(e);
    ce.rebind(green_.get());  // a no-op unless green contexts are in play
    check(cudaEventRecord(ce.get(), s_), "cudaEventRecord");
    ce.set_capture(capture_sequence());
  }
  void wait(Event& e) override {
    DeviceGuard g(index_);
    check(cudaStreamWaitEvent(s_, native(e), 0), "cudaStreamWaitEvent");
  }
  void synchronize() override {
    // Our streams are non-blocking: waiting for one, relaxed, leaves another
    // thread's global-mode capture alone. A caller's stream (the legacy
    // default one, say) keeps the thread's mode: its sync may touch a
    // capturing stream, which CUDA then rightly refuses.
    std::optional<RelaxedCaptureScope> relaxed;
    if (owned_) relaxed.emplace();
    check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
  }

  // A capture begins and ends under the cuDNN lock: cudnnConvolutionForward
  // finalizes execution plans lazily, and one doing so on another thread
  // while a capture ended crashed the driver inside cuStreamEndCapture (seen
  // on an H100, cuDNN 9.19, driver 580: two members of one engine in
  // Parallel). Both sides are host calls of microseconds.
  void begin_capture() override {
    DeviceGuard g(index_);
    std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
    check(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    ++captures_under_way;
  }
  std::unique_ptr<GraphExec> end_capture() override {
    DeviceGuard g(index_);
    cudaGraph_t graph = nullptr;
    {
      std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
      const cudaError_t ended = cudaStreamEndCapture(s_, &graph);  // ends it, even when it failed
      --captures_under_way;
      check(ended, "cudaStreamEndCapture");
    }
    size_t nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) cudaGetLastError();
    cudaGraphExec_t exec = nullptr;
    // UseNodePriority: each kernel keeps the priority of the stream it was
    // captured on (a graphed group's high-priority member stays high); without
    // it the whole graph runs at the launching stream's priority. (Upload is
    // for cudaGraphInstantiateWithParams only: cudaGraphUpload below does it,
    // on this idle, capture-only stream, keeping that work out of the first launch.)
    const cudaError_t r = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    cudaGraphDestroy(graph);
    check(r, "cudaGraphInstantiate");
    if (cudaGraphUpload(exec, s_) != cudaSuccess) cudaGetLastError();  // an optimisation only
    return std::make_unique<CudaGraph>(exec, nodes);
  }
  bool capturing() const override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s_, &st) != cudaSuccess) cudaGetLastError();
    return st == cudaStreamCaptureStatusActive;
  }
  uint64_t capture_sequence() const override {
    // CUDA's ids are unique per capture sequence in the process, never 0.
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(s_, &st, &id) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return st == cudaStreamCaptureStatusActive ? static_cast<uint64_t>(id) : 0;
  }
  void abort_capture() noexcept override {
    // capturing() says Active only; an invalidated capture must be ended too
    // (cudaStreamIsCapturing: "must be terminated with cudaStreamEndCapture").
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s_, &st) != cudaSuccess) cudaGetLastError();
    if (st == cudaStreamCaptureStatusNone) return;
    cudaGraph_t graph = nullptr;
    std::lock_guard<std::mutex> lock(cudnn_handle_mutex());  // as end_capture
    if (cudaStreamEndCapture(s_, &graph) != cudaSuccess) cudaGetLastError();
    --captures_under_way;
    if (graph) cudaGraphDestroy(graph);
  }

 private:
  static void CUDART_CB trampoline(void* p) {
    std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
    try {
      (*f)();
    } catch (...) {
      // A host function cannot report an error to the stream; the tasks the
      // runtime enqueues this way do not throw.
    }
  }

  int index_;
  int priority_ = 0;
  bool owned_;
  std::shared_ptr<GreenContext> green_;
  cudaStream_t s_ = nullptr;
};

cudaStream_t native(Stream& s) { return reinterpret_cast<cudaStream_t>(s.handle()); }

// Device memory. Stream-ordered blocks (outputs) come from a pool of our own
// that keeps freed memory (no release threshold: after the first run at a
// shape, allocations never reach the driver) without touching the device's
// default pool, which other libraries in the process use. Arenas and weights
// are plain cudaMalloc. When the device is full, what our pool keeps is given
// back and the allocation tried once more.
class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int index) : index_(index) {
    DeviceGuard g(index);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = index;
    check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  }
  void* allocate(size_t bytes) override {
    DeviceGuard g(index_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      trim();
      e = cudaMalloc(&p, bytes ? bytes : 1);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw_oom(index_, bytes);
    }
    check(e, "cudaMalloc");
    return p;
  }
  void deallocate(void* p, size_t) override {
    DeviceGuard g(index_);
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();  // cleared: the next launch check would report it
  }
  void* allocate_async(size_t bytes, Stream& s) override {
    DeviceGuard g(index_);
    // Relaxed, as torch's allocator does: a stream-ordered allocation on a
    // stream that is not capturing neither fails in nor breaks a capture
    // torch has under way on another thread in global mode; on our own
    // capturing stream it is a graph allocation node either way.
    RelaxedCaptureScope relaxed;
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, pool_, native(s));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      trim(&s);
      e = cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, pool_, native(s));
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw_oom(index_, bytes);
    }
    check(e, "cudaMallocFromPoolAsync");
    return p;
  }
  void deallocate_async(void* p, size_t, Stream& s) override {
    DeviceGuard g(index_);
    RelaxedCaptureScope relaxed;
    if (cudaFreeAsync(p, native(s)) != cudaSuccess) cudaGetLastError();
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  // Gives back what the pool keeps once pending frees have happened: all of
  // them (a device-wide wait) when no capture of ours is under way, else
  // those on the allocating stream (a device sync would invalidate the
  // capture, in any capture mode).
  void trim(Stream* s = nullptr) {
    if (captures_under_way.load() == 0)
      cudaDeviceSynchronize();
    else if (s && !s->capturing())
      cudaStreamSynchronize(native(*s));
    cudaMemPoolTrimTo(pool_, 0);
    cudaGetLastError();
  }
  int index_;
  cudaMemPool_t pool_ = nullptr;  // never destroyed: blocks may outlive static destruction
};

class PinnedAllocator final : public Allocator {
 public:
  explicit PinnedAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    DeviceGuard g(index_);
    void* p = nullptr;
    RelaxedCaptureScope relaxed;  // not a device-wide sync: allowed beside another thread's capture
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(ErrorKind::kOutOfMemory, "out of page-locked host memory allocating " + std::to_string(bytes) +
                                               " bytes");
    }
    check(e, "cudaHostAlloc");
    return p;
  }
  void deallocate(void* p, size_t) override {
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  }
  Device device() const override { return Device::cpu(); }

 private:
  int index_;
};

class CudaDevice final : public DeviceApi {
 public:
  explicit CudaDevice(int index) : index_(index), alloc_(index), pinned_(index) {
    DeviceGuard g(index);
    check(cudaDeviceGetStreamPriorityRange(&least_, &greatest_), "cudaDeviceGetStreamPriorityRange");
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, index) == cudaSuccess) name_ = p.name;
    cudaGetLastError();
  }
  Device device() const override { return Device::cuda(index_); }
  std::string name() const override { return name_; }
  Allocator& allocator() override { return alloc_; }
  Allocator& pinned_allocator() override { return pinned_; }
  std::shared_ptr<Stream> create_stream(int priority) override {
    priority = std::min(std::max(priority, greatest_), least_);
    return remember(std::make_shared<CudaStream>(index_, priority));
  }
  std::shared_ptr<Stream> create_partitioned_stream(int priority, double sm_share) override {
    priority = std::min(std::max(priority, greatest_), least_);
    DeviceGuard g(index_);
    return remember(std::make_shared<CudaStream>(index_, priority, GreenContext::create(index_, sm_share)));
  }
  std::shared_ptr<Stream> create_stream_like(const Stream& s, int priority) override {
    const auto* cs = dynamic_cast<const CudaStream*>(&s);
    if (!cs || !cs->green()) return create_stream(priority);
    priority = std::min(std::max(priority, greatest_), least_);
    return remember(std::make_shared<CudaStream>(index_, priority, cs->green()));
  }
  int sm_count() const override { return device_sm_count(index_); }
  void start_kernel_trace() override {
    DeviceGuard g(index_);
    cuda::start_kernel_trace();
  }
  std::vector<KernelSpan> stop_kernel_trace() override { return cuda::stop_kernel_trace(); }
  uint64_t trace_clock_ns() override { return cuda::trace_clock_ns(); }
  uint64_t trace_stream_key(Stream& s) override {
    DeviceGuard g(index_);
    return cuda::trace_stream_key(reinterpret_cast<cudaStream_t>(s.handle()));
  }
  int compute_capability() const override {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index_) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index_) != cudaSuccess)
      cudaGetLastError();
    return major * 10 + minor;
  }
  // A stream of ours comes back as itself, so a holder (a DLPack export
  // waiting to record its consumer's last use) keeps it alive: a wrapper
  // recorded on after its context destroyed the stream crashed the driver
  // in cuEventRecord (H100, driver 580). Any other handle is borrowed.
  std::shared_ptr<Stream> borrow_stream(uintptr_t handle) override {
    {
      std::lock_guard<std::mutex> lock(streams_mutex_);
      for (const auto& [h, weak] : streams_)
        if (h == handle)
          if (auto s = weak.lock()) return s;
    }
    return std::make_shared<CudaStream>(index_, handle);
  }
  std::shared_ptr<Event> create_event() override { return std::make_shared<CudaEvent>(index_, false); }
  std::shared_ptr<Event> create_timing_event() override { return std::make_shared<CudaEvent>(index_, true); }
  double elapsed_ms(Event& start, Event& end) override {
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, native(start), native(end)), "cudaEventElapsedTime");
    return ms;
  }
  std::pair<int, int> priority_range() const override { return {least_, greatest_}; }
  MemorySpace space_of(const void* p) const override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return MemorySpace::kHost;
    }
    switch (a.type) {
      case cudaMemoryTypeDevice:
      case cudaMemoryTypeManaged: return MemorySpace::kDevice;
      case cudaMemoryTypeHost: return MemorySpace::kPinned;
      default: return MemorySpace::kHost;
    }
  }
  void host_access(const MemoryRange&, bool, const char*) override {}
  bool kernels_run_on_host() const override { return false; }
  std::shared_ptr<void> make_current() override { return std::make_shared<DeviceGuard>(index_); }
  std::shared_ptr<void> relax_capture() override { return std::make_shared<RelaxedCaptureScope>(); }
  bool captures_under_way() const override { return cuda::captures_under_way.load() > 0; }
  std::shared_ptr<void> create_kernel_error_flag() override { return cuda::create_kernel_error_flag(index_); }
  void check_kernel_errors(void* flag) override { cuda::check_kernel_errors(index_, flag); }
  void synchronize() override {
    DeviceGuard g(index_);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  // The streams this device made, by handle (expired ones dropped as new ones come).
  std::shared_ptr<Stream> remember(std::shared_ptr<CudaStream> s) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    streams_.erase(std::remove_if(streams_.begin(), streams_.end(), [](const auto& e) { return e.second.expired(); }),
                   streams_.end());
    streams_.emplace_back(s->handle(), s);
    return s;
  }
  std::mutex streams_mutex_;
  std::vector<std::pair<uintptr_t, std::weak_ptr<CudaStream>>> streams_;

  int index_;
  int least_ = 0, greatest_ = 0;
  std::string name_;
  DeviceAllocator alloc_;
  PinnedAllocator pinned_;
};

DeviceApi& cuda_device(int index) {
  static std::mutex m;
  static std::vector<CudaDevice*> devices;  // never destroyed: blocks may outlive static destruction
  std::lock_guard<std::mutex> lock(m);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (index < 0 || index >= count)
    throw Error(ErrorKind::kDevice,
                "no CUDA device cuda:" + std::to_string(index) + " (" + std::to_string(count) + " visible)");
  if (devices.size() < static_cast<size_t>(count)) devices.resize(count, nullptr);
  if (!devices[index]) devices[index] = new CudaDevice(index);
  return *devices[index];
}

struct Registrar {
  Registrar() { register_device_api(DeviceType::kCUDA, cuda_device); }
} registrar;

}  // namespace

}  // namespace twinfer::cuda
