// TfIdfVectorizer (opset 9) for integer token ids (pool_int64s; string pools
// are not supported: twinfer computes on no string tensor). Input [C] or
// [B, C] -> float [out] or [B, out] with out = max(ngram_indexes) + 1.
// For each skip distance d in 1..max_skip_count+1 and each start position,
// the n-grams x[s], x[s+d], ..., n in [min_gram_length, max_gram_length],
// found in the pool are counted (unigrams once, not per skip distance) at
// ngram_indexes[their position in the pool]. mode TF: the counts; IDF: the
// weight (or 1) where a count is > 0; TFIDF: weight * count (or the count).
#include <map>

#include "ops/tensor/tensor_util.h"

namespace twinfer::signal {
namespace {

struct TfIdfSpec {
  std::map<std::vector<int64_t>, int64_t> grams;  // n-gram -> output index
  int64_t out_size = 0, min_n = 1, max_n = 1, max_skip = 0;
  int mode = 0;  // 0 TF, 1 IDF, 2 TFIDF
  std::vector<float> weights;
};

template <typename Ctx>
TfIdfSpec tfidf_spec(const Ctx& c) {
  const graph::Node& n = c.node();
  TfIdfSpec s;
  const std::string mode = n.attr_string("mode", "");
  if (mode == "TF") s.mode = 0;
  else if (mode == "IDF") s.mode = 1;
  else if (mode == "TFIDF") s.mode = 2;
  else c.fail(ErrorKind::kInvalidArgument, "mode must be TF, IDF or TFIDF, got '" + mode + "'");
  if (n.has_attr("pool_strings"))
    c.fail(ErrorKind::kUnsupportedOp, "pool_strings (string tokens) is not supported; use pool_int64s");
  const std::vector<int64_t> pool = n.attr_ints("pool_int64s");
  const std::vector<int64_t> counts = n.attr_ints("ngram_counts");
  const std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
  s.weights = n.attr_floats("weights");
  s.min_n = n.attr_int("min_gram_length", 1);
  s.max_n = n.attr_int("max_gram_length", 1);
  s.max_skip = n.attr_int("max_skip_count", 0);
  if (s.min_n < 1 || s.max_n < s.min_n || s.max_skip < 0)
    c.fail(ErrorKind::kInvalidArgument, "needs 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  if (indexes.empty()) c.fail(ErrorKind::kInvalidArgument, "ngram_indexes is empty");
  for (int64_t v : indexes) {
    if (v < 0) c.fail(ErrorKind::kInvalidArgument, "ngram_indexes has a negative entry");
    s.out_size = std::max(s.out_size, v + 1);
  }
  if (!s.weights.empty() && static_cast<int64_t>(s.weights.size()) < s.out_size)
    c.fail(ErrorKind::kInvalidArgument, "weights must have one entry per output");
  const int64_t total = static_cast<int64_t>(pool.size());
  int64_t id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = static_cast<int64_t>(i) + 1;
    const int64_t b = counts[i], e = i + 1 < counts.size() ? counts[i + 1] : total;
    if (b < 0 || e > total || e < b) c.fail(ErrorKind::kInvalidArgument, "ngram_counts do not fit the pool");
    const int64_t ngrams = (e - b) / size;
    for (int64_t g = 0; g < ngrams; ++g, ++id) {
      if (size < s.min_n || size > s.max_n) continue;
      if (id >= static_cast<int64_t>(indexes.size()))
        c.fail(ErrorKind::kInvalidArgument, "ngram_indexes has fewer entries than the pool has n-grams");
      s.grams[std::vector<int64_t>(pool.begin() + b + g * size, pool.begin() + b + (g + 1) * size)] = indexes[id];
    }
  }
  return s;
}

void tfidf_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dt == DType::kInt32 || dt == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("TfIdfVectorizer supports int32/int64 tokens, got ") + dtype_name(dt));
  const TfIdfSpec s = tfidf_spec(c);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, DType::kFloat32);
  const SymShape& x = c.input_shape(0);
  if (!(x.size() == 1 || x.size() == 2))
    c.fail(ErrorKind::kShape, "input " + sym_shape_str(x) + " must be [C] or [B, C]");
  if (x.size() == 1) return c.set_output(0, DType::kFloat32, SymShape{Dim(s.out_size)});
  c.set_output(0, DType::kFloat32, SymShape{x[0], Dim(s.out_size)});
}

class TfIdfKernel final : public Kernel {
 public:
  explicit TfIdfKernel(const KernelBuildInfo& info) : s_(tfidf_spec(info)) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const std::vector<int64_t> tok = tensor::view_ints(x);
    const int64_t rows = x.rank() == 2 ? x.shape[0] : 1, cols = x.rank() == 2 ? x.shape[1] : x.numel();
    float* y = ctx.outputs[0].as<float>();
    std::vector<int64_t> freq(static_cast<size_t>(rows * s_.out_size), 0);
    std::vector<int64_t> gram;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t* row = tok.data() + r * cols;
      int64_t* f = freq.data() + r * s_.out_size;
      // A distance of cols or more fits no gram of two (max_skip_count may
      // be INT64_MAX: max_skip + 1 wrapped, and the loop never ended).
      const int64_t last_d = std::min<int64_t>(s_.max_skip, std::max<int64_t>(cols - 1, 0)) + 1;
      for (int64_t d = 1; d <= last_d; ++d) {
        const int64_t start_n = d == 1 ? s_.min_n : std::max<int64_t>(s_.min_n, 2);
        if (start_n > s_.max_n) break;
        for (int64_t st = 0; st < cols; ++st) {
          gram.clear();
          for (int64_t n = 1; n <= s_.max_n; ++n) {
            const int64_t pos = st + (n - 1) * d;
            if (pos >= cols) break;
            gram.push_back(row[pos]);
            if (n < start_n) continue;
            auto it = s_.grams.find(gram);
            if (it != s_.grams.end()) ++f[it->second];
          }
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < s_.out_size; ++i) {
        const int64_t c = freq[r * s_.out_size + i];
        const float w = s_.weights.empty() ? 1.f : s_.weights[i];
        float v = static_cast<float>(c);
        if (s_.mode == 1) v = c > 0 ? w : 0.f;
        else if (s_.mode == 2) v = w * static_cast<float>(c);
        y[r * s_.out_size + i] = v;
      }
  }

 private:
  TfIdfSpec s_;
};

bool tfidf_supports(const KernelBuildInfo& info, std::string* why) { return tensor::check_index_dtype(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("TfIdfVectorizer", tfidf_infer);
TWINFER_REGISTER_KERNEL("TfIdfVectorizer", Backend::kCPU, 0, tfidf_supports, make_kernel<TfIdfKernel>);

}  // namespace twinfer::signal
