#include "backends/cuda/libraries.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <vector>

#include "core/device_info.h"

namespace twinfer::cuda {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::string> paths;  // set by Python
  std::map<std::string, Library> opened;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: handles are never dlclosed
  return *r;
}

// The soname the wheels ship, tried when Python found no path (a system install).
const char* default_soname(const std::string& name) {
  if (name == "cublasLt") return "libcublasLt.so.13";
  if (name == "cudnn") return "libcudnn.so.9";
  if (name == "cupti") return "libcupti.so.13";
  if (name == "cudart") return "libcudart.so.13";
  return nullptr;
}

}  // namespace

const Library& library(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.opened.find(name);
  if (it != r.opened.end()) return it->second;
  Library lib;
  auto p = r.paths.find(name);
  lib.path = p != r.paths.end() ? p->second : (default_soname(name) ? default_soname(name) : "");
  if (lib.path.empty()) {
    lib.why = "unknown library '" + name + "'";
  } else {
    // RTLD_LOCAL: our symbols never collide with a torch or CuPy that loaded
    // another build of the same library.
    lib.handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
      const char* err = dlerror();
      lib.why = std::string("cannot open ") + lib.path + ": " + (err ? err : "unknown error") +
                " (pip install 'twinfer[cuda]' brings NVIDIA's wheels)";
    }
  }
  return r.opened.emplace(name, std::move(lib)).first->second;
}

void* library_symbol(const std::string& name, const char* symbol) {
  const Library& lib = library(name);
  return lib.handle ? dlsym(lib.handle, symbol) : nullptr;
}

std::mutex& cudnn_handle_mutex() {
  static std::mutex* m = new std::mutex();  // never destroyed: kernels may outlive static destruction
  return *m;
}

}  // namespace twinfer::cuda

namespace twinfer {

void set_cuda_library_path(const std::string& name, const std::string& path) {
  auto& r = cuda::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.opened.count(name)) r.paths[name] = path;  // a library once opened stays
}

std::string cuda_library_version(const std::string& name, std::string* why) {
  // Both libraries answer their version without a GPU or driver.
  using VersionFn = size_t (*)();
  const char* symbol = name == "cublasLt" ? "cublasLtGetVersion" : name == "cudnn" ? "cudnnGetVersion" : nullptr;
  const cuda::Library& lib = cuda::library(name);
  if (!lib.handle || !symbol) {
    if (why) *why = lib.why;
    return "";
  }
  auto fn = reinterpret_cast<VersionFn>(cuda::library_symbol(name, symbol));
  if (!fn) {
    if (why) *why = std::string(symbol) + " not found in " + lib.path;
    return "";
  }
  const size_t v = fn();
  // cuBLASLt: major*10000 + minor*100 + patch; cuDNN 9: major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

namespace {
std::vector<void (*)()>& symbol_checks() {
  static auto* v = new std::vector<void (*)()>();
  return *v;
}
}  // namespace

void register_cuda_symbol_check(void (*resolve_all)()) { symbol_checks().push_back(resolve_all); }

std::vector<std::string> cuda_symbol_problems() {
  std::vector<std::string> r;
  for (auto check : symbol_checks()) {
    try {
      check();
    } catch (const std::exception& e) {
      r.push_back(e.what());
    }
  }
  return r;
}

}  // namespace twinfer
