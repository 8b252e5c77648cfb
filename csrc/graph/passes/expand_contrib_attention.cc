#include "graph/passes/expand_contrib_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <string>

#include "graph/passes/expand_contrib_util.h"

namespace twinfer::passes {

namespace {

using namespace contrib;

int64_t num_heads(const Node& n) {
  const int64_t heads = n.attr_int("num_heads", 0);
  if (heads <= 0)
    throw Error(ErrorKind::kModelFormat, "com.microsoft::" + n.op_type + " needs a positive num_heads", n.name,
                n.op_type);
  return heads;
}

// The rank of v at load (-1: not told), from upstream_values.
int known_rank(const Graph& g, const std::vector<Node>& built, int64_t opset, int v) {
  const graph::Value val = upstream_values(g, built, opset, {v})[0];
  if (val.is_constant()) return static_cast<int>(val.constant.shape().size());
  return val.has_shape ? static_cast<int>(val.shape.size()) : -1;
}

// What an additive mask is made of, and where the sizes it needs come from.
struct MaskSpec {
  int mask = -1;            // mask_index / key_padding_mask (int32)
  int bias = -1;            // attention_bias, added as it is
  int batch_of = -1;        // a value whose dim 0 is the batch
  int keys_of = -1;         // a value with the new keys' count at axis keys_axis
  int64_t keys_axis = 1;
  int past_of = -1;         // past keys [B, N, P, H], or -1
  float filter = -10000.f;  // mask_filter_value
  DType dtype = DType::kUndefined;  // the mask's float type when known at load
  int like = -1;            // else a value of that type (CastLike)
};

// One float mask broadcasting onto [B, N, S, T]: 0 where a key is kept,
// `filter` where mask_index masks it, plus attention_bias.
int additive_mask(Builder& b, const std::vector<Node>& built, const MaskSpec& m) {
  const Node& n = b.from;
  int add = -1;
  if (m.mask < 0 && m.bias < 0) return -1;
  if (m.mask >= 0) {
    const int rank = known_rank(b.g, built, b.opset, m.mask);
    refuse_if(rank < 0, n,
              "a mask whose rank is not known at load (declare the input's shape; in an If or Loop body, a mask "
              "computed outside it by nodes is not seen)");
    refuse_if(rank == 4, n, "a 4-D (Megatron) mask");
    refuse_if(rank > 4 || rank == 0, n, "a mask of rank " + std::to_string(rank));
    refuse_if(b.opset < 11, n, "a mask in a model of opset " + std::to_string(b.opset) + " (before 11)");
    const int m64 = b.node("Cast", {m.mask}, {b.value("mask_int64")}, {{"to", int_attr(dtype_to_onnx(DType::kInt64))}});
    int keep;
    if (rank == 1) {
      // Key lengths [B], or end positions then start positions [2B]: the
      // starts are read from the mask followed by B zeros, so [B] starts at 0.
      const int zeros = b.node("Mul", {m64, b.scalar_int("zero", 0)}, {b.value("zeros")});
      const int ext = b.node("Concat", {m64, zeros}, {b.value("ends_starts")}, {{"axis", int_attr(0)}});
      const int batch = b.unsqueeze(b.dim(m.batch_of, 0, "batch"), {0}, "batch_1d");
      const int twice = b.node("Mul", {batch, b.scalar_int("two", 2)}, {b.value("twice_batch")});
      const int ends = b.node("Slice", {ext, b.ints("first", {0}), batch}, {b.value("ends")});
      const int starts = b.node("Slice", {ext, batch, twice}, {b.value("starts")});
      int total = b.dim(m.keys_of, m.keys_axis, "keys");
      if (m.past_of >= 0) total = b.node("Add", {total, b.dim(m.past_of, 2, "past_keys")}, {b.value("total_keys")});
      const int pos = b.node("Range", {b.scalar_int("range_start", 0), total, b.scalar_int("range_step", 1)},
                             {b.value("key_positions")});
      const int before_end = b.node("Less", {pos, b.unsqueeze(ends, {1}, "ends_column")}, {b.value("before_end")});
      const int before_start =
          b.node("Less", {pos, b.unsqueeze(starts, {1}, "starts_column")}, {b.value("before_start")});
      const int from_start = b.node("Not", {before_start}, {b.value("from_start")});
      keep = b.node("And", {before_end, from_start}, {b.value("keep")});
    } else {
      keep = b.node("Greater", {m64, b.scalar_int("zero", 0)}, {b.value("keep")});
    }
    // A row with no key kept: onnxruntime adds the filter to every score, a
    // shift softmax ignores. Keeping them all gives its answer exactly, also
    // in 16 bits, where score + filter would round the scores away.
    const int float32 = static_cast<int>(dtype_to_onnx(DType::kFloat32));
    const int bool_type = static_cast<int>(dtype_to_onnx(DType::kBool));
    const int kept = b.node("Cast", {keep}, {b.value("kept_float")}, {{"to", int_attr(float32)}});
    const int any = b.reduce("ReduceMax", kept, {-1}, true, "any_kept");
    const int some = b.node("Cast", {any}, {b.value("some_kept")}, {{"to", int_attr(bool_type)}});
    keep = b.node("Or", {keep, b.node("Not", {some}, {b.value("none_kept")})}, {b.value("keep_or_all")});
    add = b.node("Where", {keep, b.scalar_float("kept", 0.f), b.scalar_float("filter", m.filter)},
                 {b.value("mask_add")});
    add = b.unsqueeze(add, rank == 3 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2}, "mask_4d");
  }
  if (m.bias >= 0) add = add < 0 ? m.bias : b.node("Add", {add, m.bias}, {b.value("mask_and_bias")});
  if (m.mask < 0) return add;  // attention_bias alone keeps its own type
  if (m.dtype != DType::kUndefined && m.dtype != DType::kFloat32)
    return b.node("Cast", {add}, {b.value("mask_typed")}, {{"to", int_attr(dtype_to_onnx(m.dtype))}});
  if (m.dtype == DType::kUndefined && m.like >= 0 && b.opset >= 15)
    return b.node("CastLike", {add, m.like}, {b.value("mask_typed")});
  return add;
}

float mask_filter(const Node& n) { return n.attr_float("mask_filter_value", -10000.f); }

std::map<std::string, Attribute> attention_attrs(const Node& n, int64_t heads, bool in3d) {
  std::map<std::string, Attribute> attrs{{"is_causal", int_attr(n.attr_int("unidirectional", 0) ? 1 : 0)}};
  if (in3d) {
    attrs["q_num_heads"] = int_attr(heads);
    attrs["kv_num_heads"] = int_attr(heads);
  }
  const float scale = n.attr_float("scale", 0.f);
  if (scale != 0.f) attrs["scale"] = float_attr(scale);  // 0: onnxruntime's default, 1/sqrt(head size)
  return attrs;
}

// Drops trailing omitted inputs/outputs.
std::vector<int> trimmed(std::vector<int> v) {
  while (v.size() > 1 && v.back() < 0) v.pop_back();
  return v;
}

// t when it is a float type, else kUndefined (the mask's type is then taken with CastLike).
DType float_or_unknown(DType t) { return dtype_is_float(t) ? t : DType::kUndefined; }

DType known_float_type(const Graph& g, int v) {
  if (v < 0) return DType::kUndefined;
  const graph::Value& val = g.values[v];
  return float_or_unknown(val.is_constant() ? val.constant.dtype() : val.dtype);
}

// com.microsoft::Attention: the projection packed in one weight.
bool expand_attention(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "Attention")) return false;
  refuse_if(n.attr_int("do_rotary", 0) != 0, n, "do_rotary (a rotary embedding inside the op)");
  refuse_if(n.attr_int("past_present_share_buffer", 0) != 0, n, "past_present_share_buffer");
  refuse_if(input(n, 6) >= 0, n, "past_sequence_length");
  const int64_t heads = num_heads(n);
  Builder b(g, n, out, opset);
  const int x = input(n, 0), weights = input(n, 1), past = input(n, 4);
  int qkv = b.node("MatMul", {x, weights}, {b.value("qkv")});
  qkv = b.plus(qkv, input(n, 2), "qkv_biased");
  const int q = b.value("q"), k = b.value("k"), v = b.value("v");
  std::vector<int64_t> sizes = n.attr_ints("qkv_hidden_sizes");
  if (!sizes.empty() && sizes.size() != 3)
    throw Error(ErrorKind::kModelFormat, "qkv_hidden_sizes must have 3 entries", n.name, n.op_type);
  b.split(qkv, 2, sizes, {q, k, v});

  // past [2, B, N, P, H]: keys, then values.
  int past_key = -1, past_value = -1;
  if (past >= 0) {
    past_key = b.node("Gather", {past, b.scalar_int("past_key_index", 0)}, {b.value("past_key")}, {{"axis", int_attr(0)}});
    past_value =
        b.node("Gather", {past, b.scalar_int("past_value_index", 1)}, {b.value("past_value")}, {{"axis", int_attr(0)}});
  }
  const int mask = additive_mask(b, out, {input(n, 3), input(n, 5), x, x, 1, past_key, mask_filter(n),
                                          known_float_type(g, weights), q});
  const int present = output(n, 1);
  const int present_key = present >= 0 ? b.value("present_key") : -1;
  const int present_value = present >= 0 ? b.value("present_value") : -1;
  b.node("Attention", trimmed({q, k, v, mask, past_key, past_value}),
         trimmed({output(n, 0), present_key, present_value}), attention_attrs(n, heads, true));
  if (present >= 0)
    b.node("Concat", {b.unsqueeze(present_key, {0}, "present_key_1"), b.unsqueeze(present_value, {0}, "present_value_1")},
           {present}, {{"axis", int_attr(0)}});
  return true;
}

