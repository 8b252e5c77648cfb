#include "backends/cpu/onednn_common.h"

#include <algorithm>

#include <omp.h>

#include <cstdlib>

#include "ops/channel_block.h"

namespace twinfer::cpu::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

bool has_dnnl_type(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kInt8 ||
         t == DType::kUInt8 || t == DType::kInt32;
}

dnnl::memory::data_type dnnl_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::kFloat32: return dt::f32;
    case DType::kFloat16: return dt::f16;
    case DType::kBFloat16: return dt::bf16;
    case DType::kInt8: return dt::s8;
    case DType::kUInt8: return dt::u8;
    case DType::kInt32: return dt::s32;
    default: break;
  }
  throw Error(ErrorKind::kDType, std::string("oneDNN has no type for ") + dtype_name(t));
}

dnnl::memory::dims to_dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::format_tag plain_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    case 7: return tag::abcdefg;
    case 8: return tag::abcdefgh;
    case 9: return tag::abcdefghi;
    case 10: return tag::abcdefghij;
    case 11: return tag::abcdefghijk;
    case 12: return tag::abcdefghijkl;
    default: break;
  }
  throw Error(ErrorKind::kShape, "oneDNN supports ranks 1..12, got " + std::to_string(rank));
}

int current_threads() { return omp_get_max_threads(); }

int64_t channel_block() {
  static const int64_t b = [] {
    using isa = dnnl::cpu_isa;
    const isa i = dnnl::get_effective_cpu_isa();
    const bool avx512 = i == isa::avx512_core || i == isa::avx512_core_vnni || i == isa::avx512_core_bf16 ||
                        i == isa::avx512_core_fp16 || i == isa::avx512_core_amx ||
                        i == isa::avx512_core_amx_fp16;
    return avx512 ? int64_t(16) : int64_t(8);
  }();
  return b;
}

dnnl::memory::format_tag blocked_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  const bool b16 = channel_block() == 16;
  switch (rank) {
    case 3: return b16 ? tag::nCw16c : tag::nCw8c;
    case 4: return b16 ? tag::nChw16c : tag::nChw8c;
    case 5: return b16 ? tag::nCdhw16c : tag::nCdhw8c;
    default: break;
  }
  throw Error(ErrorKind::kShape, "blocked layouts need rank 3..5, got " + std::to_string(rank));
}

dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

EltwiseParams eltwise_params(const nn::Activation& act) {
  using alg = dnnl::algorithm;
  switch (act.kind) {
    case nn::ActKind::kNone: break;
    case nn::ActKind::kRelu: return {alg::eltwise_relu, 0.f, 0.f};
    case nn::ActKind::kLeakyRelu: return {alg::eltwise_relu, act.alpha, 0.f};
    case nn::ActKind::kClip: return {alg::eltwise_clip_v2, act.alpha, act.beta};
    case nn::ActKind::kSigmoid: return {alg::eltwise_logistic, 0.f, 0.f};
    case nn::ActKind::kHardSigmoid: return {alg::eltwise_hardsigmoid, act.alpha, act.beta};
    case nn::ActKind::kHardSwish: return {alg::eltwise_hardswish, 1.f / 6.f, 0.5f};
    case nn::ActKind::kSilu: return {alg::eltwise_swish, 1.f, 0.f};
    case nn::ActKind::kGelu: return {alg::eltwise_gelu_erf, 0.f, 0.f};
    case nn::ActKind::kGeluTanh: return {alg::eltwise_gelu_tanh, 0.f, 0.f};
    case nn::ActKind::kTanh: return {alg::eltwise_tanh, 0.f, 0.f};
  }
  throw Error(ErrorKind::kRuntime, "no eltwise for an empty activation");
}

void append_activation(dnnl::post_ops& ops, const nn::Activation& act) {
  if (act.none()) return;
  EltwiseParams e = eltwise_params(act);
  ops.append_eltwise(e.alg, e.alpha, e.beta);
}

