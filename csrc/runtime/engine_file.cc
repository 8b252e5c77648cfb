#include "runtime/engine_file.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "onnx/file_snapshot.h"

namespace twinfer {

namespace {

constexpr char kMagic[16] = {'T', 'W', 'I', 'N', 'F', 'E', 'R', '-', 'E', 'N', 'G', 'I', 'N', 'E', 0, 0};
constexpr size_t kAlign = 64;

// A 64-bit state over 8-byte words, each step a bijection of the state for a
// given word and of the word for a given state: any one changed word changes
// the result (folded to 32 bits: a collision of 2^-32). 5.6 GB/s on the
// 2-core development VM (256 MB, g++ -O2, a copy of this class timed alone):
// a 400 MB engine's load spends about 0.07 s on it.
class Checksum {
 public:
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n && fill_) {  // finish a partial word first
      word_[fill_++] = *b++;
      --n;
      if (fill_ == 8) step_buffer();
    }
    for (; n >= 8; n -= 8, b += 8) {
      uint64_t w;
      std::memcpy(&w, b, 8);
      step(w);
    }
    while (n--) word_[fill_++] = *b++;
  }
  uint32_t value() {
    if (fill_) {
      std::memset(word_ + fill_, 0, 8 - fill_);
      step_buffer();
    }
    step(total_);
    return static_cast<uint32_t>(h_ ^ (h_ >> 32));
  }

 private:
  void step(uint64_t w) {
    h_ = (h_ ^ w) * 0x9E3779B97F4A7C15ull;
    h_ ^= h_ >> 29;
    total_ += 8;
  }
  void step_buffer() {
    uint64_t w;
    std::memcpy(&w, word_, 8);
    fill_ = 0;
    step(w);
  }
  uint64_t h_ = 0x243F6A8885A308D3ull, total_ = 0;
  uint8_t word_[8] = {};
  size_t fill_ = 0;
};
constexpr size_t kHeaderBytes = 16 + 4 + 4 + 8;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool valid_utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    const uint8_t c = s[i];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// ---- writing ----------------------------------------------------------------

class Writer {
 public:
  std::string meta;
  std::vector<const Tensor*> blobs;  // constants, in the order their offsets were handed out
  size_t data_bytes = 0;

  void u8(uint8_t v) { meta.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    meta.append(s);
  }
  void dtypes(const std::vector<DType>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (DType d : v) u8(static_cast<uint8_t>(d));
  }

  void tensor(const Tensor& t, const std::string& what) {
    u8(t.defined());
    if (!t.defined()) return;
    const DType d = t.dtype();
    if (d == DType::kString || dtype_is_container(d))
      throw Error(ErrorKind::kInvalidArgument,
                  "cannot save this engine: " + what + " holds " + dtype_name(d) + " values, which engine files do not store");
    if (t.device().type != DeviceType::kCPU)
      throw Error(ErrorKind::kInvalidArgument, "cannot save this engine: " + what + " is not in host memory");
    u8(static_cast<uint8_t>(d));
    i64(static_cast<int64_t>(t.shape().size()));
    for (int64_t s : t.shape()) i64(s);
    data_bytes = align_up(data_bytes);
    i64(static_cast<int64_t>(data_bytes));
    data_bytes += t.bytes();
    blobs.push_back(&t);
  }

  void graph(const graph::Graph& g) {
    str(g.name);
    i64(static_cast<int64_t>(g.values.size()));
    for (const auto& v : g.values) {
      str(v.name);
      u8(static_cast<uint8_t>(v.dtype));
      dtypes(v.elem_type);
      u8(v.has_shape);
      i64(static_cast<int64_t>(v.shape.size()));
      for (const Dim& d : v.shape) {
        i64(d.value);
        str(d.symbol);
      }
      i64(v.producer);
      tensor(v.constant, "value '" + v.name + "'");
    }
    i64(static_cast<int64_t>(g.nodes.size()));
    for (const auto& n : g.nodes) {
      str(n.name);
      str(n.op_type);
      str(n.domain);
      ints(n.inputs);
      ints(n.outputs);
      i64(static_cast<int64_t>(n.attrs.size()));
      for (const auto& [name, a] : n.attrs) {
        str(name);
        attribute(a, "attribute '" + name + "' of node '" + n.name + "'");
      }
    }
    ints(g.inputs);
    ints(g.outputs);
  }

