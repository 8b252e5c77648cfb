"""twinfer as an ``onnx.backend`` (the interface the ONNX backend conformance
suite drives, as onnxruntime.backend does):

>>> import twinfer.backend as backend
>>> rep = backend.prepare(model, "CPU")      # model: onnx.ModelProto, path or bytes
>>> outputs = rep.run([x, y])                 # numpy arrays in graph-input order
>>> backend.run_model(model, [x, y], "CPU")
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _core
from .engine import Engine, load


def _device(device: str) -> str:
    d = str(device).upper()
    if d.startswith("CUDA"):
        return "cuda" + d[4:].lower()
    if d == "CPU":
        return "cpu"
    if d == "SIM":  # the simulated GPU (twinfer.testing): the CUDA path, tested without one
        return "sim"
    raise ValueError(f"unknown device {device!r}")


def supports_device(device: str) -> bool:
    d = str(device).upper()
    return d in ("CPU", "SIM") or (d.startswith("CUDA") and _core.cuda_available())


class BackendRep:
    """A prepared model: ``run`` takes inputs by position (graph inputs that
    are not initializers, in order) or by name, and returns numpy arrays in
    graph-output order (lists of them for sequences, None for an empty
    optional)."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def run(self, inputs, **kwargs) -> tuple:
        specs = self.engine.inputs
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
                inputs = [inputs]
            feeds = {s.name: x for s, x in zip(specs, inputs)}
        out = self.engine.run(feeds)
        return tuple(_numpy(out[s.name]) for s in self.engine.outputs)


def _numpy(value):
    """Tensors as NumPy arrays (strings as object arrays of str), sequences as
    lists of them, maps as dicts, None as None."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, list):
        return [_numpy(v) for v in value]
    return value.numpy()


def prepare(model, device: str = "CPU", **kwargs) -> BackendRep:
    options = {k: v for k, v in kwargs.items() if k in ("precision", "num_threads", "optimize")}
    return BackendRep(load(model, device=_device(device), **options))


def run_model(model, inputs, device: str = "CPU", **kwargs) -> tuple:
    return prepare(model, device, **kwargs).run(inputs)


def run_node(node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
    raise NotImplementedError("twinfer runs whole models; wrap the node in a graph and use run_model")


def is_compatible(model, device: str = "CPU", **kwargs) -> bool:
    return True
