#include "onnx/file_snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace twinfer::onnx {

namespace {

// Closes the descriptor on every path out of open().
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The bytes read through the descriptor are the file's as it was if its
// size and modification time held. Not its ctime: another writer's atomic
// replace (a temporary file renamed over the path, as Engine.save does)
// unlinks the inode being read, which changes its ctime and link count but
// not one byte of it; every load overlapping such a save failed.
bool same_file_state(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

Error changed(const std::string& path) {
  return Error(ErrorKind::kModelFormat, "'" + path +
                                            "' changed while twinfer was reading it (is it still being "
                                            "written?): load it again once it is complete");
}

}  // namespace

std::shared_ptr<FileSnapshot> FileSnapshot::open(const std::string& path, ErrorKind kind) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw Error(kind, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat before;
  if (::fstat(f.fd, &before) != 0) throw Error(kind, "cannot stat '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(before.st_mode)) throw Error(kind, "'" + path + "' is not a regular file");
  std::shared_ptr<FileSnapshot> s(new FileSnapshot());
  s->path_ = path;
  s->size_ = static_cast<size_t>(before.st_size);
  if (s->size_ == 0) return s;  // nothing to read; an empty span is fine
  // Anonymous pages: page-aligned, and given back to the system whole when
  // the last tensor borrowing from them goes.
  void* p = ::mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(ErrorKind::kOutOfMemory, "cannot allocate " + std::to_string(s->size_) + " bytes to read '" + path +
                                             "': " + std::strerror(errno));
  s->data_ = static_cast<uint8_t*>(p);
  size_t done = 0;
  while (done < s->size_) {
    const ssize_t n = ::pread(f.fd, s->data_ + done, s->size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(kind, "cannot read '" + path + "': " + std::strerror(errno));
    if (n == 0) throw changed(path);  // it ended early: truncated meanwhile
    done += static_cast<size_t>(n);
  }
  struct stat after;
  if (::fstat(f.fd, &after) != 0 || !same_file_state(before, after)) throw changed(path);
  // Weights are immutable from here on: a stray write faults instead of
  // changing a shared engine.
  ::mprotect(s->data_, s->size_, PROT_READ);
  return s;
}

FileSnapshot::~FileSnapshot() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace twinfer::onnx
