#include "backends/cpu/onednn_qgemm.h"

#include "core/parallel.h"
#include "core/simd_clones.h"

#include <algorithm>
#include <unordered_map>

namespace twinfer::quant {

namespace onednn = cpu::onednn;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// Flat batch index of an operand for each flat batch index of Y (broadcast).
std::vector<int64_t> batch_map(const Shape& op, const Shape& y) {
  const size_t nb = y.size() - 2;
  int64_t count = 1;
  for (size_t d = 0; d < nb; ++d) count *= y[d];
  std::vector<int64_t> map(static_cast<size_t>(count));
  std::vector<int64_t> idx(nb, 0);
  for (int64_t t = 0; t < count; ++t) {
    int64_t off = 0;
    for (size_t d = 0; d < nb; ++d) off = off * op[d] + (op[d] == 1 ? 0 : idx[d]);
    map[t] = off;
    for (int d = static_cast<int>(nb) - 1; d >= 0; --d) {
      if (++idx[d] < y[d]) break;
      idx[d] = 0;
    }
  }
  return map;
}

// Column sums of B [batches, k, n] as int8, into out [batches, n]: blocks of
// columns across the threads (a conv's im2col B has n = H*W columns).
void column_sums(const int8_t* b, int64_t batches, int64_t k, int64_t n, int32_t* out, int num_threads) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(batches * blocks, num_threads, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k * kBlock)),
               [&](int64_t lo, int64_t hi) {
    for (int64_t w = lo; w < hi; ++w) {
      const int64_t t = w / blocks, j0 = (w % blocks) * kBlock, j1 = std::min(n, j0 + kBlock);
      int32_t* c = out + t * n;
      std::fill(c + j0, c + j1, 0);
      const int8_t* bb = b + t * k * n;
      for (int64_t r = 0; r < k; ++r)
        for (int64_t j = j0; j < j1; ++j) c[j] += bb[r * n + j];
    }
  });
}

// Sum of one row of A (uint8 or int8).
TWINFER_SIMD_CLONES int32_t row_sum(const void* a, bool a_u8, int64_t row, int64_t k) {
  int32_t acc = 0;
  if (a_u8) {
    const uint8_t* r = static_cast<const uint8_t*>(a) + row * k;
    for (int64_t q = 0; q < k; ++q) acc += r[q];
  } else {
    const int8_t* r = static_cast<const int8_t*>(a) + row * k;
    for (int64_t q = 0; q < k; ++q) acc += r[q];
  }
  return acc;
}

// One row of Y minus its zero point correction, zb[j] * rs + za * cc[j]
// (zbv or cc null: that term is zero).
TWINFER_SIMD_CLONES void correct_row(uint32_t* __restrict y, const uint32_t* __restrict zbv, uint32_t rs,
                                     uint32_t za, const uint32_t* __restrict cc, int64_t n) {
  if (zbv && cc) {
    for (int64_t j = 0; j < n; ++j) y[j] -= zbv[j] * rs + za * cc[j];
  } else if (zbv) {
    for (int64_t j = 0; j < n; ++j) y[j] -= zbv[j] * rs;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] -= za * cc[j];
  }
}

void shift_to_s8(const uint8_t* src, int8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int8_t>(src[i] ^ 0x80u);
}

}  // namespace

bool matmul_operand_shapes(const Shape& a0, const Shape& b0, Shape* a, Shape* b, Shape* y_onnx, std::string* why) {
  if (a0.empty() || b0.empty()) {
    *why = "MatMul operands must have rank >= 1";
    return false;
  }
  *a = a0;
  *b = b0;
  if (a->size() == 1) a->insert(a->begin(), 1);
  if (b->size() == 1) b->push_back(1);
  const size_t rank = std::max(a->size(), b->size());
  while (a->size() < rank) a->insert(a->begin(), 1);
  while (b->size() < rank) b->insert(b->begin(), 1);
  if ((*a)[rank - 1] != (*b)[rank - 2]) {
    *why = "inner dimensions differ: A " + shape_str(a0) + ", B " + shape_str(b0);
    return false;
  }
  Shape y(rank);
  for (size_t d = 0; d + 2 < rank; ++d) {
    const int64_t x = (*a)[d], z = (*b)[d];
    if (x != z && x != 1 && z != 1) {
      *why = "batch dimensions do not broadcast: A " + shape_str(a0) + ", B " + shape_str(b0);
      return false;
    }
    y[d] = x == 1 ? z : x;
  }
  y[rank - 2] = (*a)[rank - 2];
  y[rank - 1] = (*b)[rank - 1];
  // The ONNX output drops the dims 1-D operands gained.
  *y_onnx = Shape(y.begin(), y.end() - 2);
  if (a0.size() > 1) y_onnx->push_back(y[rank - 2]);
  if (b0.size() > 1) y_onnx->push_back(y[rank - 1]);
  return true;
}

