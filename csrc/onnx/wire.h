// A small, bounds-checked reader of the protobuf wire format, enough for ONNX.
// We parse ONNX ourselves instead of linking protobuf so that raw_data can be
// borrowed straight out of the file's bytes (no second copy), no protobuf version can clash
// with the onnx Python package, and the build has no dependency to find.
//
// Every read checks the bounds; malformed bytes throw Error(kModelFormat) with
// "Message.field: what went wrong". Nested messages carry a depth, limited so
// hostile input cannot exhaust the stack.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace twinfer::onnx::wire {

enum class WireType : uint8_t {
  kVarint = 0,
  kFixed64 = 1,
  kLen = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Deepest message nesting accepted (a subgraph costs 3 levels: Node, Attribute, Graph).
constexpr int kMaxDepth = 64;

// A view of bytes inside the buffer being parsed (never owning).
struct Span {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Reads the fields of one message. Typical use:
//   Reader r(span, "TensorProto");
//   while (r.next()) switch (r.field()) {
//     case 1: r.append_varints("dims", dims); break;
//     default: r.skip();
//   }
class Reader {
 public:
  Reader() = default;
  Reader(Span bytes, const char* message, int depth = 0);

  // Reads the next tag; false at the end of the message.
  bool next();
  uint32_t field() const { return field_; }
  WireType wire_type() const { return wire_type_; }
  const char* message() const { return message_; }
  int depth() const { return depth_; }

  // Values of the current field; each checks the wire type. `name` is the
  // field's name, used in error messages.
  uint64_t varint(const char* name);
  int64_t int64(const char* name) { return static_cast<int64_t>(varint(name)); }
  int32_t int32(const char* name) { return static_cast<int32_t>(varint(name)); }
  float float32(const char* name);
  Span bytes(const char* name);
  // A protobuf `string`: must be valid UTF-8 (names reach Python as str).
  std::string string(const char* name);
  // A protobuf `bytes` field (attribute s/strings): any bytes.
  std::string byte_string(const char* name);
  // A nested message; its reader is one level deeper.
  Reader message(const char* name, const char* type);

  // Repeated scalars, accepted both packed (one LEN field) and unpacked
  // (one field per element), as protobuf parsers must.
  void append_varints(const char* name, std::vector<int64_t>& out);
  void append_floats(const char* name, std::vector<float>& out);
  // The raw little-endian bytes of repeated fixed-width elements (4 or 8
  // bytes each, packed or not), so large arrays can be borrowed uncopied.
  Span fixed_chunk(const char* name, size_t elem_size);
  // The varint bytes of a repeated varint field (packed or not), validated;
  // decode them later with decode_varints().
  Span varint_chunk(const char* name);

  // Skips the current field, whatever its wire type (groups included).
  void skip();

  [[noreturn]] void fail(const char* name, const std::string& what) const;

 private:
  uint64_t read_varint(const char* name);
  void expect(const char* name, WireType t) const;
  void skip_group(uint32_t field, int depth);

  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  const char* message_ = "";
  int depth_ = 0;
  uint32_t field_ = 0;
  WireType wire_type_ = WireType::kVarint;
};

// Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool valid_utf8(const uint8_t* p, size_t n);

// Number of varints in bytes validated by Reader::varint_chunk.
size_t count_varints(Span s);
// Decodes a validated varint chunk, calling fn(uint64_t) for each value.
template <typename Fn>
void decode_varints(Span s, Fn&& fn) {
  const uint8_t* p = s.data;
  const uint8_t* end = s.data + s.size;
  while (p < end) {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b;
    do {
      b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) && p < end);
    fn(v);
  }
}

}  // namespace twinfer::onnx::wire