// [B, S, N*H] -> [B, N, S, H].
int heads_first(Builder& b, int x, int64_t heads, const std::string& what) {
  const int split = b.node("Reshape", {x, b.ints(what + "_heads_shape", {0, 0, heads, -1})}, {b.value(what + "_bsnh")});
  return b.node("Transpose", {split}, {b.value(what + "_bnsh")}, {{"perm", ints_attr({0, 2, 1, 3})}});
}

// Part `index` of a packed [B, S, N, 3 or 2, H] tensor, as [B, N, S, H].
int unpacked(Builder& b, int packed, int64_t index, const std::string& what) {
  const int one = b.node("Slice", {packed, b.ints(what + "_start", {index}), b.ints(what + "_end", {index + 1}),
                                   b.ints(what + "_axis", {3})},
                         {b.value(what + "_slice")});
  const int bsnh = b.node("Squeeze", {one, b.ints(what + "_squeeze_axes", {3})}, {b.value(what + "_bsnh")});
  return b.node("Transpose", {bsnh}, {b.value(what + "_bnsh")}, {{"perm", ints_attr({0, 2, 1, 3})}});
}

// Slice [from_dims * d, to_dims * d) of a 1-D bias, d = the query's last dim
// (known after inference, not always at load); to_dims < 0: to the end.
int bias_part(Builder& b, int bias, int width, int64_t from_dims, int64_t to_dims, const std::string& what) {
  const int start = from_dims == 0 ? b.ints(what + "_start", {0})
                                   : b.node("Mul", {width, b.ints(what + "_from", {from_dims})}, {b.value(what + "_start")});
  const int end = to_dims < 0 ? b.ints(what + "_end", {INT64_MAX})
                              : b.node("Mul", {width, b.ints(what + "_to", {to_dims})}, {b.value(what + "_end")});
  return b.node("Slice", {bias, start, end}, {b.value(what)});
}

