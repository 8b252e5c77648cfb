// libFuzzer target: saved-engine bytes -> the engine file reader
// (runtime/engine_file.cc), which checks the structure the engine relies on
// (ids in range, constants inside the file and matching their values,
// acyclic graphs). A twinfer::Error is the expected answer to bad bytes;
// anything else is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <sanitizer/asan_interface.h>

#include "core/error.h"
#include "fuzz/touch.h"
#include "runtime/engine_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace twinfer;
  // 64-byte aligned, as a mapped file is; the padding after `size` is
  // poisoned so AddressSanitizer reports a read one byte past the end.
  const size_t padded = (size + 63) / 64 * 64 + 64;
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(64, padded));
  if (size) std::memcpy(raw, data, size);
  ASAN_POISON_MEMORY_REGION(raw + size, padded - size);
  std::shared_ptr<uint8_t> bytes(raw, [padded](uint8_t* p) {
    ASAN_UNPOISON_MEMORY_REGION(p, padded);
    std::free(p);
  });
  try {
    SavedEngineInfo info;
    // The checksum off: mutated bytes would stop there, short of the parser.
    graph::Model m = read_engine_bytes(bytes.get(), size, bytes, "fuzz input", &info, false);
    volatile uint64_t sink = fuzz::touch_graph(m.graph);
    (void)sink;
  } catch (const Error&) {
  }
  return 0;
}
