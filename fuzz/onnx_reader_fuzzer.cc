// libFuzzer target: ONNX bytes -> the ONNX reader (csrc/onnx) -> the IR steps
// that run on a model before any pass (implicit subgraph inputs, topological
// order). A twinfer::Error is the expected answer to bad bytes; anything else
// (a sanitizer report, another exception, a crash, a hang) is a finding.
//
// External data resolves inside a folder made at start-up holding one
// 4 KiB file, "weights.bin", and a symlink "escape" that points outside the
// folder, so mutated locations, offsets and lengths reach those checks too.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/touch.h"
#include "graph/subgraph.h"
#include "onnx/reader.h"

namespace {

std::string g_folder;

void make_folder() {
  char tmpl[] = "/tmp/twinfer-fuzz-XXXXXX";
  if (!::mkdtemp(tmpl)) std::abort();
  g_folder = tmpl;
  std::ofstream(g_folder + "/weights.bin", std::ios::binary) << std::string(4096, '\x3f');
  if (::symlink("/etc/passwd", (g_folder + "/escape").c_str()) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  make_folder();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace twinfer;
  // A copy the reader may borrow from, as it borrows from a mapped file.
  auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    graph::Model m = onnx::read_model_bytes(bytes->data(), bytes->size(), bytes, g_folder);
    volatile uint64_t sink = fuzz::touch_graph(m.graph);
    (void)sink;
    graph::capture_implicit_inputs(m.graph);
    m.graph.topo_sort();
  } catch (const Error&) {
    // the reader's answer to bad input
  }
  return 0;
}
