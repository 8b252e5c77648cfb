#include "graph/passes/expand_contrib_nbits.h"

#include <string>

#include "graph/passes/expand_contrib_util.h"

namespace twinfer::passes {

namespace {

using namespace contrib;

float scalar_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data_as<float>()[i];
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(t.data())[i]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(t.data())[i]);
    default: return 0.f;
  }
}

// Value `index` of a row of `bits`-wide unsigned fields packed lowest bits
// first (B's blobs, packed zero points).
int packed_at(const uint8_t* row, int64_t index, int64_t bits) {
  const int64_t bit = index * bits;
  return (row[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
}

}  // namespace

bool expand_matmul_nbits(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "MatMulNBits")) return false;
  const int64_t K = n.attr_int("K", 0), N = n.attr_int("N", 0), bits = n.attr_int("bits", 4),
                block = n.attr_int("block_size", 0);
  if (K <= 0 || N <= 0 || block <= 0)
    throw Error(ErrorKind::kModelFormat, "MatMulNBits needs positive K, N and block_size", n.name, n.op_type);
  refuse_if(bits != 2 && bits != 4 && bits != 8, n, "bits=" + std::to_string(bits) + " (2, 4 and 8 are)");
  refuse_if(input(n, 4) >= 0, n, "g_idx (act-order)");
  refuse_if(n.attr_int("weight_prepacked", 0) != 0, n, "weight_prepacked (a CUDA kernel's own layout)");
  // Constants of this graph, or of an enclosing one (a merged decoder's If
  // branches read the weights from outside).
  const std::vector<graph::Value> seen = upstream_values(g, out, opset, {input(n, 1), input(n, 2), input(n, 3)});
  const auto constant_of = [&](int i) { return seen[i].is_constant() ? &seen[i].constant : nullptr; };
  const Tensor* q = constant_of(0);
  const Tensor* scales = constant_of(1);
  const Tensor* zeros = constant_of(2);
  refuse_if(!q || !scales || (input(n, 3) >= 0 && !zeros), n, "a weight, scale or zero point that is not a constant");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const DType type = scales->dtype();
  refuse_if(type != DType::kFloat32 && type != DType::kFloat16 && type != DType::kBFloat16, n,
            std::string(dtype_name(type)) + " scales");
  if (q->dtype() != DType::kUInt8 || q->numel() != N * blocks * blob || scales->numel() != N * blocks)
    throw Error(ErrorKind::kModelFormat,
                "MatMulNBits weight or scales do not fit K=" + std::to_string(K) + ", N=" + std::to_string(N) +
                    ", block_size=" + std::to_string(block) + ", bits=" + std::to_string(bits),
                n.name, n.op_type);
  const bool packed_zeros = zeros && zeros->dtype() == DType::kUInt8;
  const int64_t zero_row = (blocks * bits + 7) / 8;
  if (zeros && (packed_zeros ? zeros->numel() != N * zero_row : zeros->dtype() != type || zeros->numel() != N * blocks))
    throw Error(ErrorKind::kModelFormat, "MatMulNBits zero points do not fit the scales", n.name, n.op_type);

  // W [K, N] in the scales' type, dequantized in float.
  Tensor w = Tensor::empty(type, {K, N});
  const uint8_t* qb = static_cast<const uint8_t*>(q->data());
  const int default_zero = 1 << (bits - 1);
  for (int64_t col = 0; col < N; ++col)
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const float scale = scalar_at(*scales, col * blocks + kb);
      const float zero = !zeros ? static_cast<float>(default_zero)
                         : packed_zeros
                             ? static_cast<float>(packed_at(static_cast<const uint8_t*>(zeros->data()) + col * zero_row, kb, bits))
                             : scalar_at(*zeros, col * blocks + kb);
      const uint8_t* blob_row = qb + (col * blocks + kb) * blob;
      for (int64_t i = 0; i < block && kb * block + i < K; ++i) {
        const float v = (static_cast<float>(packed_at(blob_row, i, bits)) - zero) * scale;
        const int64_t at = (kb * block + i) * N + col;
        if (type == DType::kFloat32) w.data_as<float>()[at] = v;
        else static_cast<uint16_t*>(w.data())[at] = type == DType::kFloat16 ? float_to_half(v) : float_to_bf16(v);
      }
    }
  Builder b(g, n, out);
  const int weight = add_constant(g, g.values[input(n, 1)].name + "/dequantized", std::move(w));
  const int bias = input(n, 5);
  const int product = b.node("MatMul", {input(n, 0), weight}, {bias < 0 ? output(n, 0) : b.value("product")});
  if (bias >= 0) b.node("Add", {product, bias}, {output(n, 0)});
  return true;
}

}  // namespace twinfer::passes