QGemm::QGemm(const QGemmDesc& d, std::string node, std::string op)
    : d_(d), node_(std::move(node)), op_(std::move(op)) {
  const size_t rank = d_.a.size();
  y_ = Shape(rank);
  for (size_t i = 0; i + 2 < rank; ++i) y_[i] = d_.a[i] == 1 ? d_.b[i] : d_.a[i];
  m_ = d_.a[rank - 2];
  k_ = d_.a[rank - 1];
  n_ = d_.b[rank - 1];
  y_[rank - 2] = m_;
  y_[rank - 1] = n_;
  for (size_t i = 0; i + 2 < rank; ++i) {
    a_batches_ *= d_.a[i];
    b_batches_ *= d_.b[i];
    y_batches_ *= y_[i];
  }
  a_of_y_ = batch_map(d_.a, y_);
  b_of_y_ = batch_map(d_.b, y_);
  b_shift_ = d_.b_type == DType::kUInt8;
  const int64_t b_numel = shape_numel(d_.b);
  if (d_.b_const) {
    b8_.resize(static_cast<size_t>(b_numel));
    if (b_shift_)
      shift_to_s8(static_cast<const uint8_t*>(d_.b_const), b8_.data(), b_numel);
    else
      std::copy_n(static_cast<const int8_t*>(d_.b_const), b_numel, b8_.data());
    b_colsum_.resize(static_cast<size_t>(b_batches_ * n_));
    column_sums(b8_.data(), b_batches_, k_, n_, b_colsum_.data(), 1);
  }
  onednn::guarded(node_, op_, [&] {
    a_md_ = dnnl::memory::desc(onednn::to_dims(d_.a), onednn::dnnl_type(d_.a_type), onednn::plain_tag(rank));
    b_md_ = dnnl::memory::desc(onednn::to_dims(d_.b), dt::s8, onednn::plain_tag(rank));
    y_md_ = dnnl::memory::desc(onednn::to_dims(y_), dt::s32, onednn::plain_tag(rank));
    const Variant& v = variants_.get(onednn::current_threads(), [&] { return make_variant(); });
    pad_declared_ = v.pad_bytes;
  });
  if (d_.b_const) {  // packed now; other thread budgets reorder from the packed copy
    b_packed_ = true;
    b8_ = {};
  }
  size_t off = onednn::align_up(pad_declared_);
  b8_off_ = off;
  if (!d_.b_const && b_shift_) off += onednn::align_up(static_cast<size_t>(b_numel));
  zb_off_ = off;
  off += onednn::align_up(static_cast<size_t>(n_) * sizeof(int32_t));
  cols_off_ = off;
  off += onednn::align_up(static_cast<size_t>(b_batches_ * n_) * sizeof(int32_t));
  scratch_ = off;
}

QGemm::Variant QGemm::make_variant() const {
  Variant v;
  const bool pack = d_.b_const != nullptr;
  dnnl::memory::desc w_md = pack ? dnnl::memory::desc(b_md_.get_dims(), dt::s8, tag::any) : b_md_;
  dnnl::matmul::primitive_desc pd(onednn::engine(), a_md_, w_md, y_md_, onednn::base_attr());
  v.prim = dnnl::matmul(pd);
  if (pack) v.weights = packed_.empty() ? packed_.init(b_md_, b8_.data(), pd.weights_desc()) : packed_.get(pd.weights_desc());
  v.pad_bytes = onednn::align_up(pd.scratchpad_desc().get_size());
  if (v.pad_bytes) v.pad_md = dnnl::memory::desc({static_cast<int64_t>(v.pad_bytes)}, dt::u8, tag::a);
  return v;
}

