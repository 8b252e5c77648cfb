#include "ops/kernel.h"

#include <algorithm>
#include <map>

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
std::multimap<std::pair<std::string, std::string>, KernelDef>& kernels() {
  static std::multimap<std::pair<std::string, std::string>, KernelDef> m;
  return m;
}
}  // namespace

void register_kernel(const KernelDef& def) { kernels().emplace(std::make_pair(def.domain, def.op_type), def); }

bool node_has_strings(const KernelBuildInfo& info) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input(i).dtype == DType::kString) return true;
  for (size_t i = 0; i < info.num_outputs(); ++i)
    if (info.has_output(i) && info.output(i).dtype == DType::kString) return true;
  return false;
}

const KernelDef* select_kernel(const KernelBuildInfo& info, std::string* why_not) {
  const auto& n = info.node();
  std::string domain = n.domain == "ai.onnx" ? "" : n.domain;
  auto range = kernels().equal_range({domain, n.op_type});
  const KernelDef* best = nullptr;
  std::string reasons;
  const bool strings = node_has_strings(info);
  for (auto it = range.first; it != range.second; ++it) {
    const KernelDef& d = it->second;
    if (d.backend != info.backend()) continue;
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
  std::string d = domain == "ai.onnx" ? "" : domain;
  auto range = kernels().equal_range({d, op_type});
  for (auto it = range.first; it != range.second; ++it)
    if (it->second.backend == backend) return true;
  return false;
}

std::vector<std::string> ops_with_kernels(Backend backend) {
  std::vector<std::string> r;
  for (const auto& kv : kernels())
    if (kv.second.backend == backend) {
      std::string name = kv.first.first.empty() ? kv.first.second : kv.first.first + "::" + kv.first.second;
      if (r.empty() || r.back() != name) r.push_back(std::move(name));
    }
  return r;
}

std::vector<Tensor> Kernel::run_dynamic(KernelContext&) const {
  throw Error(ErrorKind::kRuntime, "this kernel has no dynamic-output mode");
}

}  // namespace twinfer
