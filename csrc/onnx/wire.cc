#include "onnx/wire.h"

#include <cstring>

#include "core/error.h"

namespace twinfer::onnx::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "raw tensor data is little-endian; a big-endian host would need byte swaps");

namespace {

const char* wire_type_name(WireType t) {
  switch (t) {
    case WireType::kVarint: return "varint";
    case WireType::kFixed64: return "fixed64";
    case WireType::kLen: return "length-delimited";
    case WireType::kStartGroup: return "start-group";
    case WireType::kEndGroup: return "end-group";
    case WireType::kFixed32: return "fixed32";
  }
  return "?";
}

// Reads one varint from [p, end); false when truncated or longer than 64 bits.
bool parse_varint(const uint8_t*& p, const uint8_t* end, uint64_t& out, bool& overflow) {
  uint64_t v = 0;
  overflow = false;
  for (int i = 0; i < 10; ++i) {
    if (p >= end) return false;
    const uint8_t b = *p++;
    // The 10th byte holds bit 63 only; anything more does not fit in 64 bits.
    if (i == 9 && (b & 0xfe)) {
      overflow = true;
      return false;
    }
    v |= uint64_t(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      out = v;
      return true;
    }
  }
  overflow = true;
  return false;
}

}  // namespace

Reader::Reader(Span bytes, const char* message, int depth)
    : p_(bytes.data), end_(bytes.data + bytes.size), message_(message), depth_(depth) {
  if (depth > kMaxDepth)
    throw Error(ErrorKind::kModelFormat,
                std::string(message) + ": messages nested deeper than " + std::to_string(kMaxDepth));
}

void Reader::fail(const char* name, const std::string& what) const {
  throw Error(ErrorKind::kModelFormat, std::string(message_) + "." + name + ": " + what);
}

uint64_t Reader::read_varint(const char* name) {
  uint64_t v = 0;
  bool overflow = false;
  if (!parse_varint(p_, end_, v, overflow)) fail(name, overflow ? "varint overflows 64 bits" : "truncated varint");
  return v;
}

bool Reader::next() {
  if (p_ >= end_) return false;
  const uint64_t tag = read_varint("tag");
  const uint64_t field = tag >> 3;
  const uint8_t wt = tag & 7;
  if (field == 0 || field > (1u << 29) - 1) fail("tag", "invalid field number " + std::to_string(field));
  if (wt > 5) fail("tag", "invalid wire type " + std::to_string(wt) + " for field " + std::to_string(field));
  field_ = static_cast<uint32_t>(field);
  wire_type_ = static_cast<WireType>(wt);
  if (wire_type_ == WireType::kEndGroup)
    fail("tag", "end-group marker for field " + std::to_string(field) + " without a start");
  return true;
}

void Reader::expect(const char* name, WireType t) const {
  if (wire_type_ != t)
    fail(name, std::string("wrong wire type ") + wire_type_name(wire_type_) + " (expected " +
                   wire_type_name(t) + ")");
}

uint64_t Reader::varint(const char* name) {
  expect(name, WireType::kVarint);
  return read_varint(name);
}

float Reader::float32(const char* name) {
  expect(name, WireType::kFixed32);
  if (end_ - p_ < 4) fail(name, "truncated fixed32");
  float f;
  std::memcpy(&f, p_, 4);
  p_ += 4;
  return f;
}

Span Reader::bytes(const char* name) {
  expect(name, WireType::kLen);
  const uint64_t n = read_varint(name);
  if (n > static_cast<uint64_t>(end_ - p_))
    fail(name, "length " + std::to_string(n) + " runs past the end of the data (" +
                   std::to_string(end_ - p_) + " bytes left)");
  Span s{p_, static_cast<size_t>(n)};
  p_ += n;
  return s;
}

std::string Reader::byte_string(const char* name) {
  Span s = bytes(name);
  return std::string(reinterpret_cast<const char*>(s.data), s.size);
}

std::string Reader::string(const char* name) {
  Span s = bytes(name);
  if (!valid_utf8(s.data, s.size)) fail(name, "string is not valid UTF-8");
  return std::string(reinterpret_cast<const char*>(s.data), s.size);
}

