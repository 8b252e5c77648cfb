// ConvTranspose on cuDNN's graph API: the data gradient (dgrad) of the
// convolution that maps y back to x, which is ConvTranspose's own sum
// (ops/vision/conv_transpose.h: y[n, m, o] sums x[n, c, i] * W[c, m, k] over
// o = i*stride - pad_begin + k*dilation; ONNX's [C, M/group, k...] weights
// are that convolution's filter as they are). The output size is given, so
// output_padding and output_shape need nothing more; cuDNN wants trailing
// pads that are not negative and agree with it (checked here, else the CPU).
// The bias goes through conv.cc's epilogue kernel. Built with the kernel;
// a build without cuDNN's frontend leaves ConvTranspose on the CPU.
#include <algorithm>
#include <string>

#include "backends/cuda/conv_epilogue.h"
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/kernel_util.h"
#include "core/device_info.h"
#include "ops/vision/conv_transpose.h"

namespace twinfer::cuda {

namespace {

// The convolution's trailing pad per spatial dim that maps the output size
// back onto the input size, or -1 where none does: cuDNN's relation
// in = floor((out + pad_begin + pad_end - dil*(k-1) - 1) / stride) + 1.
int64_t forward_pad_end(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pb, int64_t pe) {
  auto in_of = [&](int64_t p) { return (out + pb + p - dil * (k - 1) - 1) / stride + 1; };
  const int64_t p = std::max<int64_t>(pe, 0);
  return out + pb + p - dil * (k - 1) - 1 >= 0 && in_of(p) == in ? p : -1;
}

bool deconv_supports(const KernelBuildInfo& info, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (cudnn_frontend_version().empty()) return no("CUDA ConvTranspose needs cuDNN's frontend in the build");
  const DType t = info.input_dtype(0);
  if (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16)
    return no(std::string("CUDA ConvTranspose takes float32, float16, bfloat16, not ") + dtype_name(t));
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (info.has_input(i) && info.input_dtype(i) != t) return no("ConvTranspose with inputs of different types runs on the CPU");
  const Shape x = info.input_shape(0);
  if (x.size() < 3 || x.size() > 5) return no("CUDA ConvTranspose takes 1 to 3 spatial dims");
  const vision::DeconvSpec s = vision::deconv_spec(info);
  for (size_t i = 0; i < s.nsp; ++i) {
    if (s.pad_begin[i] < 0) return no("ConvTranspose with a negative leading pad runs on the CPU");
    if (forward_pad_end(s.x[2 + i], s.y[2 + i], s.kernel[i], s.stride[i], s.dilation[i], s.pad_begin[i], s.pad_end[i]) < 0)
      return no("this ConvTranspose's output size has no cuDNN form (trailing padding); it runs on the CPU");
  }
  for (int64_t d : s.x)
    if (d > INT32_MAX) return no("a dim beyond 2^31 has no cuDNN kernel");
  return true;
}

class CudnnConvTranspose final : public Kernel {
 public:
  explicit CudnnConvTranspose(const KernelBuildInfo& info) : s_(vision::deconv_spec(info)), dtype_(info.input_dtype(0)) {
    std::string why;
    if (!deconv_supports(info, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
    empty_ = shape_numel(s_.x) == 0 || shape_numel(s_.y) == 0 || shape_numel(s_.w) == 0;
    if (empty_) return;  // run() zero-fills (a bias over no positions is no work)
    ConvGraphSpec g;
    g.transpose = true;
    g.x.assign(s_.x.begin(), s_.x.end()), g.w.assign(s_.w.begin(), s_.w.end()), g.y.assign(s_.y.begin(), s_.y.end());
    for (size_t i = 0; i < s_.nsp; ++i) {
      g.pad_begin.push_back(s_.pad_begin[i]);
      g.pad_end.push_back(forward_pad_end(s_.x[2 + i], s_.y[2 + i], s_.kernel[i], s_.stride[i], s_.dilation[i],
                                          s_.pad_begin[i], s_.pad_end[i]));
      g.stride.push_back(s_.stride[i]);
      g.dilation.push_back(s_.dilation[i]);
    }
    if (s_.nsp == 1) {  // cuDNN wants 2 spatial dims at least: a height of 1
      g.x.insert(g.x.begin() + 2, 1), g.w.insert(g.w.begin() + 2, 1), g.y.insert(g.y.begin() + 2, 1);
      g.pad_begin.insert(g.pad_begin.begin(), 0), g.pad_end.insert(g.pad_end.begin(), 0);
      g.stride.insert(g.stride.begin(), 1), g.dilation.insert(g.dilation.begin(), 1);
    }
    g.dtype = dtype_;
    g.exact = dtype_ == DType::kFloat32 && info.precision() != Precision::kTF32;
    g.max_workspace = size_t(256) << 20;
    plan_ = make_cudnn_conv_graph(g, &why);
    if (!plan_) info.fail(ErrorKind::kUnsupportedOp, why);
    name_ = "cudnn graph conv transpose (" + plan_->plan_name() + ")";
  }

  size_t scratch_bytes() const override { return plan_ ? plan_->workspace_bytes() : 0; }
  const char* impl_name() const override { return name_.c_str(); }

  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    if (ctx.outputs[0].numel() == 0) return;
    if (empty_) {  // no input positions or channels: the output is its bias (0 before it)
      check(cudaMemsetAsync(ctx.outputs[0].data, 0, ctx.outputs[0].bytes(), s), "cudaMemsetAsync (ConvTranspose)");
    } else {
      plan_->run(ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data, ctx.scratch, s);
    }
    if (s_.has_bias) {
      const int64_t spatial = shape_numel(Shape(s_.y.begin() + 2, s_.y.end()));
      conv_epilogue(ctx.outputs[0].data, ctx.inputs[2].data, nullptr, s_.y[0], s_.y[1], spatial, dtype_,
                    nn::Activation{}, s);
    }
  }

 private:
  vision::DeconvSpec s_;
  DType dtype_;
  bool empty_ = false;
  std::shared_ptr<const ConvGraphPlan> plan_;
  std::string name_ = "cudnn graph conv transpose";
};

}  // namespace

TWINFER_REGISTER_KERNEL("ConvTranspose", Backend::kCUDA, 10, deconv_supports, make_kernel<CudnnConvTranspose>);

}  // namespace twinfer::cuda
