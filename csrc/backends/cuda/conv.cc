// Conv and the fused com.twinfer Conv on cuDNN (NCHW, 1-3 spatial dims,
// grouped and dilated; unequal pads through a padded copy of x,
// conv_input_pad.h), and the channels-last
// com.twinfer.nhwc Conv (x, residual, y NHWC; its weights KRSC in the graph,
// the filter layout cuDNN's NHWC engines take, so the plan's copy is the one
// it reads), chosen when the plan is built:
// first cuDNN's graph API (conv_graph.h: its mode-A heuristics, as
// PyTorch's), else the legacy descriptor API (cuDNN's v7 heuristic, within
// a workspace limit). A run enqueues the convolution and, for bias /
// residual / activation, one pass of our own (conv_epilogue.cu); a
// channels-last conv first asks for a graph with that epilogue inside
// (cuDNN's runtime fusion: y written once), and falls back to that pass. float32
// uses FMA math only (no TF32, like the GEMM); float16 / bfloat16 use
// tensor cores, fp32 compute. TWINFER_CUDNN_CONV=legacy skips the graph
// API (to compare the two on a GPU). A channels-last depthwise convolution
// (MobileNet's) also has our own kernel (depthwise_conv.h): both are timed
// when the plan is built and the faster kept; TWINFER_DEPTHWISE=cudnn|ours
// forces one.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/capture_mode.h"
#include "backends/cuda/conv_epilogue.h"
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/conv_input_pad.h"
#include "backends/cuda/cudnn_api.h"
#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/nn/conv.h"

namespace twinfer::cuda {

namespace {

constexpr size_t kWorkspaceLimit = size_t(256) << 20;

bool cudnn_type(DType t, cudnnDataType_t* out) {
  switch (t) {
    case DType::kFloat32: *out = CUDNN_DATA_FLOAT; return true;
    case DType::kFloat16: *out = CUDNN_DATA_HALF; return true;
    case DType::kBFloat16: *out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
  }
}

std::vector<int> ints(const Shape& s) { return std::vector<int>(s.begin(), s.end()); }

bool conv_supports(const KernelBuildInfo& info, std::string* why) {
  cudnnDataType_t t;
  if (!cudnn_type(info.input_dtype(0), &t)) {
    if (why) *why = std::string("cuDNN Conv takes float32, float16, bfloat16, not ") + dtype_name(info.input_dtype(0));
    return false;
  }
  nn::ConvSpec c = nn::conv_spec(info);
  if (c.x.size() < 3 || c.x.size() > 5) {
    if (why) *why = "cuDNN Conv takes 1 to 3 spatial dims";
    return false;
  }
  ConvInputPad pad;  // the checks below are of the padded copy cuDNN reads
  if (pads_unequal(c.win) && !plan_conv_input_pad(&c, static_cast<int64_t>(dtype_size(info.input_dtype(0))), &pad, why))
    return false;
  for (int64_t d : c.x)
    if (d > INT32_MAX) {
      if (why) *why = "a dim beyond 2^31 has no cuDNN kernel";
      return false;
    }
  // The descriptors hold int strides.
  if (shape_numel(c.x) > INT32_MAX || shape_numel(c.y) > INT32_MAX || shape_numel(c.w) > INT32_MAX) {
    if (why) *why = "a tensor of 2^31 elements or more has no cuDNN kernel (its descriptors take int strides)";
    return false;
  }
  return true;
}

class CudnnConv final : public Kernel {
 public:
  explicit CudnnConv(const KernelBuildInfo& info)
      : c_(nn::conv_spec(info)), dtype_(info.input_dtype(0)), exact_(dtype_ == DType::kFloat32 &&
                                                                   info.precision() != Precision::kTF32),
        api_(cudnn()) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&device_sms_, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    handle_ = cudnn_handle(device);
    if (pads_unequal(c_.win)) {  // from here on c_ is the padded copy's conv
      std::string why;
      ConvInputPad pad;
      if (!plan_conv_input_pad(&c_, static_cast<int64_t>(dtype_size(dtype_)), &pad, &why))
        info.fail(ErrorKind::kUnsupportedOp, why);
      input_pad_ = pad;
      pad_scratch_ = static_cast<size_t>(round_up(pad.buffer_bytes, 256));
    }
    const char* dw_mode = std::getenv("TWINFER_DEPTHWISE");
    const std::string dw = dw_mode ? dw_mode : "";
    if (dw != "cudnn" && depthwise_applies(info)) prepare_depthwise(info);
    try {
      setup_cudnn();
    } catch (const Error& e) {
      if (!depthwise_) throw;
      use_depthwise_ = true;
      name_ = std::string("cuda depthwise nhwc (cuDNN refused: ") + e.what() + ")";
    }
    if (depthwise_ && !use_depthwise_) {
      if (dw == "ours") {
        use_depthwise_ = true;
        name_ = "cuda depthwise nhwc (TWINFER_DEPTHWISE=ours)";
      } else {
        keep_the_faster();
      }
    }
    if (input_pad_) name_ += "; x copied with its unequal pads first";
  }