 private:
  void raw(const void* p, size_t n) { meta.append(static_cast<const char*>(p), n); }
  void ints(const std::vector<int>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (int x : v) i64(x);
  }
  void attribute(const graph::Attribute& a, const std::string& what) {
    u8(static_cast<uint8_t>(a.type));
    f32(a.f);
    i64(a.i);
    str(a.s);
    tensor(a.t, what);
    u8(a.g != nullptr);
    if (a.g) graph(*a.g);
    i64(static_cast<int64_t>(a.floats.size()));
    for (float f : a.floats) f32(f);
    i64(static_cast<int64_t>(a.ints.size()));
    for (int64_t v : a.ints) i64(v);
    i64(static_cast<int64_t>(a.strings.size()));
    for (const auto& s : a.strings) str(s);
    i64(static_cast<int64_t>(a.tensors.size()));
    for (const auto& t : a.tensors) tensor(t, what);
    i64(static_cast<int64_t>(a.graphs.size()));
    for (const auto& sg : a.graphs) graph(*sg);
    dtypes(a.type_proto);
  }
};

// ---- reading ----------------------------------------------------------------

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const uint8_t* data, size_t data_n, std::shared_ptr<void> keep,
         std::string path)
      : p_(p), end_(p + n), data_(data), data_n_(data_n), keep_(std::move(keep)), path_(std::move(path)) {}

  [[noreturn]] void corrupt(const std::string& why) const {
    throw Error(ErrorKind::kModelFormat, "saved engine '" + path_ + "' is corrupt or truncated: " + why);
  }
  bool at_end() const { return p_ == end_; }

  uint8_t u8() { return *take(1); }
  uint32_t u32() { return scalar<uint32_t>(); }
  int64_t i64() { return scalar<int64_t>(); }
  float f32() { return scalar<float>(); }
  // A count of items each at least `min_item_bytes` long: bounded by what is left.
  size_t count(size_t min_item_bytes = 1) {
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > static_cast<uint64_t>(end_ - p_) / std::max<size_t>(1, min_item_bytes))
      corrupt("a count of " + std::to_string(n) + " does not fit the file");
    return static_cast<size_t>(n);
  }
  // Names reach Python as str: bytes that are not UTF-8 mean corruption.
  // Attribute strings are ONNX bytes and may hold anything (utf8 = false).
  std::string str(bool utf8 = true) {
    const size_t n = count();
    const uint8_t* s = take(n);
    if (utf8 && !valid_utf8(s, n)) corrupt("a name that is not UTF-8");
    return std::string(reinterpret_cast<const char*>(s), n);
  }
  DType dtype() {
    const uint8_t d = u8();
    if (d > static_cast<uint8_t>(DType::kMap)) corrupt("unknown element type " + std::to_string(d));
    return static_cast<DType>(d);
  }
  std::vector<DType> dtypes() {
    std::vector<DType> v(count());
    for (auto& d : v) d = dtype();
    return v;
  }
  // Value ids: -1 (an omitted optional input/output) only where `optional`.
  std::vector<int> ids(size_t limit, bool optional) {
    std::vector<int> v(count(8));
    for (auto& x : v) {
      const int64_t i = i64();
      if (i < (optional ? -1 : 0) || i >= static_cast<int64_t>(limit))
        corrupt("a value id " + std::to_string(i) + " out of range");
      x = static_cast<int>(i);
    }
    return v;
  }

  Tensor tensor() {
    if (!u8()) return Tensor();
    const DType d = dtype();
    if (d == DType::kString || dtype_is_container(d) || d == DType::kUndefined) corrupt("a constant of type " + std::string(dtype_name(d)));
    Shape shape(count(8));
    for (auto& s : shape) {
      s = i64();
      if (s < 0) corrupt("a negative dim");
    }
    const int64_t offset = i64();
    // numel and bytes without overflow: each step bounded by the data section.
    const uint64_t max_elems = data_n_ / dtype_size(d);
    uint64_t numel = 1;
    for (int64_t s : shape) {
      if (s == 0) {
        numel = 0;
        continue;
      }
      if (numel > max_elems / static_cast<uint64_t>(s)) corrupt("a constant larger than the file");
      numel *= static_cast<uint64_t>(s);
    }
    const uint64_t bytes = numel * dtype_size(d);
    if (offset < 0 || static_cast<uint64_t>(offset) % kAlign || static_cast<uint64_t>(offset) > data_n_ ||
        bytes > data_n_ - static_cast<uint64_t>(offset))
      corrupt("constant bytes outside the file");
    return Tensor::borrow(const_cast<uint8_t*>(data_ + offset), d, std::move(shape), Device::cpu(), keep_);
  }

  void graph(graph::Graph& g, int depth = 0) {
    if (depth > 64) corrupt("subgraphs nested too deep");
    g.name = str();
    g.values.resize(count(16));
    for (size_t i = 0; i < g.values.size(); ++i) {
      auto& v = g.values[i];
      v.name = str();
      v.dtype = dtype();
      v.elem_type = dtypes();
      v.has_shape = u8() != 0;
      v.shape.resize(count(16));
      for (auto& d : v.shape) {
        d.value = i64();
        d.symbol = str();
      }
      v.producer = static_cast<int>(i64());
      v.constant = tensor();
      if (!v.name.empty()) g.index_value(static_cast<int>(i));
    }
    const size_t nvalues = g.values.size();
    g.nodes.resize(count(24));
    for (auto& n : g.nodes) {
      n.name = str();
      n.op_type = str();
      n.domain = str();
      n.inputs = ids(nvalues, true);
      n.outputs = ids(nvalues, true);
      const size_t nattrs = count(8);
      for (size_t k = 0; k < nattrs; ++k) {
        std::string name = str();
        attribute(n.attrs[name], depth);
      }
    }
    for (auto& v : g.values)
      if (v.producer < -1 || v.producer >= static_cast<int>(g.nodes.size())) corrupt("a producer out of range");
    g.inputs = ids(nvalues, false);
    g.outputs = ids(nvalues, false);
  }

 private:
  template <typename T>
  T scalar() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) corrupt("the metadata ends early");
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  void attribute(graph::Attribute& a, int depth) {
    const uint8_t type = u8();
    if (type > static_cast<uint8_t>(graph::Attribute::Type::kTypeProto)) corrupt("an unknown attribute type");
    a.type = static_cast<graph::Attribute::Type>(type);
    a.f = f32();
    a.i = i64();
    a.s = str(false);
    a.t = tensor();
    if (u8()) {
      a.g = std::make_shared<graph::Graph>();
      graph(*a.g, depth + 1);
    }
    a.floats.resize(count(4));
    for (auto& f : a.floats) f = f32();
    a.ints.resize(count(8));
    for (auto& v : a.ints) v = i64();
    a.strings.resize(count(8));
    for (auto& s : a.strings) s = str(false);
    a.tensors.resize(count(1));
    for (auto& t : a.tensors) t = tensor();
    a.graphs.resize(count(1));
    for (auto& sg : a.graphs) {
      sg = std::make_shared<graph::Graph>();
      graph(*sg, depth + 1);
    }
    a.type_proto = dtypes();
  }

  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* data_;
  size_t data_n_;
  std::shared_ptr<void> keep_;
  std::string path_;
};

