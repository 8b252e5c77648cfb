// MatMul (ai.onnx) and fused MatMul (com.twinfer: + bias [N], + residual of
// y's shape as a binary-add post-op, activation) on
// oneDNN matmul, float32. When B has no batch (the Linear-layer case) A's
// batch dims are folded into M, giving one large GEMM against a B packed
// once at construction; otherwise a batched matmul with numpy broadcasting
// of the batch dims (oneDNN broadcasts dims of size 1).
#include <memory>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_matmul.h"
#include "graph/domains.h"
#include "ops/nn/matmul.h"

namespace twinfer::cpu::onednn {
namespace {

class OnednnMatMul final : public Kernel {
 public:
  explicit OnednnMatMul(const KernelBuildInfo& info) {
    nn::MatMulGeom g = nn::matmul_geom(info);
    has_bias_ = g.has_bias;
    if (shape_numel(g.y) == 0) return;
    MatmulDesc d;
    if (shape_numel(g.b_batch) == 1) {
      const int64_t rows = shape_numel(g.a_batch) * g.M;
      d.a = {rows, g.K};
      d.b = {g.K, g.N};
      d.y = {rows, g.N};
    } else {
      d.a = g.a_batch;
      d.a.insert(d.a.end(), {g.M, g.K});
      d.b = g.b_batch;
      d.b.insert(d.b.end(), {g.K, g.N});
      d.y = g.y_batch;
      d.y.insert(d.y.end(), {g.M, g.N});
    }
    const Tensor* bc = info.input_constant(1);
    b_const_ = bc != nullptr;
    d.b_const = bc ? bc->data() : nullptr;
    if (bc) d.b_owner = bc->storage();
    if (g.has_bias) {
      d.bias = Shape(d.y.size(), 1);
      d.bias.back() = g.N;
      const Tensor* biasc = info.input_constant(2);
      d.bias_const = biasc ? biasc->data() : nullptr;
    }
    has_residual_ = g.has_residual;
    if (g.has_residual) d.add = d.y;  // the whole output, read at run time
    d.act = g.act;
    core_ = std::make_unique<MatmulCore>(std::move(d), info.node().name, info.node().op_type);
  }

  size_t scratch_bytes() const override { return core_ ? core_->scratch_bytes() : 0; }
  const char* impl_name() const override { return "onednn matmul"; }

  void run(KernelContext& ctx) const override {
    if (!core_) return;
    core_->run(ctx, ctx.inputs[0].data, b_const_ ? nullptr : ctx.inputs[1].data,
               has_bias_ ? ctx.inputs[2].data : nullptr, has_residual_ ? ctx.inputs[3].data : nullptr,
               ctx.outputs[0].data);
  }

 private:
  bool has_bias_ = false, has_residual_ = false, b_const_ = false;
  std::unique_ptr<MatmulCore> core_;
};

// The same product for any M, K and N (and, with a B without batch, any
// batch dims of A, folded into M): one oneDNN matmul with runtime dims,
// built once, for a node whose sizes change from plan to plan (a decoder's
// Q x K^T and P x V as the past grows; runtime/kernel_cache.h). Creating a
// matmul for each new size cost 70-250 us (brgemm JIT); a run here took
// from 8 us less to 2.3 us more than the fixed-size one (oneDNN's gemm:jit;
// scratch oneDNN test, 12 heads of 64, pasts of 7, 100 and 513, one thread). For a runtime B only (a constant B is
// packed for its sizes), without bias or residual (oneDNN cannot take a
// binary post-op with runtime dims).
class OnednnMatMulAnySize final : public Kernel {
 public:
  static std::unique_ptr<Kernel> create(const KernelBuildInfo& info) {
    nn::MatMulGeom g = nn::matmul_geom(info);
    if (info.input_constant(1) || g.has_bias || g.has_residual || g.a.size() < 2 || g.b.size() < 2) return nullptr;
    auto k = std::unique_ptr<OnednnMatMulAnySize>(new OnednnMatMulAnySize(info, g));
    return k->usable_ ? std::move(k) : nullptr;
  }

  const char* impl_name() const override { return "onednn matmul (any size)"; }

