// The one exception type the core throws. Its kind maps onto the Python
// twinfer.Error hierarchy in the bindings; node/op name the place at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace twinfer {

enum class ErrorKind {
  kModelFormat,    // corrupt or malformed model bytes / fields
  kUnsupportedOp,  // op, opset or attribute value we do not implement
  kShape,          // shapes that do not fit
  kDType,          // element types that do not fit
  kDevice,         // missing/unsupported device
  kOutOfMemory,    // an allocation failed
  kInvalidArgument,// bad use of the API (missing feed, unknown name)
  kRuntime,        // anything else that went wrong while running
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string node = {}, std::string op = {})
      : std::runtime_error(format(message, node, op)),
        kind_(kind),
        message_(message),
        node_(std::move(node)),
        op_(std::move(op)) {}

  ErrorKind kind() const { return kind_; }
  const std::string& node() const { return node_; }
  const std::string& op() const { return op_; }
  // The same error with `note` after its message (what a caller knows that
  // the thrower did not).
  Error with_note(const std::string& note) const { return Error(kind_, message_ + note, node_, op_); }

 private:
  static std::string format(const std::string& m, const std::string& node, const std::string& op) {
    if (node.empty() && op.empty()) return m;
    return "node '" + node + "' (" + op + "): " + m;
  }
  ErrorKind kind_;
  std::string message_;
  std::string node_;
  std::string op_;
};

// TF_CHECK(cond, kind, message-expression): throw Error when cond is false.
#define TWINFER_CHECK(cond, kind, msg)                     \
  do {                                                     \
    if (!(cond)) throw ::twinfer::Error((kind), (msg));    \
  } while (0)

}  // namespace twinfer
