// Host runs of the arithmetic the CUDA kernels share with the host
// (__host__ __device__ code): the fused activations, the int8 epilogue,
// QBinary's element and the int8 convolution's index math. Private (_test_*)
// helpers for tests/test_index_math.py, which checks them against NumPy, and
// (the channels-last kernels' index math, backends/cuda/channels_last_index.h,
// header-only and free of CUDA headers) tests/test_channels_last_cuda.py.
#include <pybind11/stl.h>

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "backends/cuda/channels_last_index.h"
#include "backends/cuda/conv_input_pad.h"
#include "backends/cuda/depthwise_math.h"
#include "bindings/bindings.h"
#include "graph/ir.h"
#include "ops/elementwise/half_rows.h"
#include "ops/nn/activation_fn.h"
#include "ops/nn/batch_broadcast.h"
#include "ops/quant/conv_geometry.h"
#include "ops/quant/quant_math.h"

namespace py = pybind11;

namespace twinfer::bindings {

namespace {

nn::ActFn activation(const std::string& name, const std::vector<float>& params) {
  graph::Node n;
  n.name = "test";
  graph::Attribute a;
  a.type = graph::Attribute::Type::kString;
  a.s = name;
  n.attrs["activation"] = a;
  graph::Attribute p;
  p.type = graph::Attribute::Type::kFloats;
  p.floats = params;
  n.attrs["activation_params"] = p;
  return nn::ActFn::of(nn::parse_activation(n));
}

}  // namespace

void bind_kernel_math(py::module_& m) {
  m.def("_test_floats_to_halves_soft", [](const std::vector<float>& x) {
    std::vector<uint16_t> y(x.size());
    ew::floats_to_halves_soft(x.data(), y.data(), static_cast<int64_t>(x.size()));
    return y;
  });
  m.def("_test_halves_to_floats_soft", [](const std::vector<uint16_t>& x) {
    std::vector<float> y(x.size());
    ew::halves_to_floats_soft(x.data(), y.data(), static_cast<int64_t>(x.size()));
    return y;
  });
  m.def("_test_activation", [](const std::string& name, const std::vector<float>& params, const std::vector<float>& x) {
    const nn::ActFn f = activation(name, params);
    std::vector<float> y;
    for (float v : x) y.push_back(f(v));
    return y;
  });

  // y for acc [rows, n]: floats, or the quantized integers when y_scale > 0.
  m.def("_test_qlinear_epilogue",
        [](const std::vector<int32_t>& acc, int64_t n, const std::vector<float>& scale, const std::vector<float>& bias,
           const std::vector<int32_t>& colsum, int32_t x_zero, const std::string& act,
           const std::vector<float>& act_params, float y_scale, int32_t y_zero, bool y_unsigned) {
          quant::LinearEpilogue e;
          e.scale = scale.data();
          e.bias = bias.empty() ? nullptr : bias.data();
          e.colsum = colsum.data();
          e.x_zero = x_zero;
          e.act = activation(act, act_params);
          e.quantized = y_scale > 0.f;
          e.y_scale = y_scale;
          e.y_zero = y_zero;
          e.lo = static_cast<float>((y_unsigned ? 0 : -128) - y_zero);
          e.hi = static_cast<float>((y_unsigned ? 255 : 127) - y_zero);
          std::vector<double> out;
          for (size_t i = 0; i < acc.size(); ++i) {
            const float v = e.value(acc[i], static_cast<int64_t>(i) % n);
            out.push_back(e.quantized ? e.quantize(v) : v);
          }
          return out;
        });

  m.def("_test_qbinary",
        [](const std::vector<int32_t>& a, const std::vector<int32_t>& b, float a_scale, int32_t a_zero, float b_scale,
           int32_t b_zero, float y_scale, int32_t y_zero, bool y_unsigned, bool mul, bool relu) {
          quant::QBinaryParams p;
          p.a = {a_scale, a_zero};
          p.b = {b_scale, b_zero};
          p.y_scale = y_scale;
          p.y_zero = y_zero;
          if (relu) p.floor = 0.f;
          p.lo = static_cast<float>((y_unsigned ? 0 : -128) - y_zero);
          p.hi = static_cast<float>((y_unsigned ? 255 : 127) - y_zero);
          std::vector<int32_t> out;
          for (size_t i = 0; i < a.size(); ++i)
            out.push_back(mul ? quant::qbinary_one<int32_t, true>(a[i], b[i], p)
                              : quant::qbinary_one<int32_t, false>(a[i], b[i], p));
          return out;
        });

  // (cols [positions, taps] of group g as source offsets, -1 in the padding;
  //  y offsets [positions, out_channels]).
  m.def("_test_conv_geometry", [](const std::vector<int64_t>& x, const std::vector<int64_t>& y,
                                  const std::vector<int64_t>& window, int64_t group, bool x_last, bool y_last,
                                  int64_t g, bool bits32, bool taps_last, bool rows) {
    // x: B, C, H, W; y: O, OH, OW; window: KH, KW, SH, SW, PH, PW, DH, DW
    quant::ConvGeometry c;
    c.batch = x.at(0);
    c.channels = x.at(1);
    c.height = x.at(2);
    c.width = x.at(3);
    c.out_channels = y.at(0);
    c.out_height = y.at(1);
    c.out_width = y.at(2);
    c.kernel_h = window.at(0);
    c.kernel_w = window.at(1);
    c.stride_h = window.at(2);
    c.stride_w = window.at(3);
    c.pad_h = window.at(4);
    c.pad_w = window.at(5);
    c.dil_h = window.at(6);
    c.dil_w = window.at(7);
    c.group = group;
    c.x_channels_last = x_last;
    c.y_channels_last = y_last;
    c.taps_channels_last = taps_last;
    std::vector<std::vector<int64_t>> cols(static_cast<size_t>(c.positions()));
    std::vector<std::vector<int64_t>> ys(static_cast<size_t>(c.positions()));
    for (int64_t p = 0; p < c.positions(); ++p) {
      // bits32: the int32_t forms the CUDA kernels use when fits_32_bits.
      // rows: by rows of KW taps (tap_row_as, the im2col kernel's form for
      // the weights' own K order).
      for (int64_t k = 0; k < c.taps(); ++k)
        if (rows)
          cols[p].push_back(bits32 ? c.tap_in_row_as<int32_t>(
                                         c.tap_row_as<int32_t>(static_cast<int32_t>(p),
                                                               static_cast<int32_t>(k - k % c.kernel_w),
                                                               static_cast<int32_t>(g)),
                                         static_cast<int32_t>(k % c.kernel_w))
                                   : c.tap_in_row_as<int64_t>(c.tap_row_as<int64_t>(p, k - k % c.kernel_w, g),
                                                              k % c.kernel_w));
        else
          cols[p].push_back(bits32 ? c.source_as<int32_t>(static_cast<int32_t>(p), static_cast<int32_t>(k),
                                                          static_cast<int32_t>(g))
                                   : c.source(p, k, g));
      for (int64_t o = 0; o < c.out_channels; ++o)
        ys[p].push_back(bits32 ? c.y_offset_as<int32_t>(static_cast<int32_t>(p), static_cast<int32_t>(o))
                               : c.y_offset(p, o));
    }
    return py::make_tuple(cols, ys);
  }, py::arg("x"), py::arg("y"), py::arg("window"), py::arg("group"), py::arg("x_last"), py::arg("y_last"),
        py::arg("g"), py::arg("bits32") = false, py::arg("taps_last") = false, py::arg("rows") = false);

  // ConvGeometry::weights_taps_last of w [O, C/group, KH, KW] (flat).
  m.def("_test_weights_taps_last", [](const std::vector<int8_t>& w, int64_t o, int64_t c, int64_t group, int64_t kh,
                                      int64_t kw) {
    quant::ConvGeometry g;
    g.out_channels = o, g.channels = c, g.group = group, g.kernel_h = kh, g.kernel_w = kw;
    return g.weights_taps_last(w.data());
  });

  // The conv epilogue's channel of every element of y [n, c, spatial] as stored.
  // The depthwise kernel's output for NHWC x [N, H, W, C] and weights
  // [KH, KW, C], computed by packs of `pack` channels as the kernel does
  // (NaN where no pack wrote).
  m.def("_test_depthwise_nhwc",
        [](const std::vector<float>& x, const std::vector<int64_t>& x_shape, const std::vector<float>& w, int64_t kh,
           int64_t kw, int64_t out_h, int64_t out_w, const std::vector<int64_t>& stride,
           const std::vector<int64_t>& pad, const std::vector<int64_t>& dil, int pack) {
          const int64_t n = x_shape[0], c = x_shape[3];
          const cuda::DepthwiseGeometry g(c, x_shape[1], x_shape[2], out_h, out_w, kh, kw, stride[0], stride[1],
                                          pad[0], pad[1], dil[0], dil[1], pack);
          std::vector<float> y(static_cast<size_t>(n * out_h * out_w * c), std::nanf(""));
          auto run = [&](auto width) {
            constexpr int V = decltype(width)::value;
            auto reader = [](const std::vector<float>& base) {
              return [&base](int64_t off, float* v) {
                for (int k = 0; k < V; ++k) v[k] = base.at(static_cast<size_t>(off + k));
              };
            };
            for (int64_t p = 0; p < g.packs(n, V); ++p) {
              int64_t b, oh, ow, c0;
              const int64_t at = g.position(static_cast<uint64_t>(p), V, &b, &oh, &ow, &c0);
              float acc[V] = {};
              g.accumulate<V>(b, oh, ow, c0, reader(x), reader(w), acc);
              for (int k = 0; k < V; ++k) y.at(static_cast<size_t>(at + k)) = acc[k];
            }
          };
          if (pack == 1) run(std::integral_constant<int, 1>{});
          else if (pack == 4) run(std::integral_constant<int, 4>{});
          else if (pack == 8) run(std::integral_constant<int, 8>{});
          else throw std::invalid_argument("pack must be 1, 4 or 8");
          return y;
        });

  m.def("_test_conv_epilogue_channels", [](int64_t n, int64_t c, int64_t spatial, bool channels_last) {
    const cuda::ConvChannelIndex channel_of(c, spatial, channels_last);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n * c * spatial; ++i)
      out.push_back(static_cast<int64_t>(channel_of(static_cast<uint64_t>(i))));
    return out;
  });

