#include "ops/kernel.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

namespace twinfer {

const graph::Value& KernelBuildInfo::input(size_t i) const {
  if (!has_input(i)) fail(ErrorKind::kModelFormat, "required input " + std::to_string(i) + " is missing");
  return graph_.values[node_.inputs[i]];
}

const graph::Value& KernelBuildInfo::output(size_t i) const {
  if (!has_output(i)) fail(ErrorKind::kModelFormat, "output " + std::to_string(i) + " is missing");
  return graph_.values[node_.outputs[i]];
}

Shape KernelBuildInfo::input_shape(size_t i) const {
  const auto& v = input(i);
  if (!v.has_shape || !sym_shape_known(v.shape))
    fail(ErrorKind::kShape, "shape of input '" + v.name + "' is not known");
  return sym_shape_values(v.shape);
}

Shape KernelBuildInfo::output_shape(size_t i) const {
  const auto& v = output(i);
  if (!v.has_shape || !sym_shape_known(v.shape))
    fail(ErrorKind::kShape, "shape of output '" + v.name + "' is not known");
  return sym_shape_values(v.shape);
}

void KernelBuildInfo::fail(ErrorKind kind, const std::string& msg) const {
  throw Error(kind, msg, node_.name, node_.op_type);
}

namespace {
// Definitions by op type (every plan looks up each of its nodes here), each
// op's in registration order; a deque keeps the pointers select_kernel hands out.
std::unordered_map<std::string, std::deque<KernelDef>>& kernels() {
  static std::unordered_map<std::string, std::deque<KernelDef>> m;
  return m;
}

const std::string& domain_of(const std::string& d) {
  static const std::string kDefault;
  return d == "ai.onnx" ? kDefault : d;
}
}  // namespace

void register_kernel(const KernelDef& def) { kernels()[def.op_type].push_back(def); }

bool node_has_strings(const KernelBuildInfo& info) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input(i).dtype == DType::kString) return true;
  for (size_t i = 0; i < info.num_outputs(); ++i)
    if (info.has_output(i) && info.output(i).dtype == DType::kString) return true;
  return false;
}

const KernelDef* select_kernel(const KernelBuildInfo& info, std::string* why_not) {
  const auto& n = info.node();
  const std::string& domain = domain_of(n.domain);
  const KernelDef* best = nullptr;
  std::string reasons;
  const bool strings = node_has_strings(info);
  static const std::deque<KernelDef> kNone;
  const auto found = kernels().find(n.op_type);
  for (const KernelDef& d : found == kernels().end() ? kNone : found->second) {
    if (d.backend != info.backend() || d.domain != domain) continue;
    if (strings && !d.strings) continue;
    std::string why;
    if (d.supports && !d.supports(info, &why)) {
      if (!why.empty()) reasons += (reasons.empty() ? "" : "; ") + why;
      continue;
    }
    if (!best || d.priority > best->priority) best = &d;
  }
  if (!best && why_not) {
    *why_not = !reasons.empty() ? reasons
               : strings        ? std::string("no ") + backend_name(info.backend()) + " kernel for op " + n.op_type +
                               " takes string tensors"
                                : std::string("no ") + backend_name(info.backend()) + " kernel for op " + n.op_type;
  }
  return best;
}

bool any_kernel_for(const std::string& domain, const std::string& op_type, Backend backend) {
  const auto defs = kernels().find(op_type);
  if (defs == kernels().end()) return false;
  for (const KernelDef& d : defs->second)
    if (d.backend == backend && d.domain == domain_of(domain)) return true;
  return false;
}

std::vector<std::string> ops_with_kernels(Backend backend) {
  std::vector<std::pair<std::string, std::string>> ops;  // (domain, op): sorted as they used to be
  for (const auto& [op, defs] : kernels())
    for (const KernelDef& d : defs)
      if (d.backend == backend) ops.emplace_back(d.domain, op);
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  std::vector<std::string> r;
  for (const auto& [domain, op] : ops) r.push_back(domain.empty() ? op : domain + "::" + op);
  return r;
}

std::vector<Tensor> Kernel::run_dynamic(KernelContext&) const {
  throw Error(ErrorKind::kRuntime, "this kernel has no dynamic-output mode");
}

std::shared_ptr<void> Kernel::count(KernelContext&, int32_t*) const {
  throw Error(ErrorKind::kRuntime, "this kernel has no two-half dynamic-output mode");
}

std::vector<Tensor> Kernel::finish(KernelContext&, const int32_t*, const std::shared_ptr<void>&) const {
  throw Error(ErrorKind::kRuntime, "this kernel has no two-half dynamic-output mode");
}

}  // namespace twinfer