  void run(KernelContext& ctx) const override {
    const Shape& a = ctx.inputs[0].shape;
    const Shape& b = ctx.inputs[1].shape;
    const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
    if (b[b.size() - 2] != K || ctx.outputs[0].numel() == 0) {
      if (b[b.size() - 2] != K)
        throw Error(ErrorKind::kShape, "MatMul inner dims differ: " + shape_str(a) + " x " + shape_str(b), node_,
                    "MatMul");
      return;
    }
    Shape ad, bd, yd;
    if (flat_) {
      const int64_t rows = shape_numel(a) / K;
      ad = {rows, K};
      bd = {K, N};
      yd = {rows, N};
    } else {
      ad = a_batch_, bd = b_batch_, yd = y_batch_;
      ad.insert(ad.end(), {M, K});
      bd.insert(bd.end(), {K, N});
      yd.insert(yd.end(), {M, N});
    }
    guarded(node_, "MatMul", [&] {
      ThreadScope threads(ctx.num_threads);
      const Variant& v = variants_.get(threads.threads(), [&] { return make(); });
      const dnnl::engine& eng = engine();
      dnnl::stream s(eng);
      auto mem = [&](const Shape& dims, const void* p) {
        return dnnl::memory(plain_desc(dims), eng, const_cast<void*>(p));
      };
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem(ad, ctx.inputs[0].data)},
                                                 {DNNL_ARG_WEIGHTS, mem(bd, ctx.inputs[1].data)},
                                                 {DNNL_ARG_DST, mem(yd, ctx.outputs[0].data)}};
      // A variant for another thread budget that wants scratch (the one
      // checked at build did not) gets it here rather than from the arena.
      std::vector<uint8_t> pad(v.pad_bytes);
      if (v.pad_bytes) {
        const dnnl::memory::desc pad_md({static_cast<int64_t>(v.pad_bytes)}, dnnl::memory::data_type::u8,
                                        dnnl::memory::format_tag::a);
        args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(pad_md, eng, pad.data());
      }
      v.prim.execute(s, args);
      s.wait();
    });
  }

 private:
  OnednnMatMulAnySize(const KernelBuildInfo& info, const nn::MatMulGeom& g)
      : node_(info.node().name), act_(g.act) {
    flat_ = shape_numel(g.b_batch) == 1;
    a_batch_ = g.a_batch, b_batch_ = g.b_batch, y_batch_ = g.y_batch;
    guarded(node_, "MatMul", [&] {
      // Scratch would have to be sized per run: not taken (the kernel per size is).
      usable_ = primitive_desc().scratchpad_desc().get_size() == 0;
      if (usable_) variants_.get(current_threads(), [&] { return make(); });
    });
  }

  // Batch dims as built, the matrix dims and all strides but the
  // innermost (1: row-major) at run time: oneDNN's gemm-based matmul.
  dnnl::memory::desc open_desc(const Shape& batch) const {
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    dnnl::memory::dims dims = flat_ ? dnnl::memory::dims{R, R} : to_dims(batch);
    if (!flat_) dims.insert(dims.end(), {R, R});
    dnnl::memory::dims strides(dims.size(), R);
    strides.back() = 1;
    return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
  }

  dnnl::matmul::primitive_desc primitive_desc() const {
    dnnl::primitive_attr attr = base_attr();
    dnnl::post_ops po;
    append_activation(po, act_);
    attr.set_post_ops(po);
    return dnnl::matmul::primitive_desc(engine(), open_desc(a_batch_), open_desc(b_batch_), open_desc(y_batch_), attr);
  }
  struct Variant {
    dnnl::matmul prim;
    size_t pad_bytes = 0;
  };
  Variant make() const {
    const dnnl::matmul::primitive_desc pd = primitive_desc();
    return {dnnl::matmul(pd), pd.scratchpad_desc().get_size()};
  }

  std::string node_;
  nn::Activation act_;
  bool flat_ = false, usable_ = false;
  Shape a_batch_, b_batch_, y_batch_;
  ByThreads<Variant> variants_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      *why = std::string("oneDNN MatMul supports float32 only, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  Shape a = info.input_shape(0), b = info.input_shape(1);
  if (a.empty() || a.back() == 0) {
    *why = "oneDNN MatMul needs K > 0";
    return false;
  }
  if (std::max(a.size(), b.size()) > 12) {
    *why = "oneDNN MatMul supports rank <= 12";
    return false;
  }
  return true;
}

TWINFER_REGISTER_ANY_SIZE_KERNEL("MatMul", Backend::kCPU, 10, supports, make_kernel<OnednnMatMul>,
                                 OnednnMatMulAnySize::create, "");
TWINFER_REGISTER_ANY_SIZE_KERNEL("MatMul", Backend::kCPU, 10, supports, make_kernel<OnednnMatMul>,
                                 OnednnMatMulAnySize::create, kTwinferDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
