// RNN, GRU and LSTM on CUDA, with the CPU kernel's semantics (ops/rnn/rnn.cc):
// the node's checks (ops/rnn/rnn_spec.h) and the per-element math, the
// activations and clip (ops/rnn/rnn_math.h), are the CPU kernel's own.
// Every float dtype, computed in the CPU's type (float for float16/bfloat16/
// float32, double for float64), sums in the CPU's order, products rounded
// before the add (no FMA), so only the libm functions (exp, tanh, log1p)
// differ from the CPU's in the last bits.
//
// Two kernels, simple first:
// - rnn_project: the input projections of every step and direction,
//   X_t W^T + Wb (+ Rb, except GRU's h gate), a thread per (direction, step,
//   batch, gate unit), into scratch [dirs, S, N, G*H] in the compute type.
// - rnn_steps: a block per (batch, direction) walks its sequence's steps
//   (sequence_lens read on the device; a length outside [0, S] sets the
//   error flag, kIndexOutOfRange, and the block writes nothing), the hidden
//   (and cell) state in shared memory; per step each thread computes some
//   rows of R h, a barrier, then some hidden units' gates, a barrier. Every
//   barrier sits in a loop whose bound is the same for the whole block.
// Y is zeroed first (steps past a sequence's end stay 0, as on the CPU).
// Refused: hidden sizes whose state does not fit 48 KiB of shared memory.
#include <algorithm>
#include <string>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/rnn/rnn_math.h"
#include "ops/rnn/rnn_spec.h"

namespace twinfer_gpu {

using twinfer::rnn::Act;
using twinfer::rnn::Cell;
using twinfer::rnn::clip_value;
using twinfer::rnn::rnn_mul;

struct RnnArgs {
  Cell cell;
  int dirs;
  bool reverse_only, layout1, has_clip, input_forget, linear_before_reset;
  float clip;
  int64_t S, N, I, H;
  Act acts[6];  // acts_of(cell) per direction
};

// xp[((d * S + t) * N + b) * GH + j] = sum_k x[t, b, k] W[d, j, k] + Wb[d, j] (+ Rb[d, j]).
template <typename T, typename C>
__global__ void rnn_project(RnnArgs a, const T* __restrict__ X, const T* __restrict__ W, const T* __restrict__ B,
                            C* __restrict__ xp) {
  const int64_t GH = twinfer::rnn::gates_of(a.cell) * a.H, SN = a.S * a.N;
  const int64_t total = a.dirs * SN * GH;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t j = i % GH, tb = (i / GH) % SN, d = i / (GH * SN);
    const int64_t t = tb / a.N, b = tb % a.N;
    const T* xr = X + (a.layout1 ? (b * a.S + t) : (t * a.N + b)) * a.I;
    const T* wr = W + (d * GH + j) * a.I;
    C s = 0;
    for (int64_t k = 0; k < a.I; ++k)
      s = s + rnn_mul(C(twinfer::ew::load(xr[k])), C(twinfer::ew::load(wr[k])));
    const C wb = B ? C(twinfer::ew::load(B[d * 2 * GH + j])) : C(0);
    const C rb = B ? C(twinfer::ew::load(B[d * 2 * GH + GH + j])) : C(0);
    const bool rb_later = a.cell == Cell::kGRU && j >= 2 * a.H;
    xp[i] = s + wb + (rb_later ? C(0) : rb);
  }
}

// Shared memory of rnn_steps, in C: h, c, hn, cn [H] each, rh [G*H], g [2*H].
inline int64_t steps_smem_elems(Cell cell, int64_t H) { return 6 * H + twinfer::rnn::gates_of(cell) * H; }

