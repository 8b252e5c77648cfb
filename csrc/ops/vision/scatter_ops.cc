// Col2Im (18), CenterCropPad (18) and MaxUnpool (9-22): shape rules and CPU
// kernels. Their output shapes come from input values (image_shape, shape,
// output_shape): exact when those are constants, else the rank only (the
// engine then evaluates the graph with the values).
//
// Col2Im: y[n, c, p...] = sum over blocks of input[n, c*K + k, l] where
//   p = l*stride - pad_begin + k*dilation (K = prod(block_shape)).
// CenterCropPad: per listed axis, crop (start floor((in-out)/2)) or zero pad
//   (begin floor((out-in)/2)) to `shape`.
// MaxUnpool: y = 0, then y[coords of I[j]] = X[j], I flat over the default
//   output [N, C, (in-1)*stride + kernel - pads] (as MaxPool's Indices); an
//   explicit output_shape keeps those coordinates (as onnxruntime).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"
#include "ops/tensor/tensor_util.h"
#include "ops/vision/col2im_geom.h"
#include "ops/vision/unpool_geom.h"

namespace twinfer::vision {
namespace {

void col2im_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  std::vector<int64_t> image, block;
  const bool hi = c.constant_ints(1, &image), hb = c.constant_ints(2, &block);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  if (!(x.size() == 3)) c.fail(ErrorKind::kShape, "Col2Im input must be [N, C*K, L], got " + sym_shape_str(x));
  size_t nsp = 0;
  if (hi) nsp = image.size();
  else if (c.input_has_shape(1) && c.input_shape(1).size() == 1 && c.input_shape(1)[0].known())
    nsp = static_cast<size_t>(c.input_shape(1)[0].value);
  else return c.set_output_rank_unknown(0, dt);
  SymShape out{x[0], Dim()};
  for (size_t i = 0; i < nsp; ++i) out.push_back(hi ? Dim(image[i]) : Dim());
  if (hi && hb) {
    const Col2ImGeom g = col2im_geom(c, image, block);
    if (x[1].known()) {
      if (!(x[1].value % g.K == 0))
        c.fail(ErrorKind::kShape, "input channels are not a multiple of prod(block_shape)");
      out[1] = Dim(x[1].value / g.K);
    }
    if (x[2].known())
      if (!(x[2].value == g.L))
        c.fail(ErrorKind::kShape,
               "input has " + std::to_string(x[2].value) + " blocks, the geometry gives " + std::to_string(g.L));
  }
  c.set_output(0, dt, out);
}

class Col2ImKernel final : public Kernel {
 public:
  explicit Col2ImKernel(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(0);
    y_ = info.output_shape(0);
    std::vector<int64_t> image, block;
    if (!tensor::const_ints(info, 1, &image) || !tensor::const_ints(info, 2, &block))
      info.fail(ErrorKind::kUnsupportedOp, "image_shape and block_shape must be known when the kernel is built");
    g_ = col2im_geom(info, image, block);
    if (x.size() != 3 || x[1] % g_.K != 0 || x[2] != g_.L || y_.size() != 2 + image.size() ||
        y_[1] != x[1] / g_.K)
      info.fail(ErrorKind::kShape, "input " + shape_str(x) + " does not fit the output " + shape_str(y_));
    N_ = x[0];
    C_ = x[1] / g_.K;
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kF32 | ew::kF64 | ew::kIntTypes>(
        ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<const T>();
    T* y = ctx.outputs[0].as<T>();
    const size_t nsp = g_.image.size();
    const int64_t img = shape_numel(Shape(g_.image.begin(), g_.image.end()));
    const int64_t K = g_.K, L = g_.L;
    parallel_for(N_ * C_, ctx.num_threads, 1, [&](int64_t b, int64_t e) {
      std::vector<int64_t> kk(nsp), ll(nsp);
      for (int64_t p = b; p < e; ++p) {
        T* yp = y + p * img;
        std::fill(yp, yp + img, T(0));
        const T* xp = x + p * K * L;
        for (int64_t k = 0; k < K; ++k) {
          int64_t rem = k;
          for (size_t i = nsp; i-- > 0;) {
            kk[i] = rem % g_.block[i];
            rem /= g_.block[i];
          }
          for (int64_t l = 0; l < L; ++l) {
            rem = l;
            int64_t off = 0;
            bool inside = true;
            for (size_t i = nsp; i-- > 0;) {
              ll[i] = rem % g_.blocks[i];
              rem /= g_.blocks[i];
            }
            for (size_t i = 0; i < nsp && inside; ++i) {
              const int64_t pos = ll[i] * g_.stride[i] - g_.pads[i] + kk[i] * g_.dil[i];
              inside = pos >= 0 && pos < g_.image[i];
              off = off * g_.image[i] + pos;
            }
            if (inside) yp[off] += xp[k * L + l];
          }
        }
      }
    });
  }

  Shape y_;
  Col2ImGeom g_;
  int64_t N_ = 0, C_ = 0;
};

// ---- CenterCropPad -----------------------------------------------------------------

void center_crop_pad_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes;
  if (c.node().has_attr("axes")) axes = tensor::normalize_axes(c, c.node().attr_ints("axes"), rank);
  else for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  std::vector<int64_t> shape;
  SymShape out = x;
  if (!c.constant_ints(1, &shape)) {
    for (int64_t a : axes) out[a] = Dim();
    return c.set_output(0, dt, out);
  }
  if (!(shape.size() == axes.size()))
    c.fail(ErrorKind::kShape,
           "shape has " + std::to_string(shape.size()) + " values for " + std::to_string(axes.size()) + " axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!(shape[i] >= 0)) c.fail(ErrorKind::kInvalidArgument, "shape values must be >= 0");
    out[axes[i]] = Dim(shape[i]);
  }
  c.set_output(0, dt, out);
}

class CenterCropPadKernel final : public Kernel {
 public:
  explicit CenterCropPadKernel(const KernelBuildInfo& info) {
    x_ = info.input_shape(0);
    y_ = info.output_shape(0);
    if (x_.size() != y_.size()) info.fail(ErrorKind::kShape, "output rank differs from the input rank");
    for (size_t d = 0; d < x_.size(); ++d) {
      const int64_t diff = x_[d] - y_[d];
      off_.push_back(diff >= 0 ? diff / 2 : -((-diff) / 2));  // input index = output index + off
    }
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const size_t es = dtype_size(ctx.inputs[0].dtype);
    const char* x = static_cast<const char*>(ctx.inputs[0].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    const size_t r = y_.size();
    if (shape_numel(y_) == 0) return;
    if (r == 0) {
      std::memcpy(y, x, es);
      return;
    }
    const Shape xs = tensor_strides(x_);
    const int64_t W = y_[r - 1], rows = shape_numel(y_) / W;
    const int64_t lo = std::max<int64_t>(0, -off_[r - 1]), hi = std::min<int64_t>(W, x_[r - 1] - off_[r - 1]);
    parallel_for(rows, ctx.num_threads, std::max<int64_t>(1, tensor::kCopyGrain / std::max<int64_t>(1, W)),
                 [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        char* dst = y + row * W * static_cast<int64_t>(es);
        int64_t rem = row, src = 0;
        bool inside = true;
        for (size_t d = r - 1; d-- > 0;) {
          const int64_t o = rem % y_[d];
          rem /= y_[d];
          const int64_t i = o + off_[d];
          if (i < 0 || i >= x_[d]) inside = false;
          src += i * xs[d];
        }
        if (!inside || hi <= lo) {
          std::memset(dst, 0, static_cast<size_t>(W) * es);
          continue;
        }
        std::memset(dst, 0, static_cast<size_t>(lo) * es);
        std::memcpy(dst + lo * static_cast<int64_t>(es), x + (src + lo + off_[r - 1]) * static_cast<int64_t>(es),
                    static_cast<size_t>(hi - lo) * es);
        std::memset(dst + hi * static_cast<int64_t>(es), 0, static_cast<size_t>(W - hi) * es);
      }
    });
  }