  ~CudnnConv() override { destroy(); }

  // The padded copy of x (input_pad_) first, then cuDNN's workspace.
  size_t scratch_bytes() const override {
    if (use_depthwise_) return pad_scratch_;
    return pad_scratch_ + (graph_ ? graph_->workspace_bytes() : workspace_);
  }

  void run(KernelContext& ctx) const override {
    if (ctx.outputs[0].numel() == 0) return;
    const void* bias = c_.has_bias ? ctx.inputs[2].data : nullptr;
    const void* residual = c_.has_residual ? ctx.inputs[3].data : nullptr;
    const cudaStream_t s = stream_of(ctx);
    const void* x = ctx.inputs[0].data;
    void* workspace = ctx.scratch;
    if (input_pad_) {
      copy_padded(x, ctx.scratch, s);
      x = ctx.scratch;
      workspace = static_cast<uint8_t*>(ctx.scratch) + pad_scratch_;
    }
    if (use_depthwise_) {
      depthwise_conv_nhwc(depthwise_geometry_, c_.y[0], x, depthwise_w_.data(), bias, residual, ctx.outputs[0].data,
                          dtype_, c_.act, s);
      return;
    }
    enqueue_cudnn(x, ctx.inputs[1].data, bias, residual, ctx.outputs[0].data, workspace, s, graph_for(ctx.stream));
  }
  const char* impl_name() const override { return name_.c_str(); }

 private:
  // Our depthwise kernel takes the layer: channels-last, one group per
  // channel and one output channel per group, 1 or 2 spatial dims, constant
  // weights (held again as [KH, KW, C]).
  bool depthwise_applies(const KernelBuildInfo& info) const {
    if (!c_.channels_last || c_.win.nsp > 2 || !info.input_constant(1)) return false;
    const int64_t channels = c_.x[1];
    if (channels < 1 || c_.group != channels || c_.w[0] != channels || c_.w[1] != 1) return false;
    return shape_numel(c_.x) > 0 && shape_numel(c_.y) > 0;
  }

  void prepare_depthwise(const KernelBuildInfo& info) {
    const bool two = c_.win.nsp == 2;
    const int64_t ch = c_.x[1];
    const int64_t kh = two ? c_.w[2] : 1, kw = c_.w[two ? 3 : 2];
    auto dim = [&](const Shape& s, size_t i) { return two ? s[2 + i] : (i == 0 ? 1 : s[2]); };
    auto win = [&](const std::vector<int64_t>& v, size_t i, int64_t one) { return two ? v[i] : (i == 0 ? one : v[0]); };
    const std::vector<int64_t> pad(c_.win.pad_begin.begin(), c_.win.pad_begin.begin() + c_.win.nsp),
        stride(c_.win.stride.begin(), c_.win.stride.begin() + c_.win.nsp),
        dil(c_.win.dilation.begin(), c_.win.dilation.begin() + c_.win.nsp);
    depthwise_geometry_ = DepthwiseGeometry(ch, dim(c_.x, 0), dim(c_.x, 1), dim(c_.y, 0), dim(c_.y, 1), kh, kw,
                                            win(stride, 0, 1), win(stride, 1, 1), win(pad, 0, 0), win(pad, 1, 0),
                                            win(dil, 0, 1), win(dil, 1, 1), 1);
    // KRSC [C, KH, KW, 1] -> [KH, KW, C]: a thread's channels are one load.
    const Tensor& w = *info.input_constant(1);
    const size_t elt = dtype_size(dtype_);
    const auto* src = static_cast<const uint8_t*>(w.data());
    std::vector<uint8_t> rsc(static_cast<size_t>(ch * kh * kw) * elt);
    for (int64_t c = 0; c < ch; ++c)
      for (int64_t rs = 0; rs < kh * kw; ++rs)
        std::memcpy(&rsc[static_cast<size_t>(rs * ch + c) * elt], src + static_cast<size_t>(c * kh * kw + rs) * elt,
                    elt);
    depthwise_w_ = device_copy(rsc.data(), dtype_, {kh, kw, ch});
    depthwise_ = true;
  }

