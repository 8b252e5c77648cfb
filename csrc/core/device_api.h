// The device layer: what the runtime needs from a GPU, as a small interface
// with two implementations — CUDA (backends/cuda/cuda_device.cc, a thin
// wrapper over the runtime API) and the simulated device (backends/sim/), a
// CPU stand-in that CI runs. No CUDA header is included here: the runtime is
// written against this interface only, so everything around the kernels
// (copies, stream order, events, graph capture and replay, staging) runs and
// is tested on machines without a GPU.
//
// The model is CUDA's: memory in spaces (host, page-locked host, device),
// streams that run enqueued work in order, events that order one stream
// after another (or the host after a stream), and capture of a stream's work
// into a graph that is replayed as a unit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/kernel_trace.h"

namespace twinfer {

enum class MemorySpace : uint8_t {
  kHost,    // ordinary (pageable) host memory
  kPinned,  // page-locked host memory: asynchronous copies to and from the device
  kDevice,  // device memory: only device kernels and copies touch it
};
const char* memory_space_name(MemorySpace s);

struct MemoryRange {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

// The memory an enqueued task reads and writes. The simulated device checks
// every access against the order streams, events and the host have
// established (a race is an error there); CUDA ignores these.
struct Accesses {
  std::vector<MemoryRange> reads, writes;
};

class Stream;

// A point in one stream's work. Recording it on a stream marks "everything
// enqueued so far"; other streams wait for that point, or the host does.
//
// Capture splits events in two (CUDA's rules, which the simulated device
// enforces): one last recorded inside a capture is an edge of that graph
// only — nothing outside may wait on, query or synchronise with it — and a
// capturing stream may wait only on events recorded in the same capture.
class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // the host blocks until the recorded point is reached
  virtual bool ready() = 0;        // reached (true for an event never recorded)
  // Last recorded on a stream that was being captured.
  virtual bool captured() const = 0;
  // Which capture that was (0: none): a capturing stream may wait only on
  // events of its own capture, never on one of a capture that has ended.
  virtual uint64_t capture_sequence() const = 0;
  // Created with create_timing_event: DeviceApi::elapsed_ms can time it.
  virtual bool timed() const = 0;
};

// Makes `s` wait for `e` where the capture rules allow a wait: both outside
// any capture, or both in the same one. Across a capture's boundary the
// order comes from the caller instead (work before a capture is
// synchronised before it begins; a graph's launches are ordered on the
// stream that launches them; an earlier capture's work is its graph's).
void wait_across_capture(Stream& s, Event& e);
// The host waits for `e`, unless it was recorded in a capture (the graph's
// launches, not the event, say when such a value is written).
void host_wait(Event& e);

// A stream's captured work, replayed as a unit on any stream of the device.
class GraphExec {
 public:
  virtual ~GraphExec() = default;
  virtual void launch(Stream& s) = 0;
  virtual size_t num_nodes() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // cudaStream_t as an integer on CUDA (what torch's Stream.cuda_stream and
  // DLPack's stream argument carry); a stream id on the simulated device.
  virtual uintptr_t handle() const = 0;
  virtual int priority() const = 0;
  // A caller's stream we only wrap (a framework's cudaStream_t): it may be
  // destroyed while we still hold its handle.
  virtual bool borrowed() const { return false; }
  // SMs the stream's kernels may use: 0 for the whole device, else the size
  // of its partition (create_partitioned_stream).
  virtual int sm_count() const { return 0; }
  // The context that owned this stream's SM share is gone: its groups go
  // back to the device for other shares now, though the stream lives on
  // while tensors still free their memory in its order (no kernel of ours
  // runs on it any more). A no-op for a stream with no share.
  virtual void release_sm_share() {}
  // Makes the stream's context current on the calling thread until the
  // guard goes (a green context's; null where streams need nothing).
  virtual std::shared_ptr<void> enter() { return nullptr; }

  // Asynchronous copy between any memory spaces of this device. Pageable host
  // memory behaves as CUDA's does: a copy from it returns once the source has
  // been read; a copy into it returns once the copy is done.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void memset(void* dst, int value, size_t bytes) = 0;
  // Runs fn on a host thread in stream order. The simulated device runs its
  // kernels (the CPU kernels) this way; `acc` is what fn touches.
  virtual void host_task(std::function<void()> fn, Accesses acc) = 0;

  virtual void record(Event& e) = 0;
  virtual void wait(Event& e) = 0;  // later work on this stream waits for e
  // The host blocks until all enqueued work is done. A task that failed on
  // the device (a kernel's error) is raised here, as CUDA raises it at the
  // next synchronisation; Event::synchronize raises it too.
  virtual void synchronize() = 0;

