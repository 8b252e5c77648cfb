// The CUTLASS kernel behind scaled_gemm.h, as a template each
// cutlass_gemm_<in>_<out>.cu instantiates for one pair of operand and output
// types (one file each: an instantiation takes ~40 s of nvcc). Compiled for
// sm_90a only (CMakeLists.txt: the twinfer_cutlass object library), with
// NDEBUG: a device assert in the mainloop would serialize its wgmma
// instructions.
//
// Mainloop: x (A, row-major [m, k]) times w (B, column-major, i.e. [n, k]
// rows), both int8 (int32 accumulators) or both E4M3 (float accumulators,
// the FP8 fast-accumulation schedule), tiles of 128 x 128 x 128, clusters of
// 1 x 2, the ping-pong warp-specialized schedule over a persistent grid.
// Epilogue, a tree of CUTLASS's visitor nodes:
//   acc * col_scale[n]                  (a row-vector broadcast over m)
//   row_scale[m] * that + bias[n]       (a column-vector broadcast over n;
//                                        null pointers read 1 and 0)
//   act, [/ y_scale], [saturated],      (Finish below: run-time arguments)
//   converted to y's type
#pragma once
#include <cuda_runtime.h>

#include <new>

#include "backends/cuda/scaled_gemm.h"
#include "core/half.h"
#include "ops/nn/activation_fn.h"
#include "ops/quant/quant_math.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace twinfer::cuda::cutlass_gemm {

namespace fusion = cutlass::epilogue::fusion;
using cute::_0;
using cute::_1;
using cute::_128;
using cute::_2;
using cute::Shape;
using cute::Stride;

// The last step of the epilogue on each float value, written with the
// functions the CPU's int8 and 16-bit kernels run (so the host tests of
// quant_math.h and core/half.h cover it): the layer's activation (the same
// functor), then for int8 y quant::requantize (divided by y_scale, NaN to 0,
// rounded half to even, saturated), for 16-bit y (where asked) the
// saturating conversion (a finite value past the range to the largest
// finite one; infinity and NaN kept). Each returns a float y's type holds
// exactly, so CUTLASS's conversion after it changes nothing. The activation
// and y_scale are run-time arguments, so one kernel per output type serves
// every layer.
template <class ElementD>
struct Finish {
  static constexpr bool kInt8 = cute::is_same_v<ElementD, int8_t>;
  static constexpr bool kHalf = cute::is_same_v<ElementD, cutlass::half_t>;
  static constexpr bool kBf16 = cute::is_same_v<ElementD, cutlass::bfloat16_t>;

  struct Arguments {
    nn::ActFn act;
    float y_scale = 1.f;
    bool saturate = true;  // 16-bit y (the int8 layers' out_dtype); FP8MatMul's y overflows to infinity
  };

  CUTLASS_HOST_DEVICE static float one(float v, Arguments const& a) {
    v = a.act(v);
    if constexpr (kInt8) return static_cast<float>(quant::requantize(v, a.y_scale, -128.f, 127.f, 0));
    if constexpr (kHalf)
      if (a.saturate) return half_to_float(float_to_half_saturate(v));
    if constexpr (kBf16)
      if (a.saturate) return bf16_to_float(float_to_bf16_saturate(v));
    return v;
  }
  // Sm90Compute instantiates it on float (to find Arguments) and calls it on
  // fragments with the arguments after them.
  template <class T>
  struct Fn {
    using Arguments = typename Finish::Arguments;
    CUTLASS_HOST_DEVICE T operator()(T const& v, Arguments const& a) const {
      if constexpr (cute::is_same_v<T, float>) {
        return one(v, a);
      } else {
        T out;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < int(T::kElements); ++i) out[i] = one(v[i], a);
        return out;
      }
    }
  };
};

template <class ElementAB, class ElementD>
struct Kernel {
  static constexpr bool kInt8 = cute::is_same_v<ElementAB, int8_t>;
  using ElementAcc = cute::conditional_t<kInt8, int32_t, float>;
  using Schedule = cute::conditional_t<kInt8, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                       cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>;
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr int kAlignAB = 16;                      // 8-bit operands: 16 bytes
  static constexpr int kAlignD = 16 / int(sizeof(ElementD));

  using RowScale = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>>;  // [m]
  using ColScale = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;  // [n]
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;      // [n]
  using AccTimesCol = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, ColScale,
                                      fusion::Sm90AccFetch>;
  template <class Out>
  using Affine = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Out, float, kRound>, RowScale,
                                 AccTimesCol, Bias>;
  using Last = Finish<ElementD>;
  using Epilogue = fusion::Sm90EVT<fusion::Sm90Compute<Last::template Fn, ElementD, float, kRound>, Affine<float>>;

  using LayoutD = cutlass::layout::RowMajor;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, cutlass::epilogue::TmaWarpSpecialized, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, cutlass::layout::RowMajor, kAlignAB, ElementAB,
      cutlass::layout::ColumnMajor, kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const ScaledGemmShape& s, const ScaledGemmOperands& o, int sm_count) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
    typename Gemm::Arguments a{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {static_cast<const ElementAB*>(o.x), cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(m, k, 1)),
         static_cast<const ElementAB*>(o.w), cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(n, k, 1))},
        {{}, nullptr, {}, static_cast<ElementD*>(o.y),
         cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(m, n, 1))}};
    // The tree's arguments nest as its nodes do: {children..., op}.
    typename Affine<float>::Arguments affine{
        {o.row_scale, 1.f, {}},                  // row_scale[m], 1 without one
        {{o.col_scale, 0.f, {}}, {}, {}},        // acc * col_scale[n]
        {o.bias, 0.f, {}},                       // bias[n], 0 without one
        {}};
    a.epilogue.thread = {affine, typename Last::Arguments{s.act, s.y_scale, s.saturate}};
    a.hw_info.device_id = 0;  // unused once sm_count is given
    a.hw_info.sm_count = sm_count;
    return a;
  }

  static int prepare() {
    constexpr int smem = GemmKernel::SharedStorageSize;
    if (smem < (48 << 10)) return 0;
    return cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem) == cudaSuccess
               ? 0
               : -1;
  }

  static size_t workspace(const ScaledGemmShape& s, int sm_count) {
    return Gemm::get_workspace_size(arguments(s, ScaledGemmOperands{}, sm_count));
  }

  using Params = typename GemmKernel::Params;

  // The launch parameters (TMA descriptors included) for these operands,
  // built into `out` (params_size bytes, params_align aligned): the caller
  // keeps them while the operands stay where they are (a plan's arena),
  // so a run does not encode the descriptors again.
  static int make_params(const ScaledGemmShape& s, const ScaledGemmOperands& o, int sm_count, void* workspace,
                         cudaStream_t stream, void* out) {
    const typename Gemm::Arguments a = arguments(s, o, sm_count);
    cutlass::Status st = Gemm::can_implement(a);
    if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
    st = GemmKernel::initialize_workspace(a, workspace, stream);
    if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
    new (out) Params(GemmKernel::to_underlying_arguments(a, workspace));
    return 0;
  }

  // One launch with parameters make_params built (the adapter's static run:
  // no shared adapter state between threads).
  static int launch(void* params, cudaStream_t stream) {
    return static_cast<int>(Gemm::run(*static_cast<Params*>(params), stream));
  }

  static ScaledGemmKernel entry(DType in, DType out, const char* name) {
    return ScaledGemmKernel{in,      out,       name,         sizeof(Params), alignof(Params),
                            &prepare, &workspace, &make_params, &launch};
  }
};

}  // namespace twinfer::cuda::cutlass_gemm