  // The padded copy of a conv's x with unequal pads (backends/cuda/conv_input_pad.h):
  // None where it refuses, else (padded x, pads cuDNN then takes, the 3-D
  // copy's row_bytes, rows, slices, pitch, slice_rows, first_byte, first_row,
  // buffer_bytes). x is logical [N, C, spatial...].
  m.def("_test_conv_input_pad", [](const std::vector<int64_t>& x, const std::vector<int64_t>& pad_begin,
                                   const std::vector<int64_t>& pad_end, bool channels_last, int64_t elem) -> py::object {
    nn::ConvSpec c;
    c.x = Shape(x.begin(), x.end());
    c.channels_last = channels_last;
    c.win.nsp = pad_begin.size();
    c.win.pad_begin = pad_begin;
    c.win.pad_end = pad_end;
    cuda::ConvInputPad p;
    std::string why;
    if (!cuda::plan_conv_input_pad(&c, elem, &p, &why)) return py::none();
    if (c.x != p.padded_x || c.win.pad_begin != c.win.pad_end) throw std::logic_error("spec not rewritten");
    return py::make_tuple(std::vector<int64_t>(p.padded_x.begin(), p.padded_x.end()), c.win.pad_begin,
                          py::make_tuple(p.row_bytes, p.rows, p.slices, p.pitch, p.slice_rows, p.first_byte,
                                         p.first_row, p.buffer_bytes));
  });

