// TensorProto -> Tensor. Fields are gathered as spans first (the name may come
// after the data) and turned into a tensor afterwards, so every error names
// the tensor. raw_data (and a single packed float/double run, which has the
// same bytes) is borrowed in place when aligned; everything else is copied once.
// The 4-bit and 2-bit types come packed (two or four per byte, in raw_data,
// external data or int32_data) and are unpacked here to twinfer's one byte
// per element (core/subbyte.h); this is the only place that sees them packed.
#include <cstring>
#include <vector>

#include "core/subbyte.h"
#include "onnx/parse.h"

namespace twinfer::onnx::detail {

namespace {

using wire::Span;

// Largest element count accepted: far beyond any real model, small enough
// that bytes = count * 8 cannot overflow and no absurd allocation is tried.
constexpr int64_t kMaxElements = int64_t(1) << 40;

struct TensorFields {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = 0;
  bool has_raw = false;
  Span raw;
  std::vector<Span> f32, f64, i32, i64, u64;  // chunks of float/double/int32/int64/uint64_data
  std::vector<Span> strings;                  // string_data, one entry per element
  bool has_segment = false;
  int32_t data_location = 0;  // 1 = EXTERNAL
  ExternalRef ext;
  bool has_location = false;
};

void parse_external_entry(wire::Reader r, TensorFields& t) {
  std::string key, value;
  while (r.next()) {
    switch (r.field()) {
      case 1: key = r.string("key"); break;
      case 2: value = r.string("value"); break;
      default: r.skip();
    }
  }
  auto to_int = [&](const char* what) {
    // Decimal digits only: no sign, no spaces, no overflow.
    if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
      throw Error(ErrorKind::kModelFormat, "tensor '" + t.name + "': external data " + what + " '" +
                                               value + "' is not a valid byte count");
    return static_cast<int64_t>(std::stoll(value));
  };
  if (key == "location") {
    t.ext.location = value;
    t.has_location = true;
  } else if (key == "offset") {
    t.ext.offset = to_int("offset");
  } else if (key == "length") {
    t.ext.length = to_int("length");
  }  // "checksum" and others: not needed to read the data
}

TensorFields gather(wire::Reader& r) {
  TensorFields t;
  while (r.next()) {
    switch (r.field()) {
      case 1: r.append_varints("dims", t.dims); break;
      case 2: t.data_type = r.int32("data_type"); break;
      case 3: t.has_segment = true; r.skip(); break;
      case 4: t.f32.push_back(r.fixed_chunk("float_data", 4)); break;
      case 5: t.i32.push_back(r.varint_chunk("int32_data")); break;
      case 6: t.strings.push_back(r.bytes("string_data")); break;
      case 7: t.i64.push_back(r.varint_chunk("int64_data")); break;
      case 8: t.name = r.string("name"); break;
      case 9: t.raw = r.bytes("raw_data"); t.has_raw = true; break;
      case 10: t.f64.push_back(r.fixed_chunk("double_data", 8)); break;
      case 11: t.u64.push_back(r.varint_chunk("uint64_data")); break;
      case 13: parse_external_entry(r.message("external_data", "StringStringEntryProto"), t); break;
      case 14: t.data_location = r.int32("data_location"); break;
      default: r.skip();
    }
  }
  return t;
}

const char* onnx_type_name(int32_t code) {
  switch (code) {
    case 0: return "UNDEFINED";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 17: return "FLOAT8E4M3FN";
    case 18: return "FLOAT8E4M3FNUZ";
    case 19: return "FLOAT8E5M2";
    case 20: return "FLOAT8E5M2FNUZ";
    case 21: return "UINT4";
    case 22: return "INT4";
    case 23: return "FLOAT4E2M1";
    case 24: return "FLOAT8E8M0";
    case 25: return "UINT2";
    case 26: return "INT2";
    default: return "unknown";
  }
}

size_t fixed_count(const std::vector<Span>& chunks, size_t elem) {
  size_t n = 0;
  for (const auto& c : chunks) n += c.size / elem;
  return n;
}

size_t varint_count(const std::vector<Span>& chunks) {
  size_t n = 0;
  for (const auto& c : chunks) n += wire::count_varints(c);
  return n;
}

// Tensor over `bytes` (already checked to be exactly the tensor's size):
// borrowed when aligned for the element type, else copied once.
Tensor place(Span bytes, DType dtype, Shape shape, const std::shared_ptr<void>& owner, ParseContext& ctx) {
  const size_t elem = dtype_size(dtype);
  if (bytes.size == 0) return Tensor::empty(dtype, std::move(shape));
  if (reinterpret_cast<uintptr_t>(bytes.data) % elem == 0) {
    ctx.bytes_mapped += bytes.size;
    // The const_cast is safe: constants are never written (passes make new tensors).
    return Tensor::borrow(const_cast<uint8_t*>(bytes.data), dtype, std::move(shape), Device::cpu(), owner);
  }
  Tensor t = Tensor::empty(dtype, std::move(shape));
  std::memcpy(t.data(), bytes.data, bytes.size);
  ctx.bytes_copied += bytes.size;
  return t;
}

// Copies varint-encoded values into a new tensor, converting each with `conv`.
template <typename T, typename Conv>
Tensor from_varints(const std::vector<Span>& chunks, DType dtype, Shape shape, Conv conv) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  T* out = t.data_as<T>();
  for (const auto& c : chunks) wire::decode_varints(c, [&](uint64_t v) { *out++ = conv(v); });
  return t;
}

// Unpacks `packed` (exactly the packed size of numel elements) into a new tensor.
Tensor unpack(const uint8_t* packed, DType dtype, const Shape& shape, int64_t numel, ParseContext& ctx) {
  Tensor t = Tensor::empty(dtype, shape);
  if (numel > 0) unpack_subbyte(packed, dtype_bits(dtype), numel, static_cast<uint8_t*>(t.data()));
  ctx.bytes_copied += static_cast<size_t>(numel);
  return t;
}

// int32_data of a 4-bit / 2-bit type: one packed byte per entry (two or four
// elements, low bits first), ceil(numel * bits / 8) entries.
Tensor subbyte_from_int32s(const std::vector<Span>& chunks, const std::string& label, DType dtype,
                           const Shape& shape, int64_t numel, ParseContext& ctx) {
  const int bits = dtype_bits(dtype);
  const int64_t need = packed_subbyte_bytes(numel, bits);
  const size_t count = varint_count(chunks);
  if (count != static_cast<size_t>(need))
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "': int32_data has " + std::to_string(count) +
                                             " values but dims " + shape_str(shape) + " of " + dtype_name(dtype) +
                                             " need " + std::to_string(need) + " (" + std::to_string(8 / bits) +
                                             " elements packed in each)");
  std::vector<uint8_t> packed;
  packed.reserve(static_cast<size_t>(need));
  bool bad = false;
  for (const auto& c : chunks)
    wire::decode_varints(c, [&](uint64_t v) {
      bad |= v > 0xFF;
      packed.push_back(static_cast<uint8_t>(v));
    });
  if (bad)
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "': an int32_data entry of " + dtype_name(dtype) +
                                             " is not a packed byte (0..255)");
  return unpack(packed.data(), dtype, shape, numel, ctx);
}

