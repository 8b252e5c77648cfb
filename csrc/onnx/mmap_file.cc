#include "onnx/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace twinfer::onnx {

namespace {

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, ErrorKind kind) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw Error(kind, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) throw Error(kind, "cannot stat '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(kind, "'" + path + "' is not a regular file");
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ == 0) return m;  // mmap of zero bytes is an error; an empty span is not
  // PROT_READ: weights are shared, immutable data; passes build new tensors
  // instead of writing into constants. MAP_PRIVATE: a file changed on disk
  // later cannot be written through by us.
  void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (p == MAP_FAILED)
    throw Error(ErrorKind::kOutOfMemory, "cannot map '" + path + "': " + std::strerror(errno));
  m->data_ = static_cast<const uint8_t*>(p);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace twinfer::onnx