  // Capture: work enqueued by this thread between begin and end is recorded,
  // not run; end returns it as a replayable graph. Only this thread is
  // restricted meanwhile (no allocation, no synchronisation).
  virtual void begin_capture() = 0;
  virtual std::unique_ptr<GraphExec> end_capture() = 0;
  virtual bool capturing() const = 0;
  virtual uint64_t capture_sequence() const = 0;  // the capture under way (0: none)
  // Ends whatever capture this stream began, a live one or one the device
  // invalidated (CUDA: a failed or forbidden call inside it), and drops the
  // graph; never throws. Every error path of a capture calls it: a capture
  // left open keeps the stream, and the streams that joined it, unusable.
  virtual void abort_capture() noexcept {
    try {
      if (capturing()) end_capture();
    } catch (...) {
    }
  }
};

// One device (cuda:N or sim:N). Shared by every engine and context on it.
class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Device memory. allocate_async/deallocate_async order the block with a
  // stream (cudaMallocAsync pools; the simulated device frees in stream order).
  virtual Allocator& allocator() = 0;
  virtual Allocator& pinned_allocator() = 0;

  // A new non-blocking stream; `priority` is clamped into priority_range().
  virtual std::shared_ptr<Stream> create_stream(int priority = 0) = 0;
  // A stream whose kernels run on a share of the device's SMs (a CUDA green
  // context; the simulated device partitions an H100-like SM count the same
  // way). Throws kUnsupported where the device or driver cannot.
  virtual std::shared_ptr<Stream> create_partitioned_stream(int priority, double sm_share);
  // Another stream on the SMs `s` runs on (its green context, if any).
  virtual std::shared_ptr<Stream> create_stream_like(const Stream& s, int priority) { return create_stream(priority); }
  // SMs of the whole device (the simulated device reports an H100's 132).
  virtual int sm_count() const = 0;
  // major * 10 + minor (89 = Ada, 90 = Hopper); the simulated device is a 90.
  virtual int compute_capability() const = 0;
  // A caller's stream by handle (not owned: the caller keeps it alive).
  virtual std::shared_ptr<Stream> borrow_stream(uintptr_t handle) = 0;
  virtual std::shared_ptr<Event> create_event() = 0;
  // An event that can be timed (CUDA timing events cost more to record).
  virtual std::shared_ptr<Event> create_timing_event() = 0;
  // Milliseconds between two timing events, both recorded and reached (on
  // any streams of this device).
  virtual double elapsed_ms(Event& start, Event& end) = 0;
  // (least, greatest) priority; numerically lower is more urgent, as in CUDA.
  virtual std::pair<int, int> priority_range() const = 0;

  virtual MemorySpace space_of(const void* p) const = 0;
  // Host code is about to read (or write) [ptr, ptr + bytes): a host kernel's
  // operands, a copy into NumPy. The simulated device checks that the host
  // has waited for every device task that touched the range.
  virtual void host_access(const MemoryRange& r, bool write, const char* what) = 0;
  // True when the device's kernels are host functions run in stream order
  // (the simulated device); false when kernels enqueue device work (CUDA).
  virtual bool kernels_run_on_host() const = 0;
  virtual void synchronize() = 0;
  // Raises (and clears) an error a kernel reported through `flag`, a
  // context's (below; null: nothing to check) — an index out of range.
  // Called where the host has waited for that context's work. Kernels
  // cannot throw, and a device-side trap would end the whole CUDA context.
  virtual void check_kernel_errors(void* flag) { (void)flag; }
  // One flag per execution context, for its kernels (KernelContext::
  // backend_state) and its checks above: the run that caused an error raises
  // it. Null where kernels throw themselves (the simulated device's).
  virtual std::shared_ptr<void> create_kernel_error_flag() { return nullptr; }
  // Kernel tracing (core/kernel_trace.h): start collecting every kernel's
  // span on this device; stop returns them (finished work only: synchronise
  // first). start throws kDevice naming why where the device cannot (a
  // build or machine without CUPTI) or a trace is already running.
  virtual void start_kernel_trace();
  virtual std::vector<KernelSpan> stop_kernel_trace() { return {}; }
  // The trace clock now, in ns (spans' start_ns / end_ns are on it).
  virtual uint64_t trace_clock_ns() { return 0; }
  // What KernelSpan::stream holds for kernels enqueued on `s`.
  virtual uint64_t trace_stream_key(Stream& s) { return s.handle(); }
  // The simulated device's kernels are host tasks: the executor reports
  // each one it ran, named "node (op)" (a no-op elsewhere, and while no
  // trace runs).
  virtual void note_host_kernel(const std::string& node, const std::string& op, uint64_t start_ns, uint64_t end_ns) {}
  // Makes this the calling thread's current device until the returned guard
  // goes (CUDA keeps a current device per thread; null where there is none).
  virtual std::shared_ptr<void> make_current() { return nullptr; }  // the whole device, for tests and shutdown
  // Until the returned guard goes, the calling thread's API calls do not
  // break a graph capture another thread has under way (CUDA's relaxed
  // capture mode): for work that is never part of a graph, a plan's build on
  // whatever thread. Null where captures are not.
  virtual std::shared_ptr<void> relax_capture() { return nullptr; }
  // Whether a graph capture of twinfer's is under way on this device, on any
  // thread: a device-wide wait (cudaFree's) would invalidate it then.
  virtual bool captures_under_way() const { return false; }
};

// The device API of `d` (throws kDevice when the build or machine lacks it).
DeviceApi& device_api(Device d);
void register_device_api(DeviceType type, std::function<DeviceApi&(int index)> get);
bool has_device_api(DeviceType type);

}  // namespace twinfer
