"""Small helpers shared by the tests: build one-node / small ONNX models with
the onnx helper API and run them in twinfer and in the independent references
(onnxruntime, onnx.reference.ReferenceEvaluator)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def np_to_onnx_dtype(dt) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def make_model(nodes, inputs, outputs, initializers=(), opset=OPSET, name="test") -> onnx.ModelProto:
    """inputs/outputs: list of (name, numpy dtype, shape or None) or ValueInfoProto."""

    def vi(x):
        if isinstance(x, onnx.ValueInfoProto):
            return x
        n, dt, shape = x
        return helper.make_tensor_value_info(n, np_to_onnx_dtype(dt), shape)

    inits = [i if isinstance(i, onnx.TensorProto) else numpy_helper.from_array(i[1], i[0]) for i in initializers]
    graph = helper.make_graph(list(nodes), name, [vi(i) for i in inputs], [vi(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)  # onnxruntime accepts up to 10/11
    return model


def contrib_model(nodes, inputs, outputs, inits=None, opset=OPSET) -> onnx.ModelProto:
    """A model importing onnxruntime's com.microsoft domain (its contrib ops);
    inits: {name: array}."""
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = min(model.ir_version, 10)
    return model


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    if model.ir_version > 10:
        # onnxruntime builds accept IR 10 or 11 at most, the onnx package makes
        # newer: the GPU machine's pair refuses models the IR of its onnx.
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = 10
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def quantize_with_onnxruntime(float_path, q_path, samples: list[dict], **options) -> None:
    """onnxruntime's quantize_static of float_path into q_path, calibrated on
    `samples` (feed dicts); options go to quantize_static (quant_format, ...)."""
    from onnxruntime import quantization

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    quantization.quantize_static(str(float_path), str(q_path), Reader(), **options)


def ort_quantized_model(module, folder, rng, activation: str, per_channel: bool, shape=(2, 3, 15, 17),
                        quant_format: str = "QOperator"):
    """A torch module exported (input "x" with a dynamic batch, output "y")
    and quantized by onnxruntime's quantize_static in `quant_format`
    ("QOperator": QLinearConv, QLinearMatMul, ...; "QDQ": QuantizeLinear /
    DequantizeLinear pairs around float ops), calibrated on 6 random inputs
    of `shape`: the loaded onnx model."""
    import torch
    from onnxruntime import quantization

    float_path, q_path = Path(folder) / "f.onnx", Path(folder) / "q.onnx"
    torch.onnx.export(module.eval(), torch.randn(*shape), str(float_path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False, dynamic_axes={"x": {0: "n"}})
    samples = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(6)]
    quantize_with_onnxruntime(float_path, q_path, samples, quant_format=getattr(quantization.QuantFormat, quant_format),
                              activation_type=getattr(quantization.QuantType, activation),
                              weight_type=quantization.QuantType.QInt8, per_channel=per_channel)
    return onnx.load(str(q_path))


def run_ort_named(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """run_ort's outputs by name."""
    return dict(zip([o.name for o in model.graph.output], run_ort(model, feeds)))


def run_reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def run_twinfer(model: onnx.ModelProto, feeds: dict, **load_options) -> list[np.ndarray]:
    import twinfer

    engine = twinfer.load(model, device="cpu", **load_options)
    out = engine.run(feeds)
    return [out[o.name].numpy() for o in model.graph.output]


def assert_close(actual, expected, rtol=1e-5, atol=1e-5, what=""):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def run_on_device(model, feeds: dict, device: str, **load_options) -> dict:
    """Runs ``model`` on ``device`` placing nodes as CUDA would with no CPU
    fallback (on the simulated device: proof that every node has a CUDA
    kernel whose supports() takes it; on a GPU: the CUDA kernels themselves),
    checks that every step ran there, and returns {output name: numpy array}."""
    import twinfer

    eng = twinfer.load(model, device=device, sim_coverage="cuda", allow_cpu_fallback=False, **load_options)
    out = eng.run(feeds)
    rows = eng.kernel_report({k: v.shape for k, v in feeds.items()})
    assert all(r.backend in (device, "copy") for r in rows), rows  # every node ran on the device
    return {k: v.numpy() for k, v in out.items()}



def dequantized_lstm_model(path) -> onnx.ModelProto:
    """The model at `path` with each com.microsoft DynamicQuantizeLSTM
    replaced by a float LSTM on its dequantized weights: the float
    reference of onnxruntime's dynamic int8 LSTM. (Its W and R are
    [directions, input, 4 * hidden], the transpose of LSTM's.)"""
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    init = {t.name: t for t in model.graph.initializer}
    nodes = []
    for n in model.graph.node:
        if n.op_type != "DynamicQuantizeLSTM":
            nodes.append(n)
            continue
        ins = list(n.input) + [""] * (12 - len(n.input))
        floats = []
        for k, scale, zero in ((1, 8, 9), (2, 10, 11)):
            q = numpy_helper.to_array(init[ins[k]]).astype(np.float32)
            s, z = (numpy_helper.to_array(init[ins[i]]).astype(np.float32) for i in (scale, zero))
            dirs = q.shape[0]
            f = (q - z.reshape(dirs, 1, -1)) * s.reshape(dirs, 1, -1)
            name = f"{n.name or n.output[0]}_{k}_float"
            model.graph.initializer.append(numpy_helper.from_array(f.transpose(0, 2, 1).copy(), name))
            floats.append(name)
        lstm = helper.make_node("LSTM", [ins[0], *floats] + ins[3:8], list(n.output), name=(n.name or "") + "_float")
        lstm.attribute.extend(n.attribute)
        nodes.append(lstm)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model