template <typename T, typename C, typename L>
__global__ void rnn_steps(RnnArgs a, const C* __restrict__ xp, const T* __restrict__ R, const T* __restrict__ B,
                          const L* __restrict__ lens, const T* __restrict__ H0, const T* __restrict__ C0,
                          const T* __restrict__ P, T* __restrict__ Y, T* __restrict__ YH, T* __restrict__ YC,
                          int* error) {
  extern __shared__ __align__(16) unsigned char rnn_smem[];
  const int64_t H = a.H, N = a.N, S = a.S, G = twinfer::rnn::gates_of(a.cell), GH = G * H;
  C* h = reinterpret_cast<C*>(rnn_smem);
  C* c = h + H;
  C* hn = c + H;
  C* cn = hn + H;
  C* rh = cn + H;
  C* g = rh + GH;
  const int64_t b = blockIdx.x, d = blockIdx.y;
  const int64_t tid = threadIdx.x, nt = blockDim.x;
  int64_t len = S;
  if (lens) {
    len = static_cast<int64_t>(lens[b]);
    if (len < 0 || len > S) {  // the same for the whole block: no barrier is skipped by some threads only
      if (tid == 0) *error = twinfer::cuda::kIndexOutOfRange;
      return;
    }
  }
  const bool rev = a.reverse_only || d == 1;
  const Act* acts = a.acts + d * twinfer::rnn::acts_of(a.cell);
  const C clip = static_cast<C>(a.clip);
  const int64_t state = a.layout1 ? (b * a.dirs + d) * H : (d * N + b) * H;
  const T* Rd = R + d * GH * H;
  const T* Bd = B ? B + d * 2 * GH : nullptr;
  const T* Pd = P ? P + d * 3 * H : nullptr;
  for (int64_t k = tid; k < H; k += nt) {
    h[k] = H0 ? C(twinfer::ew::load(H0[state + k])) : C(0);
    c[k] = C0 ? C(twinfer::ew::load(C0[state + k])) : C(0);
  }
  __syncthreads();
  for (int64_t step = 0; step < len; ++step) {
    const int64_t t = rev ? len - 1 - step : step;
    const C* x = xp + ((d * S + t) * N + b) * GH;
    // The recurrent products h_prev R^T, every gate row.
    for (int64_t j = tid; j < GH; j += nt) {
      const T* rr = Rd + j * H;
      C s = 0;
      for (int64_t k = 0; k < H; ++k) s = s + rnn_mul(h[k], C(twinfer::ew::load(rr[k])));
      rh[j] = s;
    }
    __syncthreads();
    if (a.cell == Cell::kRNN) {
      for (int64_t k = tid; k < H; k += nt) hn[k] = acts[0](clip_value(a.has_clip, clip, x[k] + rh[k]));
    } else if (a.cell == Cell::kGRU) {
      for (int64_t k = tid; k < H; k += nt) {
        g[k] = acts[0](clip_value(a.has_clip, clip, x[k] + rh[k]));
        g[H + k] = acts[0](clip_value(a.has_clip, clip, x[H + k] + rh[H + k]));
      }
      __syncthreads();
      if (!a.linear_before_reset) {
        // (r . h_prev) R_h^T replaces h_prev R_h^T.
        for (int64_t j = tid; j < H; j += nt) {
          const T* rr = Rd + (2 * H + j) * H;
          C s = 0;
          for (int64_t k = 0; k < H; ++k) s = s + rnn_mul(rnn_mul(g[H + k], h[k]), C(twinfer::ew::load(rr[k])));
          rh[2 * H + j] = s;
        }
      }
      __syncthreads();
      for (int64_t k = tid; k < H; k += nt) {
        const C z = g[k], r = g[H + k];
        const C rbh = Bd ? C(twinfer::ew::load(Bd[GH + 2 * H + k])) : C(0);
        const C pre = a.linear_before_reset ? x[2 * H + k] + rnn_mul(r, rh[2 * H + k] + rbh)
                                            : x[2 * H + k] + rh[2 * H + k] + rbh;
        const C hh = acts[1](clip_value(a.has_clip, clip, pre));
        hn[k] = rnn_mul(C(1) - z, hh) + rnn_mul(z, h[k]);
      }
    } else {
      for (int64_t k = tid; k < H; k += nt) {
        const C pi = Pd ? C(twinfer::ew::load(Pd[k])) : C(0);
        const C po = Pd ? C(twinfer::ew::load(Pd[H + k])) : C(0);
        const C pf = Pd ? C(twinfer::ew::load(Pd[2 * H + k])) : C(0);
        const C ig = acts[0](clip_value(a.has_clip, clip, x[k] + rh[k] + rnn_mul(pi, c[k])));
        const C fg = a.input_forget
                         ? C(1) - ig
                         : acts[0](clip_value(a.has_clip, clip, x[2 * H + k] + rh[2 * H + k] + rnn_mul(pf, c[k])));
        const C cg = acts[1](clip_value(a.has_clip, clip, x[3 * H + k] + rh[3 * H + k]));
        const C cnew = rnn_mul(fg, c[k]) + rnn_mul(ig, cg);
        const C og = acts[0](clip_value(a.has_clip, clip, x[H + k] + rh[H + k] + rnn_mul(po, cnew)));
        cn[k] = cnew;
        hn[k] = rnn_mul(og, acts[2](cnew));
      }
    }
    __syncthreads();
    for (int64_t k = tid; k < H; k += nt) {
      h[k] = hn[k];
      if (a.cell == Cell::kLSTM) c[k] = cn[k];
      if (Y) {
        const int64_t y = a.layout1 ? ((b * S + t) * a.dirs + d) * H : ((t * a.dirs + d) * N + b) * H;
        Y[y + k] = twinfer::ew::store<T>(hn[k]);
      }
    }
    __syncthreads();
  }
  for (int64_t k = tid; k < H; k += nt) {
    if (YH) YH[state + k] = twinfer::ew::store<T>(h[k]);
    if (YC) YC[state + k] = twinfer::ew::store<T>(c[k]);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr int64_t kMaxSmemBytes = 48 * 1024;

int64_t compute_bytes(DType dt) { return dt == DType::kFloat64 ? 8 : 4; }

bool recurrent_supports(const KernelBuildInfo& info, std::string* why) {
  std::string local;
  std::string* w = why ? why : &local;
  if (!info.has_input(0) || !info.has_input(1) || !info.has_input(2)) {
    *w = info.node().op_type + " needs X, W and R";
    return false;
  }
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *w = info.node().op_type + " supports float types, not " + dtype_name(dt);
    return false;
  }
  for (size_t i : {1, 2, 3, 5, 6, 7})
    if (info.has_input(i) && info.input_dtype(i) != dt) {
      *w = info.node().op_type + " input " + std::to_string(i) + " is " + dtype_name(info.input_dtype(i)) +
           ", input 0 is " + dtype_name(dt);
      return false;
    }
  if (info.has_input(4) && info.input_dtype(4) != DType::kInt32 && info.input_dtype(4) != DType::kInt64) {
    *w = std::string("sequence_lens must be int32 or int64, not ") + dtype_name(info.input_dtype(4));
    return false;
  }
  const Shape r = info.input_shape(2);
  if (r.size() == 3) {  // a malformed R fails when the kernel is built, with the CPU kernel's message
    const rnn::Cell cell = rnn::cell_of(info.node().op_type);
    const int64_t need = twinfer_gpu::steps_smem_elems(cell, r[2]) * compute_bytes(dt);
    if (need > kMaxSmemBytes) {
      *w = info.node().op_type + " hidden_size " + std::to_string(r[2]) + " needs " + std::to_string(need) +
           " bytes of shared memory for its state, more than the CUDA kernel's " + std::to_string(kMaxSmemBytes);
      return false;
    }
  }
  return true;
}

class CudaRecurrent final : public Kernel {
 public:
  explicit CudaRecurrent(const KernelBuildInfo& info) : spec_(info), dtype_(info.input_dtype(0)) {
    a_.cell = spec_.cell;
    a_.dirs = spec_.dirs;
    a_.reverse_only = spec_.reverse_only;
    a_.layout1 = spec_.layout == 1;
    a_.has_clip = spec_.has_clip;
    a_.input_forget = spec_.input_forget;
    a_.linear_before_reset = spec_.linear_before_reset;
    a_.clip = spec_.clip;
    a_.S = spec_.S;
    a_.N = spec_.N;
    a_.I = spec_.I;
    a_.H = spec_.H;
    for (size_t i = 0; i < spec_.acts.size() && i < 6; ++i) a_.acts[i] = spec_.acts[i];
    lens_dtype_ = spec_.has_lens ? info.input_dtype(4) : DType::kInt32;
  }

  size_t scratch_bytes() const override {
    return static_cast<size_t>(round_up(proj_elems() * compute_bytes(dtype_), 256));
  }

  void run(KernelContext& ctx) const override {
    const cudaStream_t st = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    if (spec_.out[0] && ctx.outputs[0].data && ctx.outputs[0].bytes())
      check(cudaMemsetAsync(ctx.outputs[0].data, 0, ctx.outputs[0].bytes(), st), "cudaMemsetAsync (RNN Y)");
    if (spec_.N == 0 || spec_.H == 0) return;
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ew::compute_t<T>;
      auto in = [&](size_t i, bool present) -> const T* {
        return present && i < ctx.inputs.size() ? ctx.inputs[i].as<const T>() : nullptr;
      };
      auto out = [&](size_t i) -> T* { return spec_.out[i] ? ctx.outputs[i].as<T>() : nullptr; };
      C* xp = static_cast<C*>(ctx.scratch);
      const ew::LaunchConfig lc = ew::elementwise_launch(proj_elems());
      if (lc.blocks) {
        twinfer_gpu::rnn_project<T, C><<<lc.blocks, lc.threads, 0, st>>>(a_, in(0, true), in(1, true),
                                                                         in(3, spec_.has_b), xp);
        check_launch("RNN input projection launch");
      }
      const int64_t GH = rnn::gates_of(spec_.cell) * spec_.H;
      const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, round_up(GH, 32))));
      const size_t smem = static_cast<size_t>(twinfer_gpu::steps_smem_elems(spec_.cell, spec_.H) * sizeof(C));
      const dim3 grid(static_cast<unsigned>(spec_.N), static_cast<unsigned>(spec_.dirs));
      auto launch = [&](auto* lens) {
        twinfer_gpu::rnn_steps<T, C><<<grid, threads, smem, st>>>(
            a_, xp, in(2, true), in(3, spec_.has_b), lens, in(5, spec_.has_h0), in(6, spec_.has_c0),
            in(7, spec_.has_p), out(0), out(1), out(2), error);
      };
      if (!spec_.has_lens) launch(static_cast<const int32_t*>(nullptr));
      else if (lens_dtype_ == DType::kInt64) launch(ctx.inputs[4].as<const int64_t>());
      else launch(ctx.inputs[4].as<const int32_t>());
      check_launch("RNN steps launch");
    });
  }
  const char* impl_name() const override { return "cuda (projection kernel + a block per batch and direction)"; }

 private:
  int64_t proj_elems() const { return spec_.dirs * spec_.S * spec_.N * rnn::gates_of(spec_.cell) * spec_.H; }

  rnn::RnnSpec spec_;
  DType dtype_;
  DType lens_dtype_ = DType::kInt32;
  twinfer_gpu::RnnArgs a_{};
};

}  // namespace

TWINFER_REGISTER_KERNEL("RNN", Backend::kCUDA, 0, recurrent_supports, make_kernel<CudaRecurrent>);
TWINFER_REGISTER_KERNEL("GRU", Backend::kCUDA, 0, recurrent_supports, make_kernel<CudaRecurrent>);
TWINFER_REGISTER_KERNEL("LSTM", Backend::kCUDA, 0, recurrent_supports, make_kernel<CudaRecurrent>);

}  // namespace twinfer::cuda