Tensor from_typed(const TensorFields& f, const std::string& label, DType dtype, const Shape& shape,
                  int64_t numel, ParseContext& ctx) {
  // Which typed field carries each element type (onnx.proto's TensorProto comments).
  const std::vector<Span>* src = nullptr;
  const char* field = "";
  switch (dtype) {
    case DType::kFloat32: src = &f.f32; field = "float_data"; break;
    case DType::kFloat64: src = &f.f64; field = "double_data"; break;
    case DType::kInt64: src = &f.i64; field = "int64_data"; break;
    case DType::kUInt32: case DType::kUInt64: src = &f.u64; field = "uint64_data"; break;
    default: src = &f.i32; field = "int32_data"; break;  // f16, bf16, f8, bool, (u)int8/16, int32
  }
  const std::pair<const std::vector<Span>*, const char*> all[] = {
      {&f.f32, "float_data"}, {&f.f64, "double_data"}, {&f.i32, "int32_data"},
      {&f.i64, "int64_data"}, {&f.u64, "uint64_data"}};
  for (const auto& [chunks, name] : all)
    if (chunks != src && !chunks->empty())
      throw Error(ErrorKind::kModelFormat, "tensor '" + label + "' of type " + dtype_name(dtype) +
                                               " carries " + name + " (expected " + field + ")");
  if (dtype_is_subbyte(dtype)) return subbyte_from_int32s(*src, label, dtype, shape, numel, ctx);
  const bool fixed = dtype == DType::kFloat32 || dtype == DType::kFloat64;
  const size_t count = fixed ? fixed_count(*src, dtype_size(dtype)) : varint_count(*src);
  if (count != static_cast<size_t>(numel))
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "': " + field + " has " + std::to_string(count) +
                                             " values but dims " + shape_str(shape) + " need " +
                                             std::to_string(numel));
  if (numel == 0) return Tensor::empty(dtype, shape);
  if (fixed && src->size() == 1) return place(src->front(), dtype, shape, ctx.keep_alive, ctx);
  if (fixed) {
    Tensor t = Tensor::empty(dtype, shape);
    uint8_t* out = static_cast<uint8_t*>(t.data());
    for (const auto& c : *src) {
      std::memcpy(out, c.data, c.size);
      out += c.size;
    }
    ctx.bytes_copied += t.bytes();
    return t;
  }
  ctx.bytes_copied += static_cast<size_t>(numel) * dtype_size(dtype);
  // Varints: int32_data holds the bit pattern of f16/bf16 and the value of the small ints.
  switch (dtype) {
    case DType::kInt64: return from_varints<int64_t>(*src, dtype, shape, [](uint64_t v) { return int64_t(v); });
    case DType::kUInt64: return from_varints<uint64_t>(*src, dtype, shape, [](uint64_t v) { return v; });
    case DType::kUInt32: return from_varints<uint32_t>(*src, dtype, shape, [](uint64_t v) { return uint32_t(v); });
    case DType::kInt32: return from_varints<int32_t>(*src, dtype, shape, [](uint64_t v) { return int32_t(v); });
    case DType::kInt16: return from_varints<int16_t>(*src, dtype, shape, [](uint64_t v) { return int16_t(v); });
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return from_varints<uint16_t>(*src, dtype, shape, [](uint64_t v) { return uint16_t(v); });
    case DType::kInt8: return from_varints<int8_t>(*src, dtype, shape, [](uint64_t v) { return int8_t(v); });
    case DType::kUInt8:
    case DType::kFloat8E4M3FN:  // the 8-bit floats' bit patterns, one per int32_data entry
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:
      return from_varints<uint8_t>(*src, dtype, shape, [](uint64_t v) { return uint8_t(v); });
    case DType::kBool: return from_varints<uint8_t>(*src, dtype, shape, [](uint64_t v) { return uint8_t(v != 0); });
    default: break;
  }
  throw Error(ErrorKind::kDType, "tensor '" + label + "': no typed-data decoding for " + dtype_name(dtype));
}