  // Per pooling output element: (od, oh, ow, base) and the step between spatial
  // positions; x: N, C, D, H, W; y_spatial: OD, OH, OW.
  m.def("_test_pool_index", [](const std::vector<int64_t>& x, const std::vector<int64_t>& y_spatial,
                               bool channels_last) {
    cuda::PoolIndex ix;
    ix.channels = x.at(1);
    ix.in_d = x.at(2), ix.in_h = x.at(3), ix.in_w = x.at(4);
    ix.out_d = y_spatial.at(0), ix.out_h = y_spatial.at(1), ix.out_w = y_spatial.at(2);
    ix.channels_last = channels_last;
    std::vector<std::vector<int64_t>> out;
    const int64_t total = x.at(0) * x.at(1) * ix.out_d * ix.out_h * ix.out_w;
    for (int64_t i = 0; i < total; ++i) {
      int64_t od, oh, ow, base;
      ix.position(i, &od, &oh, &ow, &base);
      out.push_back({od, oh, ow, base});
    }
    return py::make_tuple(out, ix.step());
  });

  // (outer, len, inner) of a reduction, or the reason there is none.
  m.def("_test_reduce_block", [](const std::vector<int64_t>& shape, const std::vector<int64_t>& axes) {
    std::vector<char> red(shape.size(), 0);
    for (int64_t a : axes) red.at(static_cast<size_t>(a)) = 1;
    int64_t outer, len, inner;
    std::string why;
    if (!cuda::reduce_block(shape, red, &outer, &len, &inner, &why)) return py::object(py::str(why));
    return py::object(py::make_tuple(outer, len, inner));
  });

  // A reduction over dims that are not one block, as the CUDA kernel runs
  // it (backends/cuda/rows.cu): the x offset each gathered element reads,
  // through the OffsetCalc the kernel gets, and (outer, len).
  m.def("_test_source_batch", [](const std::vector<int64_t>& src_batch, const std::vector<int64_t>& y_batch) {
    nn::BatchBroadcast g;
    if (src_batch.size() != y_batch.size() ||
        !nn::make_batch_broadcast(src_batch.data(), y_batch.data(), static_cast<int>(y_batch.size()), &g))
      throw Error(ErrorKind::kInvalidArgument, "batch dims of equal rank, at most 8");
    int64_t nb = 1;
    for (int64_t d : y_batch) nb *= d;
    std::vector<int64_t> r;
    for (int64_t b = 0; b < nb; ++b) r.push_back(nn::source_batch(g, b));
    return r;
  });
  m.def("_test_reduce_gather", [](const std::vector<int64_t>& shape, const std::vector<int64_t>& axes) {
    std::vector<char> red(shape.size(), 0);
    for (int64_t a : axes) red.at(static_cast<size_t>(a)) = 1;
    std::vector<int64_t> dims, strides;
    int64_t outer, len;
    cuda::reduce_gather(shape, red, &dims, &strides, &outer, &len);
    ew::OffsetCalc<1> src;
    if (!ew::offsets_for(dims, strides, &src)) return py::object(py::none());
    std::vector<int64_t> offsets(static_cast<size_t>(outer * len));
    for (size_t i = 0; i < offsets.size(); ++i) {
      int64_t o[1];
      src.get(i, o);
      offsets[i] = o[0];
    }
    return py::object(py::make_tuple(offsets, outer, len));
  });
}

}  // namespace twinfer::bindings
