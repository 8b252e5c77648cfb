// Einsum(equation, inputs...): the shape and type rule. The equation's
// grammar is in einsum.h; the CPU kernel (a left-to-right chain of batched
// GEMMs, oneDNN's matmul for float) is backends/cpu/einsum.cc.
#include <string>
#include <vector>

#include "ops/elementwise/typeset.h"
#include "ops/schema.h"
#include "ops/tensor/einsum.h"

namespace twinfer::tensor {
namespace {

void einsum_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kEinsumTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Einsum does not support ") + dtype_name(dt));
  std::vector<size_t> ranks;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!(c.input_dtype(i) == dt)) c.fail(ErrorKind::kDType, "Einsum inputs must have one dtype");
    if (!c.input_has_shape(i)) return c.set_output_rank_unknown(0, dt);
    ranks.push_back(c.input_shape(i).size());
  }
  const EinsumSpec s = parse_einsum(c, einsum_equation(c), ranks);
  std::vector<Dim> dim(s.num_labels, Dim(1));
  std::vector<bool> seen(s.num_labels, false);
  for (size_t k = 0; k < s.in.size(); ++k) {
    const SymShape& sh = c.input_shape(k);
    for (size_t a = 0; a < sh.size(); ++a) {
      const int l = s.in[k][a];
      const Dim& d = sh[a];
      if (!seen[l]) {
        dim[l] = d;
        seen[l] = true;
      } else if (d.known()) {
        if (d.value == 1) continue;
        if (dim[l].known())
          if (!(d.value == dim[l].value || dim[l].value == 1))
            c.fail(ErrorKind::kShape,
                   "dims " + std::to_string(d.value) + " and " + std::to_string(dim[l].value) + " of one label differ");
        dim[l] = d;
      } else if (dim[l].known()) {
        if (dim[l].value == 1) dim[l] = d;
      } else if (!(d == dim[l])) {
        dim[l] = Dim();
      }
    }
  }
  SymShape out;
  for (int l : s.out) out.push_back(dim[l]);
  c.set_output(0, dt, out);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Einsum", einsum_infer);

}  // namespace twinfer::tensor
