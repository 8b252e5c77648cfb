// A private copy of a whole file's bytes, read once. Held by shared_ptr so
// that Tensors borrowing weights out of it (Tensor::borrow's keep_alive)
// keep it alive after the reader is done.
//
// Why not mmap: a mapping stays tied to the file. When the file is truncated
// while mapped (a model re-exported to the same path: open(path, "wb")),
// the next read of a lost page raises SIGBUS and kills the process; when it
// is rewritten in place, the engine silently runs on the new bytes at the
// old offsets. No flag of mmap prevents either (truncation discards even
// copied-on-write private pages). A copy is immune, and costs one read of
// the file (the kernel's page cache to our pages) and no second copy of the
// weights: they are still borrowed from these bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"

namespace twinfer::onnx {

class FileSnapshot {
 public:
  // Reads `path` whole. A missing or unreadable file throws Error(kind)
  // naming it; a file that changes while it is read (its size, times or
  // identity differ before and after, or it ends early) throws kModelFormat.
  static std::shared_ptr<FileSnapshot> open(const std::string& path,
                                            ErrorKind kind = ErrorKind::kInvalidArgument);
  ~FileSnapshot();
  FileSnapshot(const FileSnapshot&) = delete;
  FileSnapshot& operator=(const FileSnapshot&) = delete;

  // Page-aligned (every tensor alignment the readers need); null when empty.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  FileSnapshot() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace twinfer::onnx
