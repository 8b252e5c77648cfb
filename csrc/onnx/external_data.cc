// External tensor data (data_location = EXTERNAL): files next to the model,
// read once each (onnx/file_snapshot.h) and borrowed from. A model file is untrusted input, so a
// location may not leave the model's folder: no absolute paths, no '..', and
// no symlink whose target lies outside (checked on the resolved real path).
#include <climits>
#include <cstdlib>
#include <memory>

#include "onnx/parse.h"

namespace twinfer::onnx::detail {

namespace {

// realpath(3) into a string; empty when the path does not resolve.
std::string real_path(const std::string& p) {
  std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
  return r ? std::string(r.get()) : std::string();
}

bool has_dotdot_component(const std::string& loc) {
  size_t start = 0;
  while (start <= loc.size()) {
    size_t end = loc.find_first_of("/\\", start);
    if (end == std::string::npos) end = loc.size();
    if (loc.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

wire::Span external_bytes(ParseContext& ctx, const ExternalRef& ref, const std::string& tensor,
                          size_t expected_bytes, std::shared_ptr<void>* owner) {
  const std::string& loc = ref.location;
  const std::string what = "tensor '" + tensor + "': ";
  if (ctx.base_dir.empty())
    throw Error(ErrorKind::kModelFormat,
                what + "data is in the external file '" + loc +
                    "', but the model was given as bytes without base_dir (the folder holding that file)");
  auto escape = [&] {
    return Error(ErrorKind::kModelFormat, what + "external data location '" + loc + "' escapes the model's folder");
  };
  if (loc.empty()) throw Error(ErrorKind::kModelFormat, what + "external data location is empty");
  if (loc.find('\0') != std::string::npos) throw escape();
  const bool absolute = loc[0] == '/' || loc[0] == '\\' || (loc.size() > 1 && loc[1] == ':');
  if (absolute || has_dotdot_component(loc)) throw escape();

  if (ctx.base_real.empty()) {
    ctx.base_real = real_path(ctx.base_dir);
    if (ctx.base_real.empty())
      throw Error(ErrorKind::kInvalidArgument, "model folder '" + ctx.base_dir + "' does not exist");
  }
  const std::string real = real_path(ctx.base_dir + "/" + loc);
  if (real.empty())
    throw Error(ErrorKind::kModelFormat,
                what + "external data file '" + loc + "' not found in '" + ctx.base_dir + "'");
  // A symlink inside the folder may still point outside it: compare real paths.
  const std::string prefix = ctx.base_real == "/" ? "/" : ctx.base_real + "/";
  if (real.compare(0, prefix.size(), prefix) != 0) throw escape();

  auto& file = ctx.external_files[real];
  if (!file) file = FileSnapshot::open(real, ErrorKind::kModelFormat);

  const uint64_t size = file->size();
  const uint64_t offset = static_cast<uint64_t>(ref.offset);
  if (ref.length >= 0 && static_cast<uint64_t>(ref.length) != expected_bytes)
    throw Error(ErrorKind::kModelFormat, what + "external data length " + std::to_string(ref.length) +
                                             " does not match its dims (" + std::to_string(expected_bytes) +
                                             " bytes)");
  if (offset > size || expected_bytes > size - offset)
    throw Error(ErrorKind::kModelFormat, what + "external data [" + std::to_string(offset) + ", " +
                                             std::to_string(offset + expected_bytes) + ") lies beyond the end of '" +
                                             loc + "' (" + std::to_string(size) + " bytes)");
  *owner = file;
  return wire::Span{file->data() + offset, expected_bytes};
}

}  // namespace twinfer::onnx::detail