 private:
  static Shape tensor_strides(const Shape& s) {
    Shape st(s.size(), 1);
    for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
    return st;
  }
  Shape x_, y_;
  std::vector<int64_t> off_;
};

// ---- MaxUnpool ---------------------------------------------------------------------

void max_unpool_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(c.input_dtype(1) == DType::kInt64)) c.fail(ErrorKind::kDType, "MaxUnpool indices must be int64");
  if (!(n.has_attr("kernel_shape"))) c.fail(ErrorKind::kModelFormat, "MaxUnpool needs kernel_shape");
  if (c.has_input(2)) {
    std::vector<int64_t> os;
    if (c.constant_ints(2, &os)) {
      SymShape out;
      for (int64_t v : os) out.push_back(Dim(v));
      return c.set_output(0, dt, out);
    }
    if (c.input_has_shape(0)) return c.set_output(0, dt, SymShape(c.input_shape(0).size()));
    return c.set_output_rank_unknown(0, dt);
  }
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& x = c.input_shape(0);
  if (!(x.size() >= 3)) c.fail(ErrorKind::kShape, "MaxUnpool input must have rank >= 3");
  const size_t nsp = x.size() - 2;
  const std::vector<int64_t> k = ints_attr(n, "kernel_shape", nsp, 1);
  const std::vector<int64_t> s = ints_attr(n, "strides", nsp, 1);
  const std::vector<int64_t> p = ints_attr(n, "pads", 2 * nsp, 0);
  SymShape out{x[0], x[1]};
  for (size_t i = 0; i < nsp; ++i)
    out.push_back(x[2 + i].known() ? Dim((x[2 + i].value - 1) * s[i] - p[i] - p[nsp + i] + k[i]) : Dim());
  c.set_output(0, dt, out);
}

