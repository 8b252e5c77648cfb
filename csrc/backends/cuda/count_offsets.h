// What the CUDA kernels that size their own output (nms.cu, nonzero.cu) do
// between counting and writing: each part's count (a class's kept boxes, a
// block's nonzeros) read back (the one wait), and where each part's rows
// start uploaded for the kernel that writes them.
#pragma once
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/tensor.h"

namespace twinfer::cuda {

struct PartOffsets {
  std::vector<int64_t> starts;  // per part, the running sum of the counts before it
  int64_t total = 0;
};

// `counts`: int32 [parts] on the device, written by work enqueued on `s`.
inline PartOffsets read_part_counts(const Tensor& counts, cudaStream_t s, const std::string& what) {
  const size_t parts = static_cast<size_t>(counts.numel());
  std::vector<int32_t> host(parts);
  check(cudaMemcpyAsync(host.data(), counts.data(), parts * sizeof(int32_t), cudaMemcpyDeviceToHost, s),
        ("cudaMemcpyAsync (" + what + " counts)").c_str());
  check(cudaStreamSynchronize(s), ("cudaStreamSynchronize (" + what + " counts)").c_str());
  PartOffsets o;
  o.starts.resize(parts);
  for (size_t p = 0; p < parts; ++p) {
    o.starts[p] = o.total;
    o.total += host[p];
  }
  return o;
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
