// Shared pieces of the oneDNN-backed CPU kernels.
//
// Threads: oneDNN (GNU OpenMP build) fixes a primitive's thread count when
// the primitive is CREATED (omp_get_max_threads() of the creating thread)
// and spawns exactly that many threads when it runs, whatever the caller's
// setting is then. So a kernel keeps one primitive variant per thread budget
// (ByThreads below), each created on first use under that budget, and every
// run sets the calling thread's OpenMP budget (ThreadScope) so reorders and
// other runtime-sized loops follow ctx.num_threads too. omp_set_num_threads
// is per calling thread, so engines with different budgets on different
// threads do not interfere.
//
// Scratchpads are user-managed (scratchpad_mode::user): a primitive then
// keeps no per-run state and may run from several threads at once.
#pragma once
#include <dnnl.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/shape.h"
#include "ops/kernel.h"
#include "ops/nn/activation.h"

namespace twinfer::cpu::onednn {

// The process-wide CPU engine.
const dnnl::engine& engine();

// float32 -> f32 etc.; only the types our oneDNN kernels use.
bool has_dnnl_type(DType t);
dnnl::memory::data_type dnnl_type(DType t);

dnnl::memory::dims to_dims(const Shape& s);
// Row-major ("abcd...") format tag for a rank.
dnnl::memory::format_tag plain_tag(size_t rank);
inline dnnl::memory::desc plain_desc(const Shape& s, DType t = DType::kFloat32) {
  return dnnl::memory::desc(to_dims(s), dnnl_type(t), plain_tag(s.size()));
}

// An [N, C, spatial...] tensor stored channels-last (nwc / nhwc / ndhwc).
inline dnnl::memory::desc channels_last_desc(const Shape& s, DType t = DType::kFloat32) {
  const auto layout = s.size() == 3   ? dnnl::memory::format_tag::nwc
                      : s.size() == 4 ? dnnl::memory::format_tag::nhwc
                                      : dnnl::memory::format_tag::ndhwc;
  return dnnl::memory::desc(to_dims(s), dnnl_type(t), layout);
}

// Channel block of oneDNN's blocked activation layouts on this CPU (16 with
// AVX-512, else 8); the same number the planner pads channels to (see
// ops/channel_block.h).
int64_t channel_block();
// nCw16c / nChw16c / nCdhw16c (or the 8c forms) for a rank-3..5 tensor.
dnnl::memory::format_tag blocked_tag(size_t rank);
// The blocked layout of an [N, C, spatial...] tensor: channels padded up to
// the block; the padding is part of the buffer (see graph/passes/blocked_layout.h).
inline dnnl::memory::desc blocked_desc(const Shape& s, DType t = DType::kFloat32) {
  return dnnl::memory::desc(to_dims(s), dnnl_type(t), blocked_tag(s.size()));
}

// ThreadScope (core/parallel.h): the calling thread's OpenMP budget for a run.
using twinfer::ThreadScope;

// The calling thread's current OpenMP budget (what a primitive created now would use).
int current_threads();

// Primitive attributes every kernel starts from: user scratchpad.
dnnl::primitive_attr base_attr();
// The oneDNN eltwise algorithm and parameters of a fused activation (not kNone).
struct EltwiseParams {
  dnnl::algorithm alg;
  float alpha, beta;
};
EltwiseParams eltwise_params(const nn::Activation& act);
// Appends the fused activation as an eltwise post-op (no-op for kNone).
void append_activation(dnnl::post_ops& ops, const nn::Activation& act);

// One prepared variant per thread budget. The variant for the budget seen at
// kernel construction is built eagerly (so bad configurations fail at load
// time); others are built on first use under a mutex.
template <typename V>
class ByThreads {
 public:
  template <typename Make>
  const V& get(int threads, Make&& make) const {
    if (first_ && threads == first_threads_) return *first_;
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_) {
      first_threads_ = threads;
      first_ = std::make_unique<V>(make());
      return *first_;
    }
    auto it = more_.find(threads);
    if (it == more_.end()) it = more_.emplace(threads, std::make_unique<V>(make())).first;
    return *it->second;
  }

 private:
  mutable std::mutex mu_;
  // first_ is written once under the mutex during kernel construction,
  // before any concurrent run, and only read after that.
  mutable std::unique_ptr<V> first_;
  mutable int first_threads_ = -1;
  mutable std::map<int, std::unique_ptr<V>> more_;
};

// A kernel's primitive for one thread budget (held by ByThreads): the
// primitive, its constant weights packed for it, its scratchpad (size and a
// byte desc for it) and oneDNN's name for the implementation it chose.
template <typename Prim>
struct PrimitiveVariant {
  Prim prim;
  dnnl::memory weights;
  dnnl::memory::desc pad_md;
  size_t pad_bytes = 0;
  std::string impl;

  // Takes the primitive and what it says about itself from `pd`.
  template <typename PD>
  void adopt(const PD& pd) {
    prim = Prim(pd);
    impl = pd.impl_info_str();
    pad_bytes = (pd.scratchpad_desc().get_size() + 63) / 64 * 64;
    if (pad_bytes)
      pad_md = dnnl::memory::desc({static_cast<int64_t>(pad_bytes)}, dnnl::memory::data_type::u8,
                                  dnnl::memory::format_tag::a);
  }
};

// Constant weights reordered into the layouts a kernel's primitives ask
// for, one copy per distinct layout. The first copy is made from the
// model's plain tensor at construction; later layouts (another thread
// budget may pick another blocking) are reordered from that copy, so the
// plain tensor need not be kept. Not thread-safe by itself: call it from a
// kernel constructor or from inside ByThreads::get's make().
//
// Copies are shared by every kernel that packs the same weights into the
// same layout (init with the weights' `owner`): each plan for a new input
// shape builds its own MatMul kernels (a sentence of another length, a
// decoder's next step), and they used to pack the weights again, costing a
// reorder per weight per new shape and a copy of the weights per cached plan.
class PackedWeights {
 public:
  // Reorders `data` (laid out as `plain`) into `layout` and keeps it. With
  // `owner` (the storage `data` lies in; `data` not modified since, as
  // constants are not), a copy another kernel made of the same bytes in the
  // same layout is shared instead.
  const dnnl::memory& init(const dnnl::memory::desc& plain, const void* data, const dnnl::memory::desc& layout,
                           const std::shared_ptr<const void>& owner = nullptr);
  // The weights in `layout`, reordering from the first copy when new.
  const dnnl::memory& get(const dnnl::memory::desc& layout);
  bool empty() const { return copies_.empty(); }

 private:
  std::vector<std::shared_ptr<const dnnl::memory>> copies_;
};

// Packed copies that kernels share now (PackedWeights::init with an owner):
// how many, and their bytes. For tests.
std::pair<size_t, size_t> shared_packed_copies();

// Scratch memory for one run: the context's scratch when it is large
// enough, else a grow-only buffer of the calling thread (only when a run
// uses a thread budget whose primitives need more than scratch_bytes()).
char* run_scratch(const KernelContext& ctx, size_t declared, size_t needed);

inline size_t align_up(size_t n, size_t a = 64) { return (n + a - 1) / a * a; }

// Runs f(), turning a dnnl::error into a twinfer::Error that names the node.
template <typename F>
auto guarded(const std::string& node, const std::string& op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw Error(ErrorKind::kRuntime, std::string("oneDNN: ") + e.what(), node, op);
  }
}

}  // namespace twinfer::cpu::onednn