// com.microsoft::MultiHeadAttention: projections done outside the op.
bool expand_multi_head_attention(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "MultiHeadAttention")) return false;
  refuse_if(input(n, 8) >= 0, n, "past_sequence_length");
  refuse_if(input(n, 9) >= 0, n, "cache_indirection (beam search)");
  refuse_if(output(n, 3) >= 0, n, "the qk output");
  refuse_if(opset < 13, n, "a model of opset " + std::to_string(opset) + " (before 13)");
  const int64_t heads = num_heads(n);
  Builder b(g, n, out, opset);
  const int query = input(n, 0), key = input(n, 1), value = input(n, 2), bias = input(n, 3);
  const std::vector<graph::Value> seen = upstream_values(g, out, opset, {query, key});
  const auto rank = [](const graph::Value& v) { return v.has_shape ? static_cast<int>(v.shape.size()) : -1; };
  const int qr = rank(seen[0]);
  const int kr = key >= 0 ? rank(seen[1]) : 0;
  refuse_if(qr != 3 && qr != 5, n, "a query whose rank is not known at load, or is not 3 or 5");
  refuse_if(qr == 5 && (key >= 0 || value >= 0), n, "packed QKV together with key or value");
  refuse_if(qr == 3 && (kr < 3 || kr > 5), n, "a key whose rank is not known at load, or is not 3, 4 or 5");
  refuse_if(qr == 3 && kr == 5 && value >= 0, n, "packed KV together with value");
  refuse_if(qr == 3 && kr != 5 && value < 0, n, "a key without a value");
  refuse_if(bias >= 0 && (qr == 5 || kr == 5), n, "a bias on packed QKV or KV");
  const int past_key = input(n, 6), past_value = input(n, 7);
  refuse_if((past_key >= 0) != (past_value >= 0), n, "past_key without past_value, or the reverse");
  refuse_if(past_key >= 0 && (qr != 3 || kr != 3), n, "a past with packed or [B, N, L, H] keys");

  // Operands as 3-D [B, S, D] (in3d) or 4-D [B, N, S, H].
  int q = query, k = key, v = value, keys_of = key;
  int64_t keys_axis = 1;
  bool in3d = qr == 3 && kr == 3;
  if (bias >= 0) {
    const int width = b.node("Slice", {b.node("Shape", {query}, {b.value("query_shape")}), b.ints("last", {-1}),
                                       b.ints("last_end", {INT64_MAX})},
                             {b.value("hidden")});
    q = b.node("Add", {q, bias_part(b, bias, width, 0, 1, "query_bias")}, {b.value("query_biased")});
    if (kr == 3) {
      k = b.node("Add", {k, bias_part(b, bias, width, 1, 2, "key_bias")}, {b.value("key_biased")});
      v = b.node("Add", {v, bias_part(b, bias, width, 2, -1, "value_bias")}, {b.value("value_biased")});
    }
  }
  if (qr == 5) {
    q = unpacked(b, query, 0, "q");
    k = unpacked(b, query, 1, "k");
    v = unpacked(b, query, 2, "v");
    keys_of = query;
  } else if (kr == 5) {
    q = heads_first(b, q, heads, "q");
    k = unpacked(b, key, 0, "k");
    v = unpacked(b, key, 1, "v");
  } else if (kr == 4) {
    q = heads_first(b, q, heads, "q");
    keys_axis = 2;
  }

  const int mask = additive_mask(b, out, {input(n, 4), input(n, 5), query, keys_of, keys_axis, past_key,
                                          mask_filter(n), float_or_unknown(seen[0].dtype), q});
  const int y = in3d ? output(n, 0) : b.value("y_bnsh");
  b.node("Attention", trimmed({q, k, v, mask, past_key, past_value}), trimmed({y, output(n, 1), output(n, 2)}),
         attention_attrs(n, heads, in3d));
  if (!in3d) {
    const int bsnh = b.node("Transpose", {y}, {b.value("y_bsnh")}, {{"perm", ints_attr({0, 2, 1, 3})}});
    b.node("Reshape", {bsnh, b.ints("y_shape", {0, 0, -1})}, {output(n, 0)});
  }
  return true;
}

