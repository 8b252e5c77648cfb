#include "ops/nn/channels_last.h"

#include "core/error.h"
#include "ops/tensor/strided_copy.h"

namespace twinfer::nn {

void copy_to_channels_last(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads) {
  // out [n, s, c] reads in [n, c, s]
  tensor::strided_copy(tensor::make_strided_plan({n, s, c}, {c * s, 1, s}, 0), es, in, out, threads);
}

void copy_to_channels_first(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads) {
  // out [n, c, s] reads in [n, s, c]
  tensor::strided_copy(tensor::make_strided_plan({n, c, s}, {s * c, 1, c}, 0), es, in, out, threads);
}

namespace {

// Dims of `t` as [N, C, S] (channels first) or [N, S, C] (channels last).
void split(const Tensor& t, bool last, int64_t* n, int64_t* c, int64_t* s) {
  const Shape& d = t.shape();
  if (d.size() < 3) throw Error(ErrorKind::kShape, "a channels-last permutation needs rank >= 3, got " + shape_str(d));
  *n = d[0];
  *c = last ? d.back() : d[1];
  *s = last ? shape_numel(Shape(d.begin() + 1, d.end() - 1)) : shape_numel(Shape(d.begin() + 2, d.end()));
}

}  // namespace

Tensor to_channels_last(const Tensor& t) {
  int64_t n, c, s;
  split(t, false, &n, &c, &s);
  Tensor out = Tensor::empty(t.dtype(), channels_last_shape(t.shape()));
  copy_to_channels_last(t.data(), out.data(), n, c, s, dtype_size(t.dtype()));
  return out;
}

Tensor to_channels_first(const Tensor& t) {
  int64_t n, c, s;
  split(t, true, &n, &c, &s);
  Tensor out = Tensor::empty(t.dtype(), channels_first_shape(t.shape()));
  copy_to_channels_first(t.data(), out.data(), n, c, s, dtype_size(t.dtype()));
  return out;
}

}  // namespace twinfer::nn