class MaxUnpoolKernel final : public Kernel {
 public:
  explicit MaxUnpoolKernel(const KernelBuildInfo& info)
      : node_(info.node().name), op_(info.node().op_type), s_(unpool_shapes(info)), total_(shape_numel(s_.dflt)) {}

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const int64_t* idx = ctx.inputs[1].as<const int64_t>();
    const int rank = static_cast<int>(s_.out.size());
    const bool same = s_.out == s_.dflt;
    std::vector<int64_t> dst(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      dst[j] = unpool_target(idx[j], rank, s_.dflt.data(), s_.out.data(), total_, same);
      if (dst[j] == kUnpoolOutOfRange)
        throw Error(ErrorKind::kInvalidArgument,
                    "index " + std::to_string(idx[j]) + " is out of range for the unpooled shape " + shape_str(s_.dflt),
                    node_, op_);
      if (dst[j] == kUnpoolOutsideOut)
        throw Error(ErrorKind::kInvalidArgument,
                    "index " + std::to_string(idx[j]) + " falls outside output_shape " + shape_str(s_.out), node_, op_);
    }
    dispatch_bytes(ctx.inputs[0].dtype, [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* x = ctx.inputs[0].as<const E>();
      E* y = ctx.outputs[0].as<E>();
      std::memset(y, 0, ctx.outputs[0].bytes());
      for (int64_t j = 0; j < n; ++j) y[dst[j]] = x[j];
    });
  }

 private:
  std::string node_, op_;
  UnpoolShapes s_;
  int64_t total_;
};

bool movable_supports(const KernelBuildInfo& info, std::string* why) { return tensor::check_movable(info, 0, why); }

bool numeric_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!dtype_is_float(dt) && !dtype_is_integer(dt)) {
    *why = info.node().op_type + " does not support " + dtype_name(dt);
    return false;
  }
  if (info.node().op_type == "Col2Im" && (dt == DType::kFloat16 || dt == DType::kBFloat16)) {
    *why = "Col2Im does not support 16-bit floats";
    return false;
  }
  return true;
}

}  // namespace

UnpoolShapes unpool_shapes(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  const Shape x = info.input_shape(0);
  if (x != info.input_shape(1))
    info.fail(ErrorKind::kShape, "X " + shape_str(x) + " and I " + shape_str(info.input_shape(1)) + " differ in shape");
  if (x.size() < 3) info.fail(ErrorKind::kShape, "MaxUnpool input must have rank >= 3");
  const size_t nsp = x.size() - 2;
  const std::vector<int64_t> k = ints_attr(n, "kernel_shape", nsp, 1);
  const std::vector<int64_t> s = ints_attr(n, "strides", nsp, 1);
  const std::vector<int64_t> p = ints_attr(n, "pads", 2 * nsp, 0);
  UnpoolShapes r;
  r.dflt = {x[0], x[1]};
  for (size_t i = 0; i < nsp; ++i) r.dflt.push_back((x[2 + i] - 1) * s[i] - p[i] - p[nsp + i] + k[i]);
  r.out = info.output_shape(0);
  if (r.out.size() != x.size() || r.out[0] != x[0] || r.out[1] != x[1])
    info.fail(ErrorKind::kShape, "output_shape " + shape_str(r.out) + " does not fit the input " + shape_str(x));
  return r;
}

TWINFER_REGISTER_SCHEMA("Col2Im", col2im_infer);
TWINFER_REGISTER_KERNEL("Col2Im", Backend::kCPU, 0, numeric_supports, make_kernel<Col2ImKernel>);
TWINFER_REGISTER_SCHEMA("CenterCropPad", center_crop_pad_infer);
TWINFER_REGISTER_KERNEL("CenterCropPad", Backend::kCPU, 0, movable_supports, make_kernel<CenterCropPadKernel>);
TWINFER_REGISTER_SCHEMA("MaxUnpool", max_unpool_infer);
TWINFER_REGISTER_KERNEL("MaxUnpool", Backend::kCPU, 0, numeric_supports, make_kernel<MaxUnpoolKernel>);

}  // namespace twinfer::vision
