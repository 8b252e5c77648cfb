#include "ops/nn/window.h"

#include <algorithm>

#include "core/error.h"
#include "core/shape_limits.h"

namespace twinfer::nn {

namespace {

[[noreturn]] void fail(const graph::Node& n, ErrorKind kind, const std::string& msg) {
  throw Error(kind, msg, n.name, n.op_type);
}

std::vector<int64_t> per_dim(const graph::Node& n, const char* name, size_t nsp, int64_t dflt,
                             int64_t min_value) {
  std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(nsp, dflt));
  if (v.empty()) v.assign(nsp, dflt);  // some exporters write an empty list for "default"
  if (v.size() != nsp)
    fail(n, ErrorKind::kModelFormat, std::string("attribute '") + name + "' has " +
                                         std::to_string(v.size()) + " values, expected " +
                                         std::to_string(nsp));
  for (int64_t x : v)
    if (x < min_value)
      fail(n, ErrorKind::kModelFormat, std::string("attribute '") + name + "' has invalid value " +
                                           std::to_string(x));
  return v;
}

}  // namespace

Window parse_window(const graph::Node& n, size_t nsp, const std::vector<int64_t>* kernel_fallback,
                    const WindowOptions& opt) {
  if (nsp == 0) fail(n, ErrorKind::kShape, "input needs at least one spatial dimension");
  Window w;
  w.nsp = nsp;
  if (n.has_attr("kernel_shape")) {
    w.kernel = per_dim(n, "kernel_shape", nsp, 1, 1);
  } else if (kernel_fallback) {
    w.kernel = *kernel_fallback;
    if (w.kernel.size() != nsp) fail(n, ErrorKind::kShape, "weights rank does not match the input rank");
  } else {
    fail(n, ErrorKind::kModelFormat, "missing required attribute 'kernel_shape'");
  }
  if (kernel_fallback && kernel_fallback->size() == nsp && *kernel_fallback != w.kernel)
    fail(n, ErrorKind::kShape, "kernel_shape does not match the weights' spatial dims");
  w.stride = per_dim(n, "strides", nsp, 1, 1);
  w.dilation = per_dim(n, "dilations", nsp, 1, 1);
  if (!opt.allow_dilations && std::any_of(w.dilation.begin(), w.dilation.end(), [](int64_t d) { return d != 1; }))
    fail(n, ErrorKind::kUnsupportedOp, "dilations are not supported by this op");

  std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (ap == "NOTSET" || ap.empty()) w.auto_pad = AutoPad::kNotSet;
  else if (ap == "SAME_UPPER") w.auto_pad = AutoPad::kSameUpper;
  else if (ap == "SAME_LOWER") w.auto_pad = AutoPad::kSameLower;
  else if (ap == "VALID") w.auto_pad = AutoPad::kValid;
  else fail(n, ErrorKind::kUnsupportedOp, "unknown auto_pad value '" + ap + "'");

  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  if (pads.empty()) pads.assign(2 * nsp, 0);
  if (pads.size() != 2 * nsp)
    fail(n, ErrorKind::kModelFormat, "attribute 'pads' has " + std::to_string(pads.size()) +
                                         " values, expected " + std::to_string(2 * nsp));
  for (int64_t p : pads)
    if (p < 0) fail(n, ErrorKind::kModelFormat, "negative pads are not supported");
  bool any_pad = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; });
  if (any_pad && w.auto_pad != AutoPad::kNotSet)
    fail(n, ErrorKind::kModelFormat, "explicit pads cannot be combined with auto_pad=" + ap);
  w.pad_begin.assign(pads.begin(), pads.begin() + nsp);
  w.pad_end.assign(pads.begin() + nsp, pads.end());
  // Window arithmetic in int64 that cannot wrap: no extent past a tensor's
  // most elements (dilations of 2^62 gave "a kernel of size -2^63").
  for (size_t i = 0; i < nsp; ++i) {
    int64_t span = 0;
    if (__builtin_mul_overflow(w.kernel[i] - 1, w.dilation[i], &span) || span >= kMaxElements)
      fail(n, ErrorKind::kShape, "kernel_shape " + std::to_string(w.kernel[i]) + " with dilation " +
                                     std::to_string(w.dilation[i]) + " spans more than a tensor dim can (2^47)");
    if (w.stride[i] >= kMaxElements || w.pad_begin[i] >= kMaxElements || w.pad_end[i] >= kMaxElements)
      fail(n, ErrorKind::kShape, "strides or pads of dim " + std::to_string(i) + " are larger than a tensor dim can "
                                 "be (2^47)");
  }

  int64_t ceil_mode = n.attr_int("ceil_mode", 0);
  if (ceil_mode != 0 && !opt.allow_ceil_mode)
    fail(n, ErrorKind::kUnsupportedOp, "ceil_mode is not supported by this op");
  w.ceil_mode = ceil_mode != 0;
  return w;
}

int64_t window_output_size(const Window& w, size_t i, int64_t in, const graph::Node& n) {
  const int64_t s = w.stride[i], ek = w.effective_kernel(i);
  switch (w.auto_pad) {
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower:
      return (in + s - 1) / s;
    case AutoPad::kValid:
      if (in < ek) break;
      return (in - ek) / s + 1;
    case AutoPad::kNotSet: {
      int64_t span = in + w.pad_begin[i] + w.pad_end[i] - ek;
      if (span < 0) break;
      if (!w.ceil_mode) return span / s + 1;
      int64_t out = (span + s - 1) / s + 1;
      // A last window that starts in the right padding is dropped (the rule
      // of PyTorch, onnxruntime and the ONNX reference evaluator).
      if ((out - 1) * s >= in + w.pad_begin[i]) --out;
      return out;
    }
  }
  fail(n, ErrorKind::kShape, "spatial dim " + std::to_string(i) + " of size " + std::to_string(in) +
                                 " is smaller than the (dilated, padded) kernel of size " +
                                 std::to_string(ek));
}

Dim window_output_dim(const Window& w, size_t i, const Dim& in, const graph::Node& n) {
  if (in.known()) return Dim(window_output_size(w, i, in.value, n));
  // Unknown input: the output keeps the symbol only when the window maps
  // each position onto itself.
  const int64_t ek = w.effective_kernel(i);
  bool same = false;
  if (w.stride[i] == 1) {
    switch (w.auto_pad) {
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: same = true; break;
      case AutoPad::kValid: same = ek == 1; break;
      case AutoPad::kNotSet: same = w.pad_begin[i] + w.pad_end[i] == ek - 1; break;
    }
  }
  return same ? in : Dim();
}

void resolve_pads(Window& w, const Shape& in_spatial) {
  for (size_t i = 0; i < w.nsp; ++i) {
    const int64_t in = in_spatial[i], s = w.stride[i], ek = w.effective_kernel(i);
    if (w.auto_pad == AutoPad::kValid) {
      w.pad_begin[i] = w.pad_end[i] = 0;
    } else if (w.auto_pad != AutoPad::kNotSet) {
      int64_t out = (in + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + ek - in);
      int64_t small = total / 2, big = total - small;
      w.pad_begin[i] = w.auto_pad == AutoPad::kSameUpper ? small : big;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  }
}

}  // namespace twinfer::nn
