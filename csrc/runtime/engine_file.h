// Saved engines: the optimised graph an Engine holds after the load-time
// passes (folding, fusion, int8 rewrites), written so that loading it runs
// none of them again. Kernel choice, weight packing and memory plans are
// not saved: they depend on the CPU the engine runs on and are made per
// input shape, as for an engine loaded from ONNX.
//
// File layout (little-endian):
//   magic "TWINFER-ENGINE\0\0" (16 bytes), u32 format version, u32 checksum
//   of every byte after the header (a bit flipped anywhere, in a weight as
//   well, is a ModelFormatError, not a model that computes something else),
//   u64 meta bytes, then the meta section (graph, opsets, options, pass log,
//   user metadata), then, 64-byte aligned, every constant's bytes (each
//   64-byte aligned), which a loaded engine borrows from the file's bytes
//   (read once, onnx/file_snapshot.h) instead of copying each.
// Every read is bounds-checked: a truncated or corrupt file is a
// ModelFormatError naming the file, never a crash.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "graph/ir.h"

namespace twinfer {

// 2: the checksum; 3: inputs' defaults and the folded overridable
// initializers after the graph. Other formats are refused (saved engines are
// a cache of the ONNX model's load: save a new one).
inline constexpr uint32_t kEngineFileVersion = 3;

// What a saved engine holds besides the graph.
struct SavedEngineInfo {
  Precision precision = Precision::kFP32;
  bool optimize = true;
  std::vector<std::string> pass_log;
  size_t nodes_in_model = 0;
  std::map<std::string, std::string> metadata;  // for the caller (the Python layer: calibration, version)
  // Engine::input_defaults(), and the names, dtypes and shapes of
  // Engine::folded_overridable().
  std::vector<std::pair<std::string, Tensor>> input_defaults;
  std::vector<std::tuple<std::string, DType, Shape>> folded_overridable;
};

// Writes `model` (its graph already optimised) and `info` to `path`
// (through a temporary file renamed into place). Throws kInvalidArgument when
// a constant cannot be saved (strings, sequences) and kRuntime on I/O errors.
void write_engine_file(const std::string& path, const graph::Model& model, const SavedEngineInfo& info);

// True when the file at `path` starts with the engine file magic.
bool is_engine_file(const std::string& path);

// Reads a saved engine: the model (constants borrowed from the file's bytes) and its info.
graph::Model read_engine_file(const std::string& path, SavedEngineInfo* info);

// The same from bytes someone else owns (64-byte aligned, as a mapping is);
// constants borrow from them and `keep_alive` holds their owner. `name` names
// the engine in errors. The fuzz target (fuzz/engine_file_fuzzer.cc) enters
// here with `verify_checksum` false, so mutated bytes reach the parser.
graph::Model read_engine_bytes(const uint8_t* data, size_t size, std::shared_ptr<void> keep_alive,
                               const std::string& name, SavedEngineInfo* info, bool verify_checksum = true);

}  // namespace twinfer