// What the engine relies on without checking again: constants whose value
// type and shape are the tensor's own, producers that match the nodes, no
// cycle (topo_sort throws on one). Subgraphs too.
void check_consistent(graph::Graph& g, const Reader& r) {
  for (auto& v : g.values) {
    if (!v.constant.defined()) continue;
    if (v.dtype != v.constant.dtype() || (v.has_shape && v.shape != sym_shape_from(v.constant.shape())))
      r.corrupt("constant '" + v.name + "' does not match its declared type or shape");
  }
  for (const auto& n : g.nodes)
    for (const auto& [name, a] : n.attrs) {
      if (a.g) check_consistent(*a.g, r);
      for (const auto& sg : a.graphs) check_consistent(*sg, r);
    }
  try {
    g.topo_sort();  // re-derives every producer from the nodes
  } catch (const Error& e) {
    r.corrupt(e.what());
  }
}

// ": No such file or directory" for errno; empty for 0.
std::string os_reason(int err) { return err ? std::string(": ") + std::strerror(err) : std::string(); }

}  // namespace

void write_engine_file(const std::string& path, const graph::Model& model, const SavedEngineInfo& info) {
  Writer w;
  w.i64(model.ir_version);
  w.str(model.producer_name);
  w.i64(static_cast<int64_t>(model.opsets.size()));
  for (const auto& [domain, version] : model.opsets) {
    w.str(domain);
    w.i64(version);
  }
  w.str(precision_name(info.precision));
  w.u8(info.optimize);
  w.i64(static_cast<int64_t>(info.nodes_in_model));
  w.i64(static_cast<int64_t>(info.pass_log.size()));
  for (const auto& s : info.pass_log) w.str(s);
  w.i64(static_cast<int64_t>(info.metadata.size()));
  for (const auto& [k, v] : info.metadata) {
    w.str(k);
    w.str(v);
  }
  w.graph(model.graph);
  w.i64(static_cast<int64_t>(info.input_defaults.size()));
  for (const auto& [name, t] : info.input_defaults) {
    w.str(name);
    w.tensor(t, "the default of input '" + name + "'");
  }
  w.i64(static_cast<int64_t>(info.folded_overridable.size()));
  for (const auto& [name, dtype, shape] : info.folded_overridable) {
    w.str(name);
    w.u8(static_cast<uint8_t>(dtype));
    w.i64(static_cast<int64_t>(shape.size()));
    for (int64_t d : shape) w.i64(d);
  }

  static std::atomic<unsigned> serial{0};
  const std::string tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(serial++);
  {
    errno = 0;
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    // A path the caller cannot write (no such folder, no permission) is a bad argument.
    if (!f)
      throw Error(ErrorKind::kInvalidArgument, "cannot write the engine file '" + path + "'" + os_reason(errno));
    errno = 0;  // a failed write below reports its own reason, not an earlier call's
    const uint32_t version = kEngineFileVersion, unknown = 0;
    const uint64_t meta_bytes = w.meta.size();
    Checksum sum;
    const auto put = [&](const void* p, size_t n) {
      f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      sum.add(p, n);
    };
    f.write(kMagic, 16);
    f.write(reinterpret_cast<const char*>(&version), 4);
    f.write(reinterpret_cast<const char*>(&unknown), 4);  // the checksum, once the rest is written
    f.write(reinterpret_cast<const char*>(&meta_bytes), 8);
    put(w.meta.data(), w.meta.size());
    const size_t data_start = align_up(kHeaderBytes + w.meta.size());
    static const char zeros[kAlign] = {};
    put(zeros, data_start - kHeaderBytes - w.meta.size());
    size_t at = 0;
    for (const Tensor* t : w.blobs) {
      const size_t pad = align_up(at) - at;
      put(zeros, pad);
      at += pad;
      put(t->data(), t->bytes());
      at += t->bytes();
    }
    const uint32_t checksum = sum.value();
    f.seekp(20);
    f.write(reinterpret_cast<const char*>(&checksum), 4);
    if (!f) {
      const int err = errno;
      f.close();
      std::remove(tmp.c_str());
      throw Error(ErrorKind::kRuntime, "writing the engine file '" + path + "' failed" +
                                           (err ? os_reason(err) : std::string(" (disk full?)")));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error(ErrorKind::kInvalidArgument, "cannot move the engine file into place at '" + path + "'" + os_reason(err));
  }
}

bool is_engine_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[16] = {};
  return f.read(head, 16) && std::memcmp(head, kMagic, 16) == 0;
}

