"""Small models for the device runtime's tests, each with a NumPy reference:

- chain: Sin/Cos alternating (every node has a device kernel, so on a GPU or
  the simulated device the whole run is one captured graph after the first);
- mixed: Sin -> If(flag or NaN in x) -> Cos, where If (control flow) runs on
  the host, so placement puts copies on both sides of it (its condition
  reads x, so no plan can fold it and inline the branch: a condition from
  the flag alone would make it a steering input, graph/passes/shape_inputs.h);
- nonzero: a value-dependent shape (NonZero), which no plan can run on a
  device: device engines evaluate it on the host.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "device_test", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    return m


def chain_model(n_ops: int = 6, shape=("N", 33)):
    nodes, prev = [], "x"
    for i in range(n_ops):
        nodes.append(helper.make_node("Sin" if i % 2 else "Cos", [prev], [f"t{i}"], name=f"op{i}"))
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return _model(nodes, [helper.make_tensor_value_info("x", F, list(shape))],
                  [helper.make_tensor_value_info("y", F, list(shape))])


def chain_ref(x: np.ndarray, n_ops: int = 6) -> np.ndarray:
    x = x.astype(np.float64)
    for i in range(n_ops):
        x = np.sin(x) if i % 2 else np.cos(x)
    return x


def mixed_model(width: int = 33):
    one = helper.make_tensor("one", F, [], [1.0])
    then_g = helper.make_graph([helper.make_node("Add", ["s", "one"], ["r"])], "then", [],
                               [helper.make_tensor_value_info("r", F, ["N", width])])
    else_g = helper.make_graph([helper.make_node("Sub", ["s", "one"], ["r2"])], "else", [],
                               [helper.make_tensor_value_info("r2", F, ["N", width])])
    nodes = [
        helper.make_node("Sin", ["x"], ["s"], name="sin"),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="total"),
        helper.make_node("IsNaN", ["total"], ["any_nan"], name="any_nan"),
        helper.make_node("Or", ["flag", "any_nan"], ["cond"], name="cond"),
        helper.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g, name="branch"),
        helper.make_node("Cos", ["b"], ["y"], name="cos"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", width]),
                          helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("y", F, ["N", width])], [one])


def mixed_ref(x: np.ndarray, flag: bool) -> np.ndarray:
    s = np.sin(x.astype(np.float64))
    return np.cos(s + 1 if flag or np.isnan(x.sum()) else s - 1)


def nonzero_model():
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["idx"]),
        helper.make_node("Cast", ["idx"], ["y"], to=F),
    ]
    zero = helper.make_tensor("zero", F, [], [0.0])
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N"])],
                  [helper.make_tensor_value_info("y", F, [1, "K"])], [zero])


def nonzero_ref(x: np.ndarray) -> np.ndarray:
    return np.stack(np.nonzero(x > 0)).astype(np.float32)


class ForeignArray:
    """A device array of some framework twinfer does not know (not torch,
    not CuPy), over a twinfer tensor, with DLPack as torch does it: no
    stream (or -1) orders nothing; a stream is made to wait for the writes."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        return self.t.__dlpack__(stream=-1 if stream is None else stream, **kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def warm_context(device: str, x: np.ndarray, **load_options):
    """chain_model() (loaded with `load_options`) with a context of its own
    warmed up at x's shape on a device input, that input (chain_model(2) of
    x, on the device), and what the context's run of it gives: what a
    capture of that run needs."""
    import twinfer

    producer = twinfer.load(chain_model(2), device=device)
    e = twinfer.load(chain_model(), device=device, **load_options)
    ctx = e.create_context()
    x_dev = producer.run({"x": x}, outputs="device")["y"]
    e.run({"x": x_dev}, context=ctx, outputs="device")["y"].synchronize()  # warm-up: buffers allocated
    return e, ctx, x_dev, chain_ref(chain_ref(x, 2))


class NewShapes:
    """A thread that runs each engine at new shapes (n x 33, n = 3, 4, ...)
    until stopped, checking every answer against chain_ref with the
    engine's depth; what went wrong is in `errors` after stop()."""

    def __init__(self, engines_and_depths, last: int = 200):
        import threading

        self.errors, self._stop = [], threading.Event()
        self._jobs, self._last = engines_and_depths, last
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        try:
            for n in range(3, self._last):
                if self._stop.is_set():
                    return
                x = np.full((n, 33), 0.5, np.float32)
                for eng, depth in self._jobs:
                    got, want = eng.run({"x": x})["y"].numpy(), chain_ref(x, depth)
                    assert np.abs(got - want).max() <= 1e-6 * max(np.abs(want).max(), 1e-30), (n, depth)
        except Exception as ex:  # noqa: BLE001 (reported by stop())
            self.errors.append(ex)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(120)
        assert not self.errors, self.errors
