// conv_graph.h on cuDNN's graph API: one conv_fprop node on contiguous
// NCHW tensors, or NHWC ones with a KRSC filter (dims always in N, C,
// spatial order; the layout is the strides), float accumulation; groups
// follow from the filter's channel dim.
// Built once with the kernel; a refusal comes back as null with cuDNN's
// message, and conv.cc uses the legacy API instead.
#include <unordered_map>

#include "backends/cuda/conv_graph.h"
#include "backends/cuda/cudnn_fe_setup.h"
#include "core/error.h"
#include "core/shape.h"

namespace twinfer::cuda {

namespace {

enum Uid : int64_t { kX = 1, kW, kY, kBias, kResidual, kScale };

// The pointwise mode of a fusable activation (conv_graph_fuses).
fe::graph::Pointwise_attributes activation_attrs(const nn::Activation& a) {
  auto p = fe::graph::Pointwise_attributes().set_name("activation");
  switch (a.kind) {
    case nn::ActKind::kRelu: return p.set_mode(fe::PointwiseMode_t::RELU_FWD);
    case nn::ActKind::kLeakyRelu:
      return p.set_mode(fe::PointwiseMode_t::RELU_FWD).set_relu_lower_clip(0.f).set_relu_lower_clip_slope(a.alpha);
    case nn::ActKind::kClip:
      return p.set_mode(fe::PointwiseMode_t::RELU_FWD).set_relu_lower_clip(a.alpha).set_relu_upper_clip(a.beta);
    case nn::ActKind::kSigmoid: return p.set_mode(fe::PointwiseMode_t::SIGMOID_FWD);
    case nn::ActKind::kSilu: return p.set_mode(fe::PointwiseMode_t::SWISH_FWD).set_swish_beta(1.f);
    case nn::ActKind::kGelu: return p.set_mode(fe::PointwiseMode_t::GELU_FWD);
    case nn::ActKind::kGeluTanh: return p.set_mode(fe::PointwiseMode_t::GELU_APPROX_TANH_FWD);
    case nn::ActKind::kTanh: return p.set_mode(fe::PointwiseMode_t::TANH_FWD);
    default: break;
  }
  throw Error(ErrorKind::kUnsupportedOp, "this activation has no cuDNN pointwise mode");
}

// conv -> [+ bias] -> [+ residual] -> [act], the conv's sum staying float
// (the graph's intermediate type) until y.
template <typename MakeTensor>
std::shared_ptr<fe::graph::Tensor_attributes> fused_epilogue(fe::graph::Graph& graph, const ConvGraphSpec& s,
                                                             std::shared_ptr<fe::graph::Tensor_attributes> y,
                                                             MakeTensor&& tensor) {
  if (s.bias) {
    std::vector<int64_t> dims(s.y.size(), 1);
    dims[1] = s.y[1];
    auto b = tensor("bias", kBias, dims);
    y = graph.pointwise(y, b, fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
  }
  if (s.residual) {
    auto r = tensor("residual", kResidual, s.y);
    y = graph.pointwise(y, r,
                        fe::graph::Pointwise_attributes().set_name("residual").set_mode(fe::PointwiseMode_t::ADD));
  }
  if (!s.act.none()) y = graph.pointwise(y, activation_attrs(s.act));
  return y;
}

// `y_out`: where the output tensor goes; when set, y's dims are left for
// the frontend to infer (validate_cudnn_conv_graph compares them with ours).
// QConv's requantization in the graph (ConvGraphSpec::int8_requantize):
// conv (int32 sums) -> * scale[M] -> [+ bias[M]] -> [ReLU] in float ->
// int8 y. The vectors are float32 whatever the io type.
std::shared_ptr<fe::graph::Tensor_attributes> int8_requantize(fe::graph::Graph& graph, const ConvGraphSpec& s,
                                                              std::shared_ptr<fe::graph::Tensor_attributes> y) {
  std::vector<int64_t> dims(s.y.size(), 1);
  dims[1] = s.y[1];
  auto vector = [&](const char* name, int64_t uid) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim(dims)
                            .set_stride(channels_last_strides(dims))
                            .set_data_type(fe::DataType_t::FLOAT));
  };
  auto float_op = [](const char* name, fe::PointwiseMode_t mode) {
    return fe::graph::Pointwise_attributes().set_name(name).set_mode(mode).set_compute_data_type(fe::DataType_t::FLOAT);
  };
  y = graph.pointwise(y, vector("scale", kScale), float_op("scale", fe::PointwiseMode_t::MUL));
  if (s.bias) y = graph.pointwise(y, vector("bias", kBias), float_op("bias", fe::PointwiseMode_t::ADD));
  if (s.act.kind == nn::ActKind::kRelu) y = graph.pointwise(y, float_op("relu", fe::PointwiseMode_t::RELU_FWD));
  return y;
}

std::shared_ptr<fe::graph::Graph> conv_graph(const ConvGraphSpec& s,
                                             std::shared_ptr<fe::graph::Tensor_attributes>* y_out = nullptr) {
  const bool int8 = s.dtype == DType::kInt8;
  if (s.int8_requantize && (!int8 || s.transpose || s.residual ||
                            (s.act.kind != nn::ActKind::kNone && s.act.kind != nn::ActKind::kRelu)))
    throw Error(ErrorKind::kUnsupportedOp, "the int8 requantizing graph takes an int8 convolution with ReLU or none");
  const fe::DataType_t io = int8 ? fe::DataType_t::INT8 : fe_type(s.dtype);
  // The int32 form's pointwise identity stays int32; the requantizing one
  // computes in float past the convolution's own int32 sums.
  const fe::DataType_t acc = int8 && !s.int8_requantize ? fe::DataType_t::INT32 : fe::DataType_t::FLOAT;
  // Channels-last strides on the filter too make it KRSC ([M, k..., C/group]).
  const bool nhwc = int8 || s.channels_last;
  auto layout = [&](const std::vector<int64_t>& dims) { return nhwc ? channels_last_strides(dims) : contiguous_strides(dims); };
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(io).set_intermediate_data_type(acc).set_compute_data_type(acc);
  if (s.sm_count > 0) graph->set_sm_count(s.sm_count);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims) {
    return graph->tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(layout(dims)).set_data_type(io));
  };
  auto x = tensor("x", kX, s.x);
  auto w = tensor("w", kW, s.w);
  auto attrs = fe::graph::Conv_fprop_attributes()
                   .set_name("conv")
                   .set_pre_padding(s.pad_begin)
                   .set_post_padding(s.pad_end)
                   .set_stride(s.stride)
                   .set_dilation(s.dilation);
  if (int8) attrs.set_compute_data_type(fe::DataType_t::INT32);  // int8 products sum in int32
  if (s.transpose) {  // y has no inferable size here: it is always given
    auto dx = graph->conv_dgrad(x, w,
                                fe::graph::Conv_dgrad_attributes()
                                    .set_name("conv_transpose")
                                    .set_pre_padding(s.pad_begin)
                                    .set_post_padding(s.pad_end)
                                    .set_stride(s.stride)
                                    .set_dilation(s.dilation));
    dx->set_output(true).set_uid(kY).set_data_type(io).set_dim(s.y).set_stride(layout(s.y));
    if (y_out) *y_out = dx;
    return graph;
  }
  auto y = graph->conv_fprop(x, w, attrs);
  if (!int8) {
    y = fused_epilogue(*graph, s, y, tensor);
  } else if (s.int8_requantize) {
    y = int8_requantize(*graph, s, y);
  } else {
    // The int32 accumulator goes out through a pointwise identity, as
    // NVIDIA's int8 sample has it (int8_fprop.cpp).
    y = graph->pointwise(y, y, fe::graph::Pointwise_attributes().set_name("acc").set_mode(fe::PointwiseMode_t::IDENTITY));
  }
  y->set_output(true).set_uid(kY).set_data_type(int8 && !s.int8_requantize ? fe::DataType_t::INT32 : io);
  if (y_out) {
    *y_out = y;
  } else {
    y->set_dim(s.y).set_stride(layout(s.y));
  }
  return graph;
}