// com.microsoft::RotaryEmbedding: the ONNX op with its inputs reordered.
bool expand_rotary(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "RotaryEmbedding")) return false;
  refuse_if(n.attr_int("is_packed_batching", 0) != 0, n, "is_packed_batching");
  refuse_if(n.attr_float("scale", 1.f) != 1.f, n, "a scale other than 1");
  refuse_if(opset < 11, n, "a model of opset " + std::to_string(opset) + " (before 11)");
  Builder b(g, n, out, opset);
  const int x = input(n, 0), ids = input(n, 1);
  // position_ids [B, S], or one element: the first position, the others
  // following it. Rank-free: ids + Range(S) * (size == 1), spread to [B, S]
  // (for S == 1 both readings agree).
  const int seq = b.dim(x, -2, "seq");
  const int batch = b.dim(x, 0, "batch");
  const int range = b.node("Range", {b.scalar_int("range_start", 0), seq, b.scalar_int("range_step", 1)},
                           {b.value("positions")});
  const int size = b.node("Size", {ids}, {b.value("ids_size")});
  const int single = b.node("Cast", {b.node("Equal", {size, b.scalar_int("one", 1)}, {b.value("is_offset")})},
                            {b.value("offset_flag")}, {{"to", int_attr(dtype_to_onnx(DType::kInt64))}});
  const int steps = b.node("Mul", {range, single}, {b.value("offset_steps")});
  const int ids64 = b.node("Cast", {ids}, {b.value("ids_int64")}, {{"to", int_attr(dtype_to_onnx(DType::kInt64))}});
  const int sum = b.node("Add", {ids64, steps}, {b.value("ids_plus_steps")});
  const int shape = b.node("Concat", {b.unsqueeze(batch, {0}, "batch_1d"), b.unsqueeze(seq, {0}, "seq_1d")},
                           {b.value("ids_shape")}, {{"axis", int_attr(0)}});
  const int positions = b.node("Expand", {sum, shape}, {b.value("position_ids")});
  std::map<std::string, Attribute> attrs{{"interleaved", int_attr(n.attr_int("interleaved", 0))}};
  int64_t heads = n.attr_int("num_heads", 0);
  if (heads <= 0 && n.attr_int("rotary_embedding_dim", 0) <= 0) {
    // As onnxruntime's optimizer writes it: a 3-D input without num_heads,
    // whose heads are twice the cache's width (the standard op needs the count).
    const std::vector<graph::Value> seen = upstream_values(g, out, opset, {x, input(n, 2)});
    const graph::Value& xv = seen[0];
    const graph::Value& cv = seen[1];
    const SymShape cos_shape = cv.is_constant() ? sym_shape_from(cv.constant.shape()) : cv.shape;
    if (xv.has_shape && xv.shape.size() == 3) {
      refuse_if(!xv.shape[2].known() || (!cv.is_constant() && !cv.has_shape) || cos_shape.size() != 2 ||
                    !cos_shape[1].known() || cos_shape[1].value <= 0 ||
                    xv.shape[2].value % (2 * cos_shape[1].value) != 0,
                n, "a 3-D input without num_heads whose hidden size or cache width is not known at load");
      heads = xv.shape[2].value / (2 * cos_shape[1].value);
    }
  }
  if (heads > 0) attrs["num_heads"] = int_attr(heads);
  if (n.attr_int("rotary_embedding_dim", 0) > 0)
    attrs["rotary_embedding_dim"] = int_attr(n.attr_int("rotary_embedding_dim", 0));
  b.node("RotaryEmbedding", {x, input(n, 2), input(n, 3), positions}, {output(n, 0)}, attrs);
  return true;
}