// A string tensor: one string_data entry per element (ONNX strings are bytes,
// kept as they are; raw_data and external data cannot hold strings).
Tensor string_tensor(const TensorFields& f, const std::string& label) {
  if (f.has_raw || f.data_location != 0)
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "': a string tensor keeps its values in string_data");
  int64_t numel = 1;
  for (int64_t d : f.dims) {
    if (d < 0 || (d > 0 && numel > kMaxElements / d))
      throw Error(ErrorKind::kModelFormat, "tensor '" + label + "' has dims " + shape_str(f.dims) +
                                               " (negative, or more than 2^40 elements)");
    numel *= d;
  }
  if (static_cast<int64_t>(f.strings.size()) != numel)
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "': " + std::to_string(f.strings.size()) +
                                             " strings in string_data but dims " + shape_str(f.dims) + " hold " +
                                             std::to_string(numel));
  std::vector<std::string> values;
  values.reserve(f.strings.size());
  for (const Span& s : f.strings) values.emplace_back(reinterpret_cast<const char*>(s.data), s.size);
  return Tensor::strings(f.dims, std::move(values));
}

}  // namespace

Tensor parse_tensor(wire::Reader r, ParseContext& ctx, std::string* name, const std::string& fallback) {
  TensorFields f = gather(r);
  if (name) *name = f.name;
  const std::string label = f.name.empty() ? fallback : f.name;

  const DType dtype = dtype_from_onnx(f.data_type);
  if (dtype == DType::kString) return string_tensor(f, label);
  if (dtype == DType::kUndefined)
    throw Error(ErrorKind::kDType, "tensor '" + label + "' has unsupported data type " +
                                       std::to_string(f.data_type) + " (" + onnx_type_name(f.data_type) + ")");
  if (f.has_segment)
    throw Error(ErrorKind::kUnsupportedOp, "tensor '" + label + "' is segmented; segments are not supported");

  int64_t numel = 1;
  for (int64_t d : f.dims) {
    if (d < 0 || (d > 0 && numel > kMaxElements / d))
      throw Error(ErrorKind::kModelFormat, "tensor '" + label + "' has dims " + shape_str(f.dims) +
                                               " (negative, or more than 2^40 elements)");
    numel *= d;
  }
  // Bytes in the file: the 4-bit / 2-bit types are packed there.
  const bool sub = dtype_is_subbyte(dtype);
  const size_t nbytes = sub ? static_cast<size_t>(packed_subbyte_bytes(numel, dtype_bits(dtype)))
                            : static_cast<size_t>(numel) * dtype_size(dtype);
  auto size_error = [&](const char* what, size_t got) {
    return Error(ErrorKind::kModelFormat, "tensor '" + label + "': " + what + " has " + std::to_string(got) +
                                              " bytes but dims " + shape_str(f.dims) + " of " +
                                              dtype_name(dtype) + " need " + std::to_string(nbytes) +
                                              (sub ? " (packed)" : ""));
  };

  if (f.data_location == 1) {
    if (!f.has_location)
      throw Error(ErrorKind::kModelFormat, "tensor '" + label + "' is stored externally but has no location");
    std::shared_ptr<void> owner;
    Span s = external_bytes(ctx, f.ext, label, nbytes, &owner);
    if (sub) return unpack(s.data, dtype, f.dims, numel, ctx);
    return place(s, dtype, f.dims, owner, ctx);
  }
  if (f.data_location != 0)
    throw Error(ErrorKind::kModelFormat, "tensor '" + label + "' has an unknown data_location " +
                                             std::to_string(f.data_location));
  if (f.has_raw) {
    if (f.raw.size != nbytes) throw size_error("raw_data", f.raw.size);
    if (sub) return unpack(f.raw.data, dtype, f.dims, numel, ctx);
    return place(f.raw, dtype, f.dims, ctx.keep_alive, ctx);
  }
  return from_typed(f, label, dtype, f.dims, numel, ctx);
}

}  // namespace twinfer::onnx::detail