class CudnnConvGraph final : public ConvGraphPlan {
 public:
  explicit CudnnConvGraph(const ConvGraphSpec& s)
      : graph_(conv_graph(s), "conv", [&s](fe::graph::Graph& g) {
          // A partition's plan (sm_count) must fit the workspace its kernel has,
          // none included, and is built on a run: no runtime-compiled engines
          // (NVRTC takes seconds, under the cuDNN lock other runs wait on).
          if (s.max_workspace || s.sm_count > 0)
            g.deselect_workspace_greater_than(static_cast<int64_t>(s.max_workspace));
          if (s.sm_count > 0) g.deselect_behavior_notes({fe::BehaviorNote_t::RUNTIME_COMPILATION});
          // float32 never takes engines that convert its inputs down (to
          // fp16/bf16, as PyTorch leaves them out too); exact float32 (no
          // TF32) none that use tensor cores either.
          if (s.dtype == DType::kFloat32) {
            if (s.exact)
              g.deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
            else
              g.deselect_numeric_notes({fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
          }
        }, /*by_index=*/true) {
    // Operand sizes for timing the candidates: x, w, y (int32 sums for
    // int8), bias, residual; y's dims are given for every graph built here.
    const size_t io = s.dtype == DType::kInt8 ? 1 : dtype_size(s.dtype);
    auto bytes = [](const std::vector<int64_t>& d, size_t each) { return static_cast<size_t>(shape_numel(d)) * each; };
    const bool int32_sums = s.dtype == DType::kInt8 && !s.int8_requantize;
    std::vector<std::pair<int64_t, size_t>> operands{
        {kX, bytes(s.x, io)}, {kW, bytes(s.w, io)}, {kY, bytes(s.y, int32_sums ? 4 : io)}};
    const size_t vector_each = s.int8_requantize ? sizeof(float) : io;
    if (s.bias && s.y.size() > 1) operands.push_back({kBias, bytes({s.y[1]}, vector_each)});
    if (s.int8_requantize && s.y.size() > 1) operands.push_back({kScale, bytes({s.y[1]}, sizeof(float))});
    if (s.residual) operands.push_back({kResidual, bytes(s.y, io)});
    if (s.sm_count == 0) graph_.tune(operands, cudnn_tune_candidates());
    name_ = graph_.tuning().empty() ? graph_.plan_name() : graph_.plan_name() + "; timed " + graph_.tuning();
  }

  size_t workspace_bytes() const override { return graph_.workspace_bytes(); }
  const std::string& plan_name() const override { return name_; }

  void run(const void* x, const void* w, void* y, void* workspace, cudaStream_t s, const void* bias,
           const void* residual, const void* scale) const override {
    std::unordered_map<int64_t, void*> pack{{kX, const_cast<void*>(x)}, {kW, const_cast<void*>(w)}, {kY, y}};
    if (bias) pack[kBias] = const_cast<void*>(bias);
    if (residual) pack[kResidual] = const_cast<void*>(residual);
    if (scale) pack[kScale] = const_cast<void*>(scale);
    graph_.execute(pack, workspace, s);
  }

 private:
  FeGraph graph_;
  std::string name_;  // the plan, and the candidates timed with their times
};

}  // namespace

bool conv_graph_fuses(const nn::Activation& act, std::string* why) {
  switch (act.kind) {
    case nn::ActKind::kNone:
    case nn::ActKind::kRelu:
    case nn::ActKind::kLeakyRelu:
    case nn::ActKind::kSigmoid:
    case nn::ActKind::kSilu:
    case nn::ActKind::kGelu:
    case nn::ActKind::kGeluTanh:
    case nn::ActKind::kTanh:
      return true;
    case nn::ActKind::kClip:
      // RELU_FWD with an upper clip (ReLU6) is expressible, but cuDNN 9.19's
      // heuristics chose engine eng0 for each of MobileNetV2's 35 such graphs
      // (those with a bias only got others): fp16 at batch 256 took 157 ms on
      // an H200, against 12.8 ms on the NCHW path with the clip as our own
      // kernel (docs/gpu-runs/2026-11-29-66d2c04.md). The clip runs after.
      if (why) *why = "a clipped ReLU: cuDNN chose a slow engine for it (eng0)";
      return false;
    default:
      if (why) *why = "no cuDNN pointwise mode for this activation";
      return false;
  }
}

std::string validate_cudnn_conv_graph(const ConvGraphSpec& spec) {
  try {
    fe_ready();
    std::shared_ptr<fe::graph::Tensor_attributes> y;
    fe::error_t e = conv_graph(spec, &y)->validate();
    if (!e.is_good()) return e.get_message();
    if (y->get_dim() != spec.y) {
      std::string got;
      for (int64_t d : y->get_dim()) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return "cuDNN infers the output as [" + got + "], not the given y";
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::shared_ptr<const ConvGraphPlan> make_cudnn_conv_graph(const ConvGraphSpec& spec, std::string* why) {
  static PlanCache<ConvGraphPlan>* cache = new PlanCache<ConvGraphPlan>();  // never destroyed
  std::string key = std::to_string(static_cast<int>(spec.dtype)) + (spec.exact ? "e" : "") + (spec.transpose ? "t" : "") +
                    (spec.channels_last ? "n" : "") + (spec.bias ? "b" : "") + (spec.residual ? "r" : "") + (spec.int8_requantize ? "q" : "") + "a" +
                    std::to_string(static_cast<int>(spec.act.kind)) + ":" + exact_key(spec.act.alpha) + ":" +
                    exact_key(spec.act.beta) + ":" + std::to_string(spec.max_workspace) + ":sm" +
                    std::to_string(spec.sm_count);
  for (const auto* v : {&spec.x, &spec.w, &spec.y, &spec.pad_begin, &spec.pad_end, &spec.stride, &spec.dilation}) {
    key += "|";
    for (int64_t d : *v) key += std::to_string(d) + ",";
  }
  return cache->get(key, [&](std::string* reason) {
    return try_build<ConvGraphPlan>([&] { return std::make_shared<const CudnnConvGraph>(spec); }, reason);
  }, why);
}

}  // namespace twinfer::cuda
