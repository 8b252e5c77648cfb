// DepthToSpace and SpaceToDepth (DCR and CRD modes; SpaceToDepth has a mode
// since opset 25, DCR before) on NCHW tensors. Each is
// a reshape to 6 dims, a transpose and a reshape back, so the kernel is one
// strided walk over the 6-d view of the output.
#include "ops/tensor/strided_copy.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

bool is_d2s(const graph::Node& n) { return n.op_type == "DepthToSpace"; }

template <typename Ctx>
int64_t block_size(const Ctx& c) {
  // b * b divides or multiplies the channels: bounded so it cannot wrap (a
  // block of 2^32 squared is 0, and a division by it ended the process).
  constexpr int64_t kMaxBlock = int64_t{1} << 20;
  const int64_t b = c.node().required_attr("blocksize").i;
  if (b < 1 || b > kMaxBlock)
    c.fail(ErrorKind::kShape, "blocksize must be in [1, 2^20], got " + std::to_string(b));
  return b;
}

template <typename Ctx>
bool crd_mode(const Ctx& c) {
  const std::string m = c.node().attr_string("mode", "DCR");
  if (m != "DCR" && m != "CRD") c.fail(ErrorKind::kUnsupportedOp, "unsupported mode '" + m + "'");
  return m == "CRD";
}

// One output dim from an input dim: times or divided by b (symbols survive
// only b == 1).
Dim scale_dim(InferContext& c, const Dim& d, int64_t b, bool divide, const char* what) {
  if (b == 1) return d;
  if (!d.known()) return Dim();
  if (!divide) {
    int64_t v = 0;
    if (!(!__builtin_mul_overflow(d.value, b, &v)))
      c.fail(ErrorKind::kShape,
             std::string(what) + " " + std::to_string(d.value) + " times " + std::to_string(b) + " is too large");
    return Dim(v);
  }
  if (!(d.value % b == 0))
    c.fail(ErrorKind::kShape,
           std::string(what) + " " + std::to_string(d.value) + " is not divisible by " + std::to_string(b));
  return Dim(d.value / b);
}

void depth_space_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const int64_t b = block_size(c);
  crd_mode(c);
  if (!c.input_has_shape(0)) return c.set_output(0, dt, unknown_dims(4));
  const SymShape& in = c.input_shape(0);
  if (!(in.size() == 4)) c.fail(ErrorKind::kShape, "input must be 4-d (NCHW), got " + sym_shape_str(in));
  SymShape out = in;
  if (is_d2s(c.node())) {
    out[1] = scale_dim(c, in[1], b * b, true, "channels");
    out[2] = scale_dim(c, in[2], b, false, "height");
    out[3] = scale_dim(c, in[3], b, false, "width");
  } else {
    out[1] = scale_dim(c, in[1], b * b, false, "channels");
    out[2] = scale_dim(c, in[2], b, true, "height");
    out[3] = scale_dim(c, in[3], b, true, "width");
  }
  c.set_output(0, dt, out);
}

class DepthSpaceKernel final : public StridedCopyKernel {
 public:
  explicit DepthSpaceKernel(const KernelBuildInfo& info) : StridedCopyKernel(dtype_size(info.input_dtype(0))) {
    const int64_t b = block_size(info);
    const Shape in = info.input_shape(0);
    const int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    Shape view;                    // the input seen with 6 dims
    std::vector<int64_t> perm;     // output dim i = view dim perm[i]
    if (is_d2s(info.node())) {
      const int64_t c2 = C / (b * b);
      if (crd_mode(info)) {  // [N, C', b, b, H, W] -> [N, C', H, b, W, b]
        view = {N, c2, b, b, H, W};
        perm = {0, 1, 4, 2, 5, 3};
      } else {               // DCR: [N, b, b, C', H, W] -> [N, C', H, b, W, b]
        view = {N, b, b, c2, H, W};
        perm = {0, 3, 4, 1, 5, 2};
      }
    } else {
      view = {N, C, H / b, b, W / b, b};
      if (crd_mode(info))    // [N, C, H', b, W', b] -> [N, C, b, b, H', W']
        perm = {0, 1, 3, 5, 2, 4};
      else                   // DCR: [N, C, H', b, W', b] -> [N, b, b, C, H', W']
        perm = {0, 3, 5, 1, 2, 4};
    }
    const Shape st = contiguous_strides(view);
    Shape out;
    std::vector<int64_t> strides;
    for (int64_t p : perm) {
      out.push_back(view[p]);
      strides.push_back(st[p]);
    }
    plan_ = make_strided_plan(out, strides, 0);
  }
};

bool depth_space_supports(const KernelBuildInfo& info, std::string* why) { return check_movable(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("DepthToSpace", depth_space_infer);
TWINFER_REGISTER_KERNEL("DepthToSpace", Backend::kCPU, 0, depth_space_supports, make_kernel<DepthSpaceKernel>);
TWINFER_REGISTER_SCHEMA("SpaceToDepth", depth_space_infer);
TWINFER_REGISTER_KERNEL("SpaceToDepth", Backend::kCPU, 0, depth_space_supports, make_kernel<DepthSpaceKernel>);

}  // namespace twinfer::tensor