bool valid_utf8(const uint8_t* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return false;
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

Reader Reader::message(const char* name, const char* type) {
  Span s = bytes(name);
  if (depth_ + 1 > kMaxDepth)
    fail(name, "messages nested deeper than " + std::to_string(kMaxDepth));
  return Reader(s, type, depth_ + 1);
}

Span Reader::varint_chunk(const char* name) {
  Span s;
  if (wire_type_ == WireType::kLen) {
    s = bytes(name);
  } else {
    expect(name, WireType::kVarint);
    s.data = p_;
    read_varint(name);
    s.size = static_cast<size_t>(p_ - s.data);
    return s;
  }
  // Validate the packed run now so decode_varints can trust it.
  const uint8_t* p = s.data;
  const uint8_t* end = s.data + s.size;
  while (p < end) {
    uint64_t v;
    bool overflow;
    if (!parse_varint(p, end, v, overflow))
      fail(name, overflow ? "packed varint overflows 64 bits" : "truncated packed varint");
  }
  return s;
}

size_t count_varints(Span s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size; ++i) n += (s.data[i] & 0x80) == 0;
  return n;
}

void Reader::append_varints(const char* name, std::vector<int64_t>& out) {
  Span s = varint_chunk(name);
  decode_varints(s, [&](uint64_t v) { out.push_back(static_cast<int64_t>(v)); });
}

Span Reader::fixed_chunk(const char* name, size_t elem_size) {
  const WireType wt = elem_size == 4 ? WireType::kFixed32 : WireType::kFixed64;
  if (wire_type_ == WireType::kLen) {
    Span s = bytes(name);
    if (s.size % elem_size)
      fail(name, "packed length " + std::to_string(s.size) + " is not a multiple of " +
                     std::to_string(elem_size));
    return s;
  }
  expect(name, wt);
  if (static_cast<size_t>(end_ - p_) < elem_size)
    fail(name, elem_size == 4 ? "truncated fixed32" : "truncated fixed64");
  Span s{p_, elem_size};
  p_ += elem_size;
  return s;
}

void Reader::append_floats(const char* name, std::vector<float>& out) {
  Span s = fixed_chunk(name, 4);
  const size_t n = s.size / 4, old = out.size();
  out.resize(old + n);
  if (n) std::memcpy(out.data() + old, s.data, s.size);
}

void Reader::skip_group(uint32_t field, int depth) {
  if (depth > kMaxDepth) fail("group", "groups nested deeper than " + std::to_string(kMaxDepth));
  for (;;) {
    if (p_ >= end_) fail("group", "unterminated group for field " + std::to_string(field));
    const uint64_t tag = read_varint("tag");
    const uint64_t f = tag >> 3;
    const uint8_t wt = tag & 7;
    if (f == 0 || wt > 5) fail("group", "invalid tag inside group of field " + std::to_string(field));
    if (static_cast<WireType>(wt) == WireType::kEndGroup) {
      if (f != field) fail("group", "mismatched end-group marker for field " + std::to_string(field));
      return;
    }
    field_ = static_cast<uint32_t>(f);
    wire_type_ = static_cast<WireType>(wt);
    if (wire_type_ == WireType::kStartGroup) skip_group(field_, depth + 1);
    else skip();
  }
}

void Reader::skip() {
  const std::string name = "field " + std::to_string(field_);
  switch (wire_type_) {
    case WireType::kVarint: read_varint(name.c_str()); return;
    case WireType::kFixed64:
      if (end_ - p_ < 8) fail(name.c_str(), "truncated fixed64");
      p_ += 8;
      return;
    case WireType::kFixed32:
      if (end_ - p_ < 4) fail(name.c_str(), "truncated fixed32");
      p_ += 4;
      return;
    case WireType::kLen: bytes(name.c_str()); return;
    case WireType::kStartGroup: skip_group(field_, depth_ + 1); return;
    case WireType::kEndGroup: fail(name.c_str(), "unexpected end-group marker");
  }
}

}  // namespace twinfer::onnx::wire
