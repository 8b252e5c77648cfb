// What the CUDA kernels that size their own output (nms.cu, nonzero.cu) do
// between counting and writing: each part's count (a class's kept boxes, a
// block's nonzeros) on the host, and where each part's rows start uploaded
// for the kernel that writes them.
#pragma once
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/tensor.h"
#include "ops/kernel.h"

namespace twinfer::cuda {

// These kernels run only alone, their count read back (runtime/staged_tail.h):
// a plan that knows the count (an input it could not fold) keeps the CPU's.
inline bool runs_only_alone(const KernelBuildInfo& info, const char* op, std::string* why) {
  if (info.has_output(0) && info.output(0).has_shape && sym_shape_known(info.output(0).shape)) {
    if (why) *why = std::string("a ") + op + " whose count the plan knows runs on the CPU";
    return false;
  }
  return true;
}

struct PartOffsets {
  std::vector<int64_t> starts;  // per part, the running sum of the counts before it
  int64_t total = 0;
};

inline PartOffsets part_offsets(const int32_t* counts, int64_t parts) {
  PartOffsets o;
  o.starts.resize(static_cast<size_t>(parts));
  for (int64_t p = 0; p < parts; ++p) {
    o.starts[static_cast<size_t>(p)] = o.total;
    o.total += counts[p];
  }
  return o;
}

// run_dynamic of a kernel in two halves (Kernel::count / finish): the
// counts into scratch on the stream, read back (the one wait), then the rest.
inline std::vector<Tensor> run_both_halves(const Kernel& k, KernelContext& ctx, const std::string& what) {
  const int64_t slots = k.count_slots();
  Tensor counts = Tensor::empty_on(DType::kInt32, {slots}, ctx.stream->device(), ctx.stream_ref);
  const std::shared_ptr<void> state = k.count(ctx, counts.data_as<int32_t>());
  std::vector<int32_t> host(static_cast<size_t>(slots));
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(ctx.stream->handle());
  check(cudaMemcpyAsync(host.data(), counts.data(), slots * sizeof(int32_t), cudaMemcpyDeviceToHost, s),
        ("cudaMemcpyAsync (" + what + " counts)").c_str());
  check(cudaStreamSynchronize(s), ("cudaStreamSynchronize (" + what + " counts)").c_str());
  return k.finish(ctx, host.data(), state);
}

// The starts as an int64 device tensor ordered with `stream` (from pageable
// memory: the copy has read `o` when this returns).
inline Tensor upload_part_starts(const PartOffsets& o, Device dev, const std::shared_ptr<Stream>& stream,
                                 cudaStream_t s, const std::string& what) {
  Tensor t = Tensor::empty_on(DType::kInt64, {static_cast<int64_t>(o.starts.size())}, dev, stream);
  check(cudaMemcpyAsync(t.data(), o.starts.data(), o.starts.size() * sizeof(int64_t), cudaMemcpyHostToDevice, s),
        ("cudaMemcpyAsync (" + what + " offsets)").c_str());
  return t;
}

}  // namespace twinfer::cuda
