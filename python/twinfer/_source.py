"""Where a model comes from, for the core loader: a path, bytes or an
onnx.ModelProto. A leaf module: twinfer.load and twinfer.quantize both read
models through it."""

from __future__ import annotations

import os
from typing import Any

from .errors import InvalidArgumentError


def model_source(model) -> tuple[Any, bool, str]:
    """(source, is_path, base_dir) for the core loader."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise InvalidArgumentError(f"model file not found: {path}")
        return path, True, ""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), False, ""
    if type(model).__name__ == "ModelProto" and hasattr(model, "SerializeToString"):
        return model.SerializeToString(), False, ""
    if type(model).__module__.startswith("torch") or hasattr(model, "forward"):
        raise InvalidArgumentError(
            "twinfer.load takes an ONNX model (path, bytes or onnx.ModelProto); "
            "for a torch.nn.Module use twinfer.torch.compile(module, example_inputs)"
        )
    raise InvalidArgumentError(f"cannot load a model from a {type(model).__name__}")