graph::Model read_engine_file(const std::string& path, SavedEngineInfo* info) {
  auto file = onnx::FileSnapshot::open(path, ErrorKind::kInvalidArgument);
  return read_engine_bytes(file->data(), file->size(), file, path, info);
}

graph::Model read_engine_bytes(const uint8_t* base, size_t size, std::shared_ptr<void> keep_alive,
                               const std::string& path, SavedEngineInfo* info, bool verify_checksum) {
  if (size < kHeaderBytes || std::memcmp(base, kMagic, 16) != 0)
    throw Error(ErrorKind::kModelFormat, "'" + path + "' is not a twinfer engine file");
  if (reinterpret_cast<uintptr_t>(base) % kAlign)
    throw Error(ErrorKind::kInvalidArgument, "saved engine '" + path + "': the bytes are not " +
                                                 std::to_string(kAlign) + "-byte aligned");
  uint32_t version = 0;
  uint64_t meta_bytes = 0;
  std::memcpy(&version, base + 16, 4);
  std::memcpy(&meta_bytes, base + 24, 8);
  if (version != kEngineFileVersion)
    throw Error(ErrorKind::kModelFormat, "'" + path + "' is a twinfer engine file of format " + std::to_string(version) +
                                             "; this twinfer reads format " + std::to_string(kEngineFileVersion) +
                                             ": load the ONNX model again and save a new engine");
  if (meta_bytes > size - kHeaderBytes)
    throw Error(ErrorKind::kModelFormat, "saved engine '" + path + "' is corrupt or truncated: the metadata ends early");
  if (verify_checksum) {
    uint32_t stored = 0;
    std::memcpy(&stored, base + 20, 4);
    Checksum sum;
    sum.add(base + kHeaderBytes, size - kHeaderBytes);
    if (sum.value() != stored)
      throw Error(ErrorKind::kModelFormat, "saved engine '" + path + "' is corrupt or truncated: its checksum does "
                                           "not match its bytes");
  }
  const size_t data_start = align_up(kHeaderBytes + meta_bytes);
  const size_t data_n = data_start <= size ? size - data_start : 0;
  Reader r(base + kHeaderBytes, meta_bytes, base + std::min(data_start, size), data_n, keep_alive, path);

  graph::Model m;
  m.ir_version = r.i64();
  m.producer_name = r.str();
  const size_t nopsets = r.count(16);
  for (size_t i = 0; i < nopsets; ++i) {
    std::string domain = r.str();
    m.opsets[domain] = r.i64();
  }
  const std::string precision = r.str();
  try {
    info->precision = precision_from_name(precision);
  } catch (const Error&) {
    r.corrupt("unknown precision '" + precision + "'");
  }
  info->optimize = r.u8() != 0;
  info->nodes_in_model = static_cast<size_t>(r.i64());
  info->pass_log.resize(r.count(8));
  for (auto& s : info->pass_log) s = r.str();
  const size_t nmeta = r.count(16);
  for (size_t i = 0; i < nmeta; ++i) {
    std::string k = r.str();
    info->metadata[k] = r.str();
  }
  r.graph(m.graph);
  {
    info->input_defaults.resize(r.count(9));
    for (auto& [name, t] : info->input_defaults) {
      name = r.str();
      t = r.tensor();
      const int id = m.graph.find_value(name);
      if (!t.defined() || id < 0 ||
          std::find(m.graph.inputs.begin(), m.graph.inputs.end(), id) == m.graph.inputs.end())
        r.corrupt("a default for '" + name + "', which is not an input");
    }
    info->folded_overridable.resize(r.count(10));
    for (auto& [name, dtype, shape] : info->folded_overridable) {
      name = r.str();
      dtype = r.dtype();
      shape.resize(r.count(8));
      for (auto& d : shape) {
        d = r.i64();
        if (d < 0) r.corrupt("a negative dim");
      }
    }
  }
  if (!r.at_end()) r.corrupt("unread bytes after the graph");
  check_consistent(m.graph, r);
  m.backing = std::move(keep_alive);
  m.weight_bytes_mapped = data_n;
  return m;
}

}  // namespace twinfer
