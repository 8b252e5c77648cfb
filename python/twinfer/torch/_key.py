"""Cache keys for exported modules: what would make a new export differ.

The key covers the weights (every state_dict tensor's bytes), the code (class
names, and the source and bytecode of every method each module class defines
or inherits below nn.Module; functions they call elsewhere are not followed),
the inputs' signature (dtypes, and shapes with the batch dim and any other
dynamic dims generalised) and the export options, plus the Python, torch and twinfer
versions, whose bytecode, exporters and readers change between releases."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
import types
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


def _hash_code(h: "hashlib._Hash", code: types.CodeType) -> None:
    """A code object's bytecode, names and constants (nested functions too)."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _hash_code(h, c)
        else:
            h.update(_const_repr(c).encode())


def _const_repr(c: Any) -> str:
    """repr, with sets in a fixed order (string hashing differs between processes)."""
    if isinstance(c, (frozenset, set)):
        return "{" + ",".join(sorted(_const_repr(x) for x in c)) + "}"
    if isinstance(c, tuple):
        return "(" + ",".join(_const_repr(x) for x in c) + ")"
    return repr(c)


def _class_code(cls: type) -> str:
    """Digest of the methods a module class defines (its own and inherited ones,
    up to nn.Module): the source where Python can find it, and the bytecode
    always, so classes defined in a REPL, in exec'd code or in a notebook whose
    source is gone still change the key when their code changes."""
    h = hashlib.sha256()
    for klass in cls.__mro__:
        if klass is torch.nn.Module or klass is object:
            break
        for attr, value in sorted(vars(klass).items()):
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            code = getattr(fn, "__code__", None)
            if not isinstance(code, types.CodeType):
                continue
            h.update(f"{klass.__qualname__}.{attr}|".encode())
            try:
                h.update(inspect.getsource(fn).encode())
            except (OSError, TypeError):
                pass
            _hash_code(h, code)
    return h.hexdigest()


def _class_sources(module: torch.nn.Module) -> list[str]:
    return [
        f"{cls.__module__}.{cls.__qualname__}:{_class_code(cls)}"
        for cls in sorted({type(m) for m in module.modules()}, key=lambda c: (c.__module__, c.__qualname__))
    ]


def input_signature(args, dynamic_batch: bool, dynamic_dims: dict[int, Iterable[int]] | None = None) -> list[list[Any]]:
    """dtypes and shapes, with the dims that are dynamic (the batch, and
    `dynamic_dims` {input index: dims}) generalised: any size shares the key."""
    sig = []
    for i, a in enumerate(args):
        shape: list[Any] = list(a.shape)
        if dynamic_batch and shape:
            shape[0] = "batch"
        for d in (dynamic_dims or {}).get(i, ()):
            shape[d] = "dynamic"
        sig.append([str(a.dtype), shape])
    return sig


def versions() -> dict[str, str]:
    import twinfer

    # Python's too: the key hashes bytecode, which changes between Python versions.
    return {"torch": torch.__version__, "twinfer": twinfer.__version__, "python": sys.version.split()[0]}


def _dynamic_dims(options: dict[str, Any]) -> dict[int, list[int]]:
    """{input index: dims} from the options' dynamic_axes, keyed by input name."""
    axes = options.get("dynamic_axes") or {}
    return {i: list(axes[n]) for i, n in enumerate(options.get("inputs", [])) if n in axes}


def module_key(module: torch.nn.Module, args, options: dict[str, Any]) -> str:
    """Hex digest naming the ONNX export of ``module(*args)`` under ``options``."""
    h = hashlib.sha256()
    head = {
        "kind": "module",
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "code": _class_sources(module),
        "inputs": input_signature(args, options.get("dynamic_batch", False), _dynamic_dims(options)),
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
