"""Models whose weights and activations are float16 or bfloat16 (exported after
``model.half()``) on the CPU: ops without a 16-bit CPU kernel (BatchNormalization,
InstanceNormalization, GroupNormalization, ConvTranspose, LRN) run in float32
between Casts (graph/passes/widen_precision.cc) instead of being refused; the
outputs keep the model's type. Checked against onnxruntime on the same file."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import run_ort

H = TensorProto.FLOAT16


def _one_node(op, x, inits, attrs=None, opset=18):
    g = helper.make_graph([helper.make_node(op, ["x"] + list(inits), ["y"], **(attrs or {}))], "g",
                          [helper.make_tensor_value_info("x", H, list(x.shape))],
                          [helper.make_tensor_value_info("y", H, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _cases(rng):
    f16 = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    x = f16(2, 4, 5, 7)
    return {
        "BatchNormalization": (x, {"s": f16(4), "b": f16(4), "m": f16(4),
                                   "v": (np.abs(f16(4)) + 0.5).astype(np.float16)}, {}),
        "InstanceNormalization": (x, {"s": f16(4), "b": f16(4)}, {}),
        "ConvTranspose": (x, {"w": f16(4, 3, 3, 2)}, {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
        "LRN": (x, {}, {"size": 3, "alpha": 1e-3}),
    }


@pytest.mark.parametrize("op", ["BatchNormalization", "InstanceNormalization", "ConvTranspose", "LRN"])
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_an_op_without_a_16_bit_kernel_runs_in_float32(rng, op, device):
    x, inits, attrs = _cases(rng)[op]
    m = _one_node(op, x, inits, attrs)
    engine = twinfer.load(m, device=device)
    got = engine.run({"x": x})["y"].numpy()
    want = run_ort(m, {"x": x})[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    # onnxruntime computes these in float16 or float32 as it likes: one fp16
    # rounding of the output apart, relative to the output's size.
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3,
                               atol=4e-3 * float(np.abs(want.astype(np.float32)).max()))
    if device == "cpu":
        ops = [r.op for r in engine.kernel_report({"x": x})]
        assert op in ops and ops.count("Cast") >= 2  # in float32, between Casts


def test_a_half_precision_torch_model(rng, tmp_path):
    """Conv, BatchNorm (in training-free eval form), ReLU, ConvTranspose and
    InstanceNorm exported from a torch model after .half(), BatchNorm kept as
    a node (no constant folding), as a user's fp16 checkpoint comes."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.ConvTranspose2d(8, 4, 2, stride=2), nn.InstanceNorm2d(4, affine=True), nn.Tanh()).eval()
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    net = net.half()
    path = tmp_path / "half.onnx"
    torch.onnx.export(net, torch.randn(1, 3, 9, 11, dtype=torch.float16), str(path), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE)
    import onnx

    model = onnx.load(str(path))
    assert {"BatchNormalization", "ConvTranspose", "InstanceNormalization"} <= {n.op_type for n in model.graph.node}
    x = rng.standard_normal((1, 3, 9, 11)).astype(np.float16)
    got = twinfer.load(model, device="cpu").run({"x": x})["y"].numpy()
    with torch.no_grad():
        want = net.float()(torch.from_numpy(x.astype(np.float32))).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=2e-2)  # fp16 throughout vs float32


def test_int8_of_a_half_model_is_refused_by_name(rng):
    # It loaded, said precision "int8", and quantized nothing (every Conv ran
    # float16), without a word.
    f16 = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float16)  # noqa: E731
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", H, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", H, None)], [numpy_helper.from_array(f16(4, 3, 3, 3), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = [{"x": f16(1, 3, 8, 8)} for _ in range(2)]
    with pytest.raises(twinfer.InvalidArgumentError, match=r"quantizes float32 layers, and this model's are float16 "
                                                           r"\(node 'conv'"):
        twinfer.load(m, device="cpu", precision="int8", calibration=data, progress=False)
