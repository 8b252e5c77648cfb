// A read-only memory map of a whole file (POSIX mmap). Held by shared_ptr so
// that Tensors borrowing weights out of it (Tensor::borrow's keep_alive)
// keep the mapping alive after the reader is done.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"

namespace twinfer::onnx {

class MappedFile {
 public:
  // Maps `path`; a missing or unreadable file throws Error(kind) naming it.
  static std::shared_ptr<MappedFile> open(const std::string& path,
                                          ErrorKind kind = ErrorKind::kInvalidArgument);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;  // null for an empty file (nothing to map)
  size_t size_ = 0;
  std::string path_;
};

}  // namespace twinfer::onnx
