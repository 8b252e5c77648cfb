"""Cache keys for exported modules: what would make a new export differ.

The key covers the weights (every state_dict tensor's bytes), the code
(class names and the source of each module class's forward), the inputs'
signature (dtypes, and shapes with the batch dim generalised when it is
dynamic) and the export options, plus the torch and twinfer versions, whose
exporters and readers change between releases."""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any, Iterable

import torch


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def hash_tensors(h: "hashlib._Hash", named: Iterable[tuple[str, torch.Tensor]]) -> None:
    for name, t in named:
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(_tensor_bytes(t))


def _class_sources(module: torch.nn.Module) -> list[str]:
    out = []
    for cls in sorted({type(m) for m in module.modules()}, key=lambda c: (c.__module__, c.__qualname__)):
        try:
            src = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            src = ""
        out.append(f"{cls.__module__}.{cls.__qualname__}:{hashlib.sha256(src.encode()).hexdigest()}")
    return out


def input_signature(args, dynamic_batch: bool) -> list[list[Any]]:
    sig = []
    for a in args:
        shape: list[Any] = list(a.shape)
        if dynamic_batch and shape:
            shape[0] = "batch"
        sig.append([str(a.dtype), shape])
    return sig


def versions() -> dict[str, str]:
    import twinfer

    return {"torch": torch.__version__, "twinfer": twinfer.__version__}


def module_key(module: torch.nn.Module, args, options: dict[str, Any]) -> str:
    """Hex digest naming the ONNX export of ``module(*args)`` under ``options``."""
    h = hashlib.sha256()
    head = {
        "kind": "module",
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "code": _class_sources(module),
        "inputs": input_signature(args, options.get("dynamic_batch", False)),
        "options": options,
        "versions": versions(),
    }
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    hash_tensors(h, module.state_dict(keep_vars=False).items())
    return h.hexdigest()


def graph_key(code: str, constants: list[torch.Tensor], signature: list[Any], options: dict[str, Any]) -> str:
    """Hex digest for a torch.compile (dynamo) graph: its code, its frozen
    parameters/buffers and its inputs' signature."""
    h = hashlib.sha256()
    head = {"kind": "fx-graph", "code": code, "inputs": signature, "options": options, "versions": versions()}
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    hash_tensors(h, ((str(i), t) for i, t in enumerate(constants)))
    return h.hexdigest()