void QGemm::run(const KernelContext& ctx, const void* a, const void* b, const int32_t* za, bool za_per_row,
                const int32_t* zb, bool zb_per_col, int32_t* y) const {
  char* scratch = static_cast<char*>(ctx.scratch);
  // B as int8.
  const int8_t* b8 = static_cast<const int8_t*>(b);
  if (!d_.b_const && b_shift_) {
    int8_t* buf = reinterpret_cast<int8_t*>(scratch + b8_off_);
    shift_to_s8(static_cast<const uint8_t*>(b), buf, shape_numel(d_.b));
    b8 = buf;
  }
  onednn::guarded(node_, op_, [&] {
    onednn::ThreadScope threads(ctx.num_threads);
    const Variant& v = variants_.get(threads.threads(), [&] { return make_variant(); });
    const dnnl::engine& eng = onednn::engine();
    dnnl::stream s(eng);
    auto mem = [&](const dnnl::memory::desc& md, const void* p) {
      return dnnl::memory(md, eng, const_cast<void*>(p));
    };
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, mem(a_md_, a)}, {DNNL_ARG_DST, mem(y_md_, y)}};
    args[DNNL_ARG_WEIGHTS] = b_packed_ ? v.weights : mem(b_md_, b8);
    if (v.pad_bytes) {
      char* pad = v.pad_bytes <= pad_declared_ ? scratch : onednn::run_scratch(ctx, 0, v.pad_bytes);
      args[DNNL_ARG_SCRATCHPAD] = mem(v.pad_md, pad);
    }
    v.prim.execute(s, args);
    s.wait();
  });

  // Zero point corrections (uint32 arithmetic: wraps like the int32 reference).
  const int32_t shift = b_shift_ ? 128 : 0;
  auto zb_at = [&](int64_t j) -> uint32_t {
    return static_cast<uint32_t>((zb ? zb[zb_per_col ? j : 0] : 0) - shift);
  };
  auto za_at = [&](int64_t i) -> uint32_t { return static_cast<uint32_t>(za ? za[za_per_row ? i : 0] : 0); };
  bool any_zb = false, any_za = false;
  for (int64_t j = 0; j < (zb_per_col ? n_ : 1) && !any_zb; ++j) any_zb = zb_at(j) != 0;
  for (int64_t i = 0; i < (za_per_row ? m_ : 1) && !any_za; ++i) any_za = za_at(i) != 0;
  if (!any_za && !any_zb) return;

  // With rs = rowsum(A)[i] and cs = colsum(B)[j], the correction of each
  // element is zb[j] * rs + za[i] * (cs[j] - K * zb[j]): two column vectors
  // (zbv, ccol) and two row scalars, so the inner loop vectorises.
  const uint32_t kk = static_cast<uint32_t>(k_);
  uint32_t* zbv = reinterpret_cast<uint32_t*>(scratch + zb_off_);
  for (int64_t j = 0; j < n_; ++j) zbv[j] = zb_at(j);
  const uint32_t* ccol = nullptr;  // cs[j] - K * zb[j] per batch of B
  if (any_za) {
    uint32_t* c = reinterpret_cast<uint32_t*>(scratch + cols_off_);
    if (d_.b_const) {
      std::copy_n(reinterpret_cast<const uint32_t*>(b_colsum_.data()), b_batches_ * n_, c);
    } else {
      column_sums(b8, b_batches_, k_, n_, reinterpret_cast<int32_t*>(c), ctx.num_threads);
    }
    for (int64_t t = 0; t < b_batches_; ++t)
      for (int64_t j = 0; j < n_; ++j) c[t * n_ + j] -= kk * zbv[j];
    ccol = c;
  }
  const bool a_u8 = onednn::dnnl_type(d_.a_type) == dt::u8;
  parallel_for(y_batches_ * m_, ctx.num_threads, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, n_ + k_)),
               [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = r / m_, i = r % m_;
      uint32_t* yr = reinterpret_cast<uint32_t*>(y + r * n_);
      const uint32_t rs = any_zb ? static_cast<uint32_t>(row_sum(a, a_u8, a_of_y_[t] * m_ + i, k_)) : 0;
      correct_row(yr, any_zb ? zbv : nullptr, rs, za_at(i), any_za ? ccol + b_of_y_[t] * n_ : nullptr, n_);
    }
  });
}

}  // namespace twinfer::quant