  // Both forms run on zeroed operands at build (fastest_of_two_ms) and the
  // faster is kept; the kernel name gives both times. Without memory for the
  // trial, cuDNN's.
  void keep_the_faster() {
    TrialKey key("depthwise convolution");
    key << static_cast<int64_t>(dtype_) << exact_ << c_.x << c_.w << c_.y << c_.win.stride << c_.win.pad_begin
        << c_.win.dilation << static_cast<int64_t>(c_.act.kind) << c_.has_bias << c_.has_residual;
    const FormTiming t = time_two_forms("ours", "cuDNN", key, [&] {
      const size_t elt = dtype_size(dtype_);
      const size_t x_bytes = static_cast<size_t>(shape_numel(c_.x)) * elt,
                   y_bytes = static_cast<size_t>(shape_numel(c_.y)) * elt;
      const TrialBuffer x(x_bytes), y(y_bytes), w(static_cast<size_t>(shape_numel(c_.w)) * elt),
          bias(static_cast<size_t>(c_.y[1]) * elt), residual(c_.has_residual ? y_bytes : 0),
          scratch(scratch_bytes());
      const void* b = c_.has_bias ? bias.get() : nullptr;
      const void* r = c_.has_residual ? residual.get() : nullptr;
      return fastest_of_two_ms(
          [&](cudaStream_t s) {
            depthwise_conv_nhwc(depthwise_geometry_, c_.y[0], x.get(), depthwise_w_.data(), b, r, y.get(), dtype_,
                                c_.act, s);
          },
          [&](cudaStream_t s) { enqueue_cudnn(x.get(), w.get(), b, r, y.get(), scratch.get(), s, graph_.get()); });
    });
    if (t.first_wins) {
      use_depthwise_ = true;
      name_ = "cuda depthwise nhwc (" + t.timed + ")";
    } else {
      name_ += "; " + t.timed;
    }
  }

  // x into the zeroed buffer as input_pad_ plans it: one 3-D copy of rows.
  void copy_padded(const void* x, void* buffer, cudaStream_t s) const {
    const ConvInputPad& p = *input_pad_;
    check(cudaMemsetAsync(buffer, 0, static_cast<size_t>(p.buffer_bytes), s), "cudaMemsetAsync(padded conv input)");
    cudaMemcpy3DParms m = {};
    const auto z = [](int64_t v) { return static_cast<size_t>(v); };
    // (cudaPitchedPtr: pointer, pitch, width, height; sizes in bytes and rows.)
    m.srcPtr = cudaPitchedPtr{const_cast<void*>(x), z(p.row_bytes), z(p.row_bytes), z(p.rows)};
    m.dstPtr = cudaPitchedPtr{buffer, z(p.pitch), z(p.pitch), z(p.slice_rows)};
    m.dstPos = cudaPos{z(p.first_byte), z(p.first_row), 0};
    m.extent = cudaExtent{z(p.row_bytes), z(p.rows), z(p.slices)};
    m.kind = cudaMemcpyDeviceToDevice;
    check(cudaMemcpy3DAsync(&m, s), "cudaMemcpy3DAsync(padded conv input)");
  }