namespace {

std::shared_ptr<dnnl::memory> reordered(const dnnl::memory& src, const dnnl::memory::desc& layout) {
  auto dst = std::make_shared<dnnl::memory>(layout, engine());
  dnnl::stream s(engine());
  dnnl::reorder(src, *dst).execute(s, const_cast<dnnl::memory&>(src), *dst);
  s.wait();
  return dst;
}

// Packed copies by the bytes they were made from (address, plain layout,
// packed layout), held weakly: a copy lives as long as a kernel uses it.
// The owner is kept weakly too and must be the same live storage, so an
// address that a freed tensor's successor reuses never matches.
struct SharedCopy {
  const void* data;
  dnnl::memory::desc plain, layout;
  std::weak_ptr<const void> owner;
  std::weak_ptr<const dnnl::memory> copy;
};
std::mutex shared_mutex;
std::vector<SharedCopy> shared_copies;  // under shared_mutex
size_t inserts_since_prune = 0;         // under shared_mutex

std::shared_ptr<const dnnl::memory> find_shared(const dnnl::memory::desc& plain, const void* data,
                                                const dnnl::memory::desc& layout,
                                                const std::shared_ptr<const void>& owner) {
  for (const SharedCopy& c : shared_copies)
    if (c.data == data && c.plain == plain && c.layout == layout) {
      auto copy = c.copy.lock();
      if (copy && c.owner.lock() == owner) return copy;
    }
  return nullptr;
}

std::shared_ptr<const dnnl::memory> shared_copy(const dnnl::memory::desc& plain, const void* data,
                                                const dnnl::memory::desc& layout,
                                                const std::shared_ptr<const void>& owner) {
  {
    std::lock_guard<std::mutex> lock(shared_mutex);
    if (auto copy = find_shared(plain, data, layout, owner)) return copy;
  }
  // Reordered without the lock (other engines pack meanwhile); should
  // another kernel have made the same copy in between, that one is kept.
  dnnl::memory src(plain, engine(), const_cast<void*>(data));
  std::shared_ptr<const dnnl::memory> copy = reordered(src, layout);
  std::lock_guard<std::mutex> lock(shared_mutex);
  if (auto first = find_shared(plain, data, layout, owner)) return first;
  if (++inserts_since_prune >= 64) {
    inserts_since_prune = 0;
    shared_copies.erase(std::remove_if(shared_copies.begin(), shared_copies.end(),
                                       [](const SharedCopy& c) { return c.copy.expired() || c.owner.expired(); }),
                        shared_copies.end());
  }
  shared_copies.push_back(SharedCopy{data, plain, layout, owner, copy});
  return copy;
}

}  // namespace

std::pair<size_t, size_t> shared_packed_copies() {
  std::lock_guard<std::mutex> lock(shared_mutex);
  size_t n = 0, bytes = 0;
  for (const SharedCopy& c : shared_copies)
    if (auto copy = c.copy.lock()) {
      ++n;
      bytes += copy->get_desc().get_size();
    }
  return {n, bytes};
}

const dnnl::memory& PackedWeights::init(const dnnl::memory::desc& plain, const void* data,
                                        const dnnl::memory::desc& layout, const std::shared_ptr<const void>& owner) {
  copies_.clear();
  if (owner) {
    copies_.push_back(shared_copy(plain, data, layout, owner));
  } else {
    dnnl::memory src(plain, engine(), const_cast<void*>(data));
    copies_.push_back(reordered(src, layout));
  }
  return *copies_.back();
}

const dnnl::memory& PackedWeights::get(const dnnl::memory::desc& layout) {
  for (auto& c : copies_)
    if (c->get_desc() == layout) return *c;
  if (copies_.empty()) throw Error(ErrorKind::kRuntime, "packed weights used before init");
  copies_.push_back(reordered(*copies_.front(), layout));
  return *copies_.back();
}

namespace {
struct ThreadBuffer {
  char* raw = nullptr;
  size_t size = 0;
  ~ThreadBuffer() { std::free(raw); }
};
}  // namespace

char* run_scratch(const KernelContext& ctx, size_t declared, size_t needed) {
  if (needed == 0) return nullptr;
  if (ctx.scratch && needed <= declared) return static_cast<char*>(ctx.scratch);
  thread_local ThreadBuffer buf;
  if (buf.size < needed) {
    std::free(buf.raw);
    buf.raw = static_cast<char*>(std::aligned_alloc(64, align_up(needed)));
    if (!buf.raw) {
      buf.size = 0;
      throw Error(ErrorKind::kOutOfMemory, "cannot allocate " + std::to_string(needed) + " bytes of scratch");
    }
    buf.size = needed;
  }
  return buf.raw;
}

}  // namespace twinfer::cpu::onednn

namespace twinfer::cpu {
// The planner sizes blocked buffers with this block (ops/channel_block.h).
static const ChannelBlockRegistrar channel_block_reg(Backend::kCPU, onednn::channel_block);
}  // namespace twinfer::cpu
