// ONNX ModelProto bytes -> graph::Model. Our own wire reader (onnx/wire.h);
// initializer data is borrowed from the file's bytes / caller's buffer when it
// is aligned for its element type, copied once otherwise.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "graph/ir.h"

namespace twinfer::onnx {

// Reads the file once (onnx/file_snapshot.h) and parses it; external data is resolved inside the model's folder.
graph::Model read_model_file(const std::string& path);

// Parses bytes someone else owns; `keep_alive` holds their owner while weights
// borrow from them. base_dir: the folder external data lives in ("" refuses
// models with external data).
graph::Model read_model_bytes(const void* data, size_t size, std::shared_ptr<void> keep_alive,
                              const std::string& base_dir);

}  // namespace twinfer::onnx