  // cuDNN's convolution as the graph API or the descriptors took it (the
  // name says which), with the epilogue it could not take after it.
  void setup_cudnn() {
    const bool cl = c_.channels_last;
    const std::string layout = cl ? " nhwc" : "";
    cudnnDataType_t t = CUDNN_DATA_FLOAT;
    cudnn_type(dtype_, &t);  // supported: conv_supports checked it
    // A 1-d convolution is a 2-d one with a height of 1 (cuDNN wants >= 4-d).
    Shape x = c_.x, w = c_.w, y = c_.y;
    std::vector<int> pad, stride, dil;
    for (size_t i = 0; i < c_.win.nsp; ++i) {
      pad.push_back(static_cast<int>(c_.win.pad_begin[i]));
      stride.push_back(static_cast<int>(c_.win.stride[i]));
      dil.push_back(static_cast<int>(c_.win.dilation[i]));
    }
    if (c_.win.nsp == 1) {
      x.insert(x.begin() + 2, 1);
      w.insert(w.begin() + 2, 1);
      y.insert(y.begin() + 2, 1);
      pad.insert(pad.begin(), 0);
      stride.insert(stride.begin(), 1);
      dil.insert(dil.begin(), 1);
    }
    std::string why_not_graph = "TWINFER_CUDNN_CONV=legacy";
    const char* mode = std::getenv("TWINFER_CUDNN_CONV");
    const bool empty = shape_numel(x) == 0 || shape_numel(w) == 0 || shape_numel(y) == 0;
    if (empty) why_not_graph = "an empty tensor";  // cuDNN's checks divide by the dims
    if (!empty && (!mode || std::string(mode) != "legacy")) {
      ConvGraphSpec g;
      g.x.assign(x.begin(), x.end()), g.w.assign(w.begin(), w.end()), g.y.assign(y.begin(), y.end());
      g.pad_begin.assign(pad.begin(), pad.end()), g.pad_end = g.pad_begin;  // equal (conv_input_pad.h)
      g.stride.assign(stride.begin(), stride.end()), g.dilation.assign(dil.begin(), dil.end());
      g.dtype = dtype_, g.exact = exact_, g.max_workspace = kWorkspaceLimit;
      g.channels_last = cl;  // x, y NHWC and the filter KRSC (the node's weights)
      // The epilogue inside cuDNN's graph first: its runtime-fusion engines
      // write y once instead of conv + our pass over y. They run on NHWC
      // with tensor cores, so only channels-last, non-exact convs ask.
      // An activation cuDNN should not run (conv_graph_fuses) runs after,
      // alone, with the bias and residual still inside the graph.
      std::string why_not_fused, why_act_after;
      const bool act_fuses = conv_graph_fuses(c_.act, &why_act_after);
      const bool graph_epilogue = c_.has_bias || c_.has_residual || (!c_.act.none() && act_fuses);
      if (cl && !exact_ && graph_epilogue) {
        ConvGraphSpec f = g;
        f.bias = c_.has_bias, f.residual = c_.has_residual;
        if (act_fuses) f.act = c_.act;
        graph_ = make_cudnn_conv_graph(f, &why_not_fused);
        if (graph_) {
          graph_spec_ = f;
          fused_ = true;
          act_after_ = !act_fuses;
          name_ = "cudnn graph conv" + layout + " + fused epilogue (" + graph_->plan_name() + ")";
          if (act_after_) name_ += " + activation (not fused: " + why_act_after + ")";
          return;
        }
      } else if (cl && !exact_ && !c_.act.none()) {
        why_not_fused = why_act_after;
      }
      graph_ = make_cudnn_conv_graph(g, &why_not_graph);
      if (graph_) {
        graph_spec_ = g;
        name_ = "cudnn graph conv" + layout + " (" + graph_->plan_name() + ")";
        if (!why_not_fused.empty()) name_ += " + epilogue (not fused: " + why_not_fused.substr(0, 120) + ")";
        return;
      }
    }
    try {
      check_cudnn_setup(api_.tensor_create(&xd_), "cudnnCreateTensorDescriptor");
      check_cudnn_setup(api_.tensor_create(&yd_), "cudnnCreateTensorDescriptor");
      check_cudnn_setup(api_.filter_create(&wd_), "cudnnCreateFilterDescriptor");
      check_cudnn_setup(api_.conv_create(&cd_), "cudnnCreateConvolutionDescriptor");
      const std::vector<int> xs = ints(x), ys = ints(y), ws = ints(w);
      // Channels-last: NHWC strides on x and y, and the filter format NHWC,
      // which for a filter means KRSC memory with dims still given as KCRS.
      const std::vector<int> xst = ints(cl ? channels_last_strides(x) : contiguous_strides(x));
      const std::vector<int> yst = ints(cl ? channels_last_strides(y) : contiguous_strides(y));
      check_cudnn_setup(api_.tensor_set(xd_, t, static_cast<int>(xs.size()), xs.data(), xst.data()), "cudnnSetTensorNdDescriptor(x)");
      check_cudnn_setup(api_.tensor_set(yd_, t, static_cast<int>(ys.size()), ys.data(), yst.data()), "cudnnSetTensorNdDescriptor(y)");
      check_cudnn_setup(api_.filter_set(wd_, t, cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, static_cast<int>(ws.size()),
                                        ws.data()),
                  "cudnnSetFilterNdDescriptor");
      check_cudnn_setup(api_.conv_set(cd_, static_cast<int>(pad.size()), pad.data(), stride.data(), dil.data(),
                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                  "cudnnSetConvolutionNdDescriptor");
      check_cudnn_setup(api_.conv_groups(cd_, static_cast<int>(c_.group)), "cudnnSetConvolutionGroupCount");
      // Exact fp32: FMA math only (no TF32); precision="tf32" and 16-bit types: tensor cores.
      check_cudnn_setup(api_.conv_math(cd_, exact_ ? CUDNN_FMA_MATH : dtype_ == DType::kFloat32 ? CUDNN_DEFAULT_MATH
                                                                                        : CUDNN_TENSOR_OP_MATH),
                  "cudnnSetConvolutionMathType");
      choose_algorithm();
      name_ = "cudnn conv" + layout + " (algo " + std::to_string(static_cast<int>(algo_)) + "; not the graph API: " +
              why_not_graph + ")";
    } catch (...) {
      destroy();  // the destructor does not run for a throwing constructor
      throw;
    }
  }

  // The graph plan for a stream: on a green context's stream, cuDNN's plan
  // for the partition's SM count (as cuBLASLt's descriptors are told it),
  // built on the first run there outside a capture (a capture never builds:
  // the whole device's plan runs meanwhile) within this kernel's workspace;
  // where cuDNN builds none, or the share is the whole device (whose plan
  // was timed), the whole device's plan.
  const ConvGraphPlan* graph_for(const Stream* stream) const {
    const int sm = stream ? stream->sm_count() : 0;
    if (!graph_ || sm <= 0 || sm >= device_sms_) return graph_.get();
    std::lock_guard<std::mutex> lock(variants_mutex_);
    for (const auto& [count, plan] : variants_)
      if (count == sm) return plan ? plan.get() : graph_.get();
    if (stream->capturing()) return graph_.get();
    RelaxedCaptureScope relaxed;  // another thread's capture stays whole
    ConvGraphSpec v = graph_spec_;
    v.sm_count = sm;
    v.max_workspace = graph_->workspace_bytes();
    std::shared_ptr<const ConvGraphPlan> plan;
    try {
      std::string why;
      plan = make_cudnn_conv_graph(v, &why);
    } catch (...) {  // whatever failed (memory for its set-up...), the whole device's plan runs
      plan = nullptr;
    }
    if (plan && plan->workspace_bytes() > graph_->workspace_bytes()) plan = nullptr;
    variants_.emplace_back(sm, plan);
    return plan ? plan.get() : graph_.get();
  }

  // w is the node's (KRSC for channels-last: the descriptors say so).

  void enqueue_cudnn(const void* x, const void* w, const void* bias, const void* residual, void* y, void* scratch,
                     cudaStream_t s, const ConvGraphPlan* graph) const {
    const float one = 1.f, zero = 0.f;
    const int64_t spatial = shape_numel(Shape(c_.y.begin() + 2, c_.y.end()));
    if (graph) {
      if (fused_) {  // bias, residual (and the activation unless act_after_) inside cuDNN's graph
        graph->run(x, w, y, scratch, s, bias, residual);
        if (act_after_)
          conv_epilogue(y, nullptr, nullptr, c_.y[0], c_.y[1], spatial, dtype_, c_.act, s, c_.channels_last);
        return;
      }
      graph->run(x, w, y, scratch, s);
    } else {
      // The handle is bound to one stream at a time.
      std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
      check_cudnn(api_.set_stream(handle_, s), "cudnnSetStream");
      check_cudnn(api_.fwd(handle_, &one, xd_, x, wd_, w, cd_, algo_, scratch, workspace_, &zero, yd_, y),
                  "cudnnConvolutionForward");
    }
    conv_epilogue(y, bias, residual, c_.y[0], c_.y[1], spatial, dtype_, c_.act, s, c_.channels_last);
  }

  void destroy() {
    if (cd_) api_.conv_destroy(cd_);
    if (wd_) api_.filter_destroy(wd_);
    if (yd_) api_.tensor_destroy(yd_);
    if (xd_) api_.tensor_destroy(xd_);
    cd_ = nullptr, wd_ = nullptr, yd_ = nullptr, xd_ = nullptr;
  }

  void choose_algorithm() {
    constexpr int kMax = 16;
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    int n = 0;
    {
      std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
      check_cudnn_setup(api_.fwd_algos(handle_, xd_, wd_, cd_, yd_, kMax, &n, perf),
                        "cudnnGetConvolutionForwardAlgorithm_v7");
    }
    for (int i = 0; i < n; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kWorkspaceLimit) continue;
      // fp32 stays exact: an algorithm whose math is not FMA-only is skipped.
      if (exact_ && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;
      algo_ = perf[i].algo;
      workspace_ = perf[i].memory;
      // The heuristic's result holds for the math type it reports, which may
      // differ from the one the descriptor asked for (frameworks set it so).
      if (!exact_) check_cudnn_setup(api_.conv_math(cd_, perf[i].mathType), "cudnnSetConvolutionMathType");
      return;
    }
    throw Error(ErrorKind::kUnsupportedOp, "cuDNN has no forward algorithm for this convolution within " +
                                               std::to_string(kWorkspaceLimit >> 20) + " MiB of workspace");
  }

  nn::ConvSpec c_;  // with unequal pads: the conv of the padded copy
  DType dtype_;
  bool exact_;  // float32 without TF32
  const CudnnApi& api_;
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_ = 0;
  std::shared_ptr<const ConvGraphPlan> graph_;  // the graph API's plan; null: the descriptors above
  ConvGraphSpec graph_spec_;                    // what graph_ was built from
  // Per green context's SM count: cuDNN's plan for it (null: none, graph_ runs).
  mutable std::vector<std::pair<int, std::shared_ptr<const ConvGraphPlan>>> variants_;
  mutable std::mutex variants_mutex_;
  int device_sms_ = 0;  // the whole device's SMs (a share of all of them keeps graph_)
  bool fused_ = false;      // graph_ holds the epilogue too
  bool act_after_ = false;  // ... but for the activation, our kernel's after it
  std::string name_;
  // Our depthwise kernel (depthwise_conv.h), where it takes the layer.
  bool depthwise_ = false;      // it does: the weights below are ready
  bool use_depthwise_ = false;  // ... and it runs instead of cuDNN
  DepthwiseGeometry depthwise_geometry_;
  Tensor depthwise_w_;  // [KH, KW, C] on the device
  std::optional<ConvInputPad> input_pad_;  // unequal pads: x is copied padded first
  size_t pad_scratch_ = 0;                 // that copy's bytes at the start of scratch
};

}  // namespace

TWINFER_REGISTER_KERNEL("Conv", Backend::kCUDA, 10, conv_supports, make_kernel<CudnnConv>);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCUDA, 10, conv_supports, make_kernel<CudnnConv>, kTwinferDomain);
TWINFER_REGISTER_KERNEL("Conv", Backend::kCUDA, 10, conv_supports, make_kernel<CudnnConv>, kChannelsLastDomain);

}  // namespace twinfer::cuda
