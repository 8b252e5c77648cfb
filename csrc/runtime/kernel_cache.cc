#include "runtime/kernel_cache.h"

#include "graph/passes/pass_switch.h"

#include <cstring>
#include <vector>

namespace twinfer {

namespace {

template <typename T>
void put(std::string* k, const T& v) {
  k->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void put_str(std::string* k, const std::string& s) {
  put(k, s.size());
  k->append(s);
}

void put_shape(std::string* k, const Shape& s) {
  put(k, s.size());
  for (int64_t d : s) put(k, d);
}

// A shape with its last two dims left out (their sizes open: any_size keys).
void put_batch_dims(std::string* k, const Shape& s) {
  put(k, s.size());
  for (size_t i = 0; i + 2 < s.size(); ++i) put(k, s[i]);
}

void put_tensor(std::string* k, const Tensor& t) {
  put(k, static_cast<int>(t.dtype()));
  put_shape(k, t.shape());
  if (t.dtype() == DType::kString || dtype_is_container(t.dtype())) {
    put(k, t.data());  // host objects: by identity
  } else if (t.bytes() <= kKeyedByBytes) {
    k->push_back('b');
    if (t.bytes()) k->append(static_cast<const char*>(t.data()), t.bytes());
  } else {
    k->push_back('p');
    put(k, t.data());
  }
}

// False for an attribute a key cannot hold (a subgraph).
bool put_attr(std::string* k, const graph::Attribute& a) {
  using T = graph::Attribute::Type;
  put(k, static_cast<int>(a.type));
  switch (a.type) {
    case T::kGraph:
    case T::kGraphs: return false;
    case T::kFloat: put(k, a.f); break;
    case T::kInt: put(k, a.i); break;
    case T::kString: put_str(k, a.s); break;
    case T::kTensor: put_tensor(k, a.t); break;
    case T::kFloats:
      put(k, a.floats.size());
      for (float f : a.floats) put(k, f);
      break;
    case T::kInts:
      put(k, a.ints.size());
      for (int64_t i : a.ints) put(k, i);
      break;
    case T::kStrings:
      put(k, a.strings.size());
      for (const auto& s : a.strings) put_str(k, s);
      break;
    case T::kTensors:
      put(k, a.tensors.size());
      for (const auto& t : a.tensors) put_tensor(k, t);
      break;
    case T::kTypeProto:
      put(k, a.type_proto.size());
      for (DType d : a.type_proto) put(k, static_cast<int>(d));
      break;
    case T::kUndefined: break;
  }
  return true;
}

}  // namespace

std::string kernel_key(const KernelDef& def, const KernelBuildInfo& info, KeyShapes shapes) {
  const graph::Node& n = info.node();
  const auto put_dims = shapes == KeyShapes::kBatchDims ? put_batch_dims : put_shape;
  std::string k;
  k.reserve(256);
  put(&k, &def);
  put(&k, static_cast<int>(shapes));
  put(&k, static_cast<int>(info.backend()));
  put(&k, static_cast<int>(info.precision()));
  put(&k, info.opset());
  put_str(&k, n.domain);
  put_str(&k, n.op_type);
  put_str(&k, n.name);
  put(&k, n.attrs.size());
  for (const auto& [name, a] : n.attrs) {
    put_str(&k, name);
    if (!put_attr(&k, a)) return {};
  }
  put(&k, n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!info.has_input(i)) {
      k.push_back('-');
      continue;
    }
    if (const Tensor* c = info.input_constant(i)) {
      k.push_back('c');
      put_tensor(&k, *c);
      continue;
    }
    const graph::Value& v = info.input(i);
    if (!v.has_shape) return {};
    k.push_back('v');
    put(&k, static_cast<int>(v.dtype));
    put_dims(&k, info.input_shape(i));
  }
  put(&k, n.outputs.size());
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (!info.has_output(o)) {
      k.push_back('-');
      continue;
    }
    const graph::Value& v = info.output(o);
    if (!v.has_shape) return {};
    put(&k, static_cast<int>(v.dtype));
    put_dims(&k, info.output_shape(o));
  }
  return k;
}

std::shared_ptr<const Kernel> KernelCache::get(const KernelDef& def, const KernelBuildInfo& info) {
  const std::string key = kernel_key(def, info);
  // A node whose matrix sizes change from plan to plan (a decoder's
  // attention products as the past grows) gets, from its second size on,
  // the definition's kernel for any sizes, shared by the plans of every size.
  // TWINFER_ANY_SIZE_KERNELS=0 turns that off, for side-by-side measurements.
  const std::string sizes_key = def.create_any_size && !key.empty() && passes::pass_enabled("TWINFER_ANY_SIZE_KERNELS")
                                    ? kernel_key(def, info, KeyShapes::kBatchDims)
                                    : std::string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!key.empty()) {
      auto it = kernels_.find(key);
      if (it != kernels_.end())
        if (auto k = it->second.lock()) {
          ++stats_.hits;
          return k;
        }
    }
    if (!sizes_key.empty()) {
      AnySize& a = any_size_[sizes_key];
      if (auto k = a.kernel.lock()) {
        ++stats_.hits;
        ++stats_.any_size_hits;
        return k;
      }
      if (a.first_key.empty()) a.first_key = key;
      else if (a.first_key != key && !a.declined) a.wanted = true;
    }
  }
  // Built outside the lock (it may take milliseconds). The kernel owns its
  // large constant inputs' storage, whose addresses its key holds.
  struct Holder {
    std::unique_ptr<Kernel> kernel;
    std::vector<Tensor> constants;
  };
  auto h = std::make_shared<Holder>();
  bool any_size = false;
  if (!sizes_key.empty()) {
    bool wanted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wanted = any_size_[sizes_key].wanted;
    }
    if (wanted) {
      h->kernel = def.create_any_size(info);
      any_size = h->kernel != nullptr;
      if (!any_size) {  // this node is better served by a kernel per size: not asked again
        std::lock_guard<std::mutex> lock(mu_);
        AnySize& a = any_size_[sizes_key];
        a.wanted = false;
        a.declined = true;
      }
    }
  }
  if (!h->kernel) h->kernel = def.create(info);
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (const Tensor* c = info.input_constant(i)) h->constants.push_back(*c);
  std::shared_ptr<const Kernel> k(h, h->kernel.get());
  if (key.empty()) return k;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  if (any_size) {
    ++stats_.any_size_built;
    any_size_[sizes_key].kernel = k;
  } else {
    kernels_[key] = k;
  }
  // Keys whose kernels every plan has let go of are dropped now and then
  // (a size class once its kernels are gone: it is seen again if it comes back).
  if (++inserts_since_sweep_ >= 256) {
    inserts_since_sweep_ = 0;
    for (auto i = kernels_.begin(); i != kernels_.end();)
      i = i->second.expired() ? kernels_.erase(i) : std::next(i);
    for (auto i = any_size_.begin(); i != any_size_.end();)
      i = i->second.kernel.expired() && !kernels_.count(i->second.first_key) ? any_size_.erase(i) : std::next(i);
  }
  return k;
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace twinfer