// com.microsoft::GroupQueryAttention, as onnxruntime-genai's model builder
// writes it: q/k/v [B, S, heads * H] (or packed in q), a KV cache per row of
// the batch, rotary inside the op. Row b's past is its first
// past_len_b = seqlens_k[b] + 1 - S keys (0 on the first prompt: when
// total_sequence_length is S); its new keys go right after, into a present of
// max(total_sequence_length, past buffer) keys; query i of row b sees keys
// j <= past_len_b + i and j <= seqlens_k[b], at rotary position past_len_b + i.
bool expand_group_query_attention(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "GroupQueryAttention")) return false;
  refuse_if(opset < 13, n, "a model of opset " + std::to_string(opset) + " (before 13)");
  refuse_if(n.attr_int("smooth_softmax", 0) != 0, n, "smooth_softmax");
  refuse_if(input(n, 11) >= 0, n, "head_sink");
  refuse_if(input(n, 12) >= 0 || input(n, 13) >= 0, n, "a quantized KV cache (k_scale, v_scale)");
  refuse_if(input(n, 16) >= 0, n, "query_seqlens");
  refuse_if((input(n, 14) >= 0) != (input(n, 15) >= 0), n, "q_norm_weight without k_norm_weight, or the reverse");
  refuse_if(output(n, 3) >= 0 || n.attr_int("qk_output", 0) != 0, n, "the qk output");
  refuse_if(input(n, 5) < 0 || input(n, 6) < 0, n, "no seqlens_k or total_sequence_length");
  const int64_t heads = num_heads(n), kv_heads = n.attr_int("kv_num_heads", 0);
  refuse_if(kv_heads <= 0 || heads % kv_heads != 0, n, "kv_num_heads that does not divide num_heads");
  const bool rotary = n.attr_int("do_rotary", 0) != 0;
  refuse_if(rotary && (input(n, 7) < 0 || input(n, 8) < 0), n, "do_rotary without cos_cache and sin_cache");
  Builder b(g, n, out, opset);
  const int int64 = static_cast<int>(dtype_to_onnx(DType::kInt64));
  const auto to_int64 = [&](int v, const std::string& what) {
    return b.node("Cast", {v}, {b.value(what)}, {{"to", int_attr(int64)}});
  };

  int q = input(n, 0), k = input(n, 1), v = input(n, 2);
  if (k < 0) {
    // Packed: [B, S, (heads + 2 kv_heads) * H].
    refuse_if(v >= 0, n, "a value without a key");
    const graph::Value packed = upstream_values(g, out, opset, {q})[0];
    refuse_if(!packed.has_shape || packed.shape.size() != 3 || !packed.shape[2].known() ||
                  packed.shape[2].value % (heads + 2 * kv_heads) != 0,
              n, "a packed query whose width is not known at load");
    const int64_t head = packed.shape[2].value / (heads + 2 * kv_heads);
    q = b.value("q");
    k = b.value("k");
    v = b.value("v");
    b.split(input(n, 0), 2, {heads * head, kv_heads * head, kv_heads * head}, {q, k, v});
  }
  int q4 = heads_first(b, q, heads, "q"), k4 = heads_first(b, k, kv_heads, "k");
  const int v4 = heads_first(b, v, kv_heads, "v");
  if (input(n, 14) >= 0) {
    // Qwen3's per-head RMS norms of Q and K, before the rotary.
    // q_norm_epsilon / k_norm_epsilon, when given, override qk_norm_epsilon.
    const float shared = n.attr_float("qk_norm_epsilon", 1e-6f);
    const auto norm = [&](const char* eps) {
      return std::map<std::string, Attribute>{{"axis", int_attr(-1)}, {"epsilon", float_attr(n.attr_float(eps, shared))}};
    };
    q4 = b.node("RMSNormalization", {q4, input(n, 14)}, {b.value("q_normed")}, norm("q_norm_epsilon"));
    k4 = b.node("RMSNormalization", {k4, input(n, 15)}, {b.value("k_normed")}, norm("k_norm_epsilon"));
  }

  // Each row's past length and the positions of its new tokens.
  const int seq = b.dim(q, 1, "seq");
  const int total = b.node("Reshape", {to_int64(input(n, 6), "total_int64"), b.ints("scalar", {})},
                           {b.value("total")});
  const int lengths = to_int64(input(n, 5), "seqlens_int64");  // [B]: valid keys - 1
  const int first_prompt = b.node("Equal", {total, seq}, {b.value("first_prompt")});
  const int after_new = b.node("Sub", {b.node("Add", {lengths, b.scalar_int("one", 1)}, {b.value("valid_keys")}), seq},
                               {b.value("past_if_not_first")});
  const int past_len = b.node("Where", {first_prompt, b.scalar_int("no_past", 0), after_new}, {b.value("past_len")});
  const int steps = b.node("Range", {b.scalar_int("range_start", 0), seq, b.scalar_int("range_step", 1)},
                           {b.value("steps")});
  const int positions = b.node("Add", {b.unsqueeze(past_len, {1}, "past_len_column"), steps}, {b.value("positions")});

  if (rotary) {
    int ids = positions;
    if (input(n, 9) >= 0) {
      // Given ids are used as they are, but on the first prompt onnxruntime
      // takes the first one and counts up from it, for every row.
      const int given = to_int64(input(n, 9), "position_ids_int64");
      const int first = b.node("Reshape", {b.node("Slice", {b.node("Reshape", {given, b.ints("flat", {-1})},
                                                                   {b.value("ids_flat")}),
                                                            b.ints("first_start", {0}), b.ints("first_end", {1})},
                                                  {b.value("first_id")}),
                                           b.ints("first_scalar", {})},
                               {b.value("first_id_scalar")});
      const int counted = b.node("Add", {b.node("Mul", {positions, b.scalar_int("zero", 0)}, {b.value("zeros_bs")}),
                                         b.node("Add", {steps, first}, {b.value("from_first")})},
                                 {b.value("prompt_ids")});
      ids = b.node("Where", {first_prompt, counted, given}, {b.value("rotary_ids")});
    }
    std::map<std::string, Attribute> attrs{{"interleaved", int_attr(n.attr_int("rotary_interleaved", 0))}};
    const graph::Value cos = upstream_values(g, out, opset, {input(n, 7)})[0];
    const SymShape cos_shape = cos.is_constant() ? sym_shape_from(cos.constant.shape()) : cos.shape;
    if ((cos.is_constant() || cos.has_shape) && cos_shape.size() == 2 && cos_shape[1].known())
      attrs["rotary_embedding_dim"] = int_attr(2 * cos_shape[1].value);  // a partial rotary (Phi) rotates fewer dims
    q4 = b.node("RotaryEmbedding", {q4, input(n, 7), input(n, 8), ids}, {b.value("q_rotated")}, attrs);
    k4 = b.node("RotaryEmbedding", {k4, input(n, 7), input(n, 8), ids}, {b.value("k_rotated")}, attrs);
  }

  // present: the past padded to max(total, past buffer) keys, the new ones
  // written at each row's positions.
  const int past_key = input(n, 3), past_value = input(n, 4);
  refuse_if((past_key >= 0) != (past_value >= 0), n, "past_key without past_value, or the reverse");
  const int buffer = past_key >= 0 ? b.dim(past_key, 2, "past_buffer") : b.scalar_int("no_buffer", 0);
  const int keys = b.node("Max", {total, buffer}, {b.value("present_keys")});
  const int grow = b.unsqueeze(b.node("Sub", {keys, buffer}, {b.value("grow_by")}), {0}, "grow_by_1d");
  const int pads = b.node("Concat", {b.ints("pads_before", {0, 0, 0, 0, 0, 0}), grow, b.ints("pads_after", {0})},
                          {b.value("pads")}, {{"axis", int_attr(0)}});
  const int where_new = b.node("Expand", {b.node("Reshape", {positions, b.ints("positions_4d", {0, 1, -1, 1})},
                                                 {b.value("positions_bnsh")}),
                                          b.node("Shape", {k4}, {b.value("new_keys_shape")})},
                               {b.value("scatter_indices")});
  const auto present = [&](int past, int fresh, int result, const std::string& what) {
    // No past: an empty slice of the new keys, padded.
    const int from = past >= 0 ? past
                               : b.node("Slice", {fresh, b.ints(what + "_none", {0}), b.ints(what + "_none_end", {0}),
                                                  b.ints(what + "_seq_axis", {2})},
                                        {b.value(what + "_empty")});
    const int padded = b.node("Pad", {from, pads}, {b.value(what + "_padded")});
    return b.node("ScatterElements", {padded, where_new, fresh}, {result >= 0 ? result : b.value(what)},
                  {{"axis", int_attr(2)}});
  };
  const int present_key = present(past_key, k4, output(n, 1), "present_key");
  const int present_value = present(past_value, v4, output(n, 2), "present_value");

  // The keys each query sees.
  const int key_index = b.node("Range", {b.scalar_int("key_start", 0), keys, b.scalar_int("key_step", 1)},
                               {b.value("key_index")});
  const int newest = b.unsqueeze(positions, {2}, "newest_key");            // [B, S, 1]
  const int last_valid = b.unsqueeze(lengths, {1, 2}, "last_valid_key");  // [B, 1, 1]
  int keep = b.node("Not", {b.node("Greater", {key_index, last_valid}, {b.value("invalid")})}, {b.value("valid")});
  if (n.attr_int("causal", 1) != 0)  // 0: every valid key, as a bidirectional encoder attends
    keep = b.node("And", {keep, b.node("Not", {b.node("Greater", {key_index, newest}, {b.value("future")})},
                                       {b.value("past_or_now")})},
                  {b.value("keep")});
  const int64_t window = n.attr_int("local_window_size", -1);
  if (window > 0) {
    const int oldest = b.node("Sub", {newest, b.scalar_int("window", window)}, {b.value("window_start")});
    keep = b.node("And", {keep, b.node("Greater", {key_index, oldest}, {b.value("in_window")})}, {b.value("keep_window")});
  }
  int mask = b.unsqueeze(keep, {1}, "keep_4d");  // [B, 1, S, keys]
  if (input(n, 10) >= 0) {
    // The bias covers total_sequence_length keys; a longer past buffer's
    // extra keys are masked anyway: zeros for them.
    const int bias = input(n, 10);
    const int short_by = b.unsqueeze(b.node("Sub", {keys, b.dim(bias, -1, "bias_keys")}, {b.value("bias_short_by")}),
                                     {0}, "bias_short_by_1d");
    const int bias_pads = b.node("Concat", {b.ints("bias_pads_before", {0, 0, 0, 0, 0, 0, 0}), short_by},
                                 {b.value("bias_pads")}, {{"axis", int_attr(0)}});
    const int padded = b.node("Pad", {bias, bias_pads}, {b.value("bias_padded")});
    const int blocked = b.node("CastLike", {b.scalar_float("blocked", -INFINITY), bias}, {b.value("blocked_typed")});
    mask = b.node("Where", {mask, padded, blocked}, {b.value("mask_and_bias")});
  }

  std::map<std::string, Attribute> attrs;
  const float scale = n.attr_float("scale", 0.f);
  if (scale != 0.f) attrs["scale"] = float_attr(scale);
  const float softcap = n.attr_float("softcap", 0.f);
  if (softcap > 0.f) attrs["softcap"] = float_attr(softcap);
  const int y = b.node("Attention", {q4, present_key, present_value, mask}, {b.value("y_bnsh")}, attrs);
  const int bsnh = b.node("Transpose", {y}, {b.value("y_bsnh")}, {{"perm", ints_attr({0, 2, 1, 3})}});
  b.node("Reshape", {bsnh, b.ints("y_shape", {0, 0, -1})}, {output(n, 0)});
  return true;
}

}  // namespace

bool expand_attention_contrib(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  return expand_attention(g, n, out, opset) || expand_multi_head_attention(g, n, out, opset) ||
         expand_group_query_attention(g, n, out, opset) || expand_rotary(g, n, out, opset);
}

}  // namespace twinfer::passes
