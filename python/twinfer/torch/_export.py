"""torch.nn.Module -> ONNX file, with PyTorch's refusals turned into twinfer
errors that say what to try next."""

from __future__ import annotations

import contextlib
import inspect
import io
import linecache
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from twinfer.errors import Error

DEFAULT_OPSET = 17  # what twinfer's op set is written against; the dynamo exporter may pick newer


class ExportError(Error):
    """PyTorch could not export the module to ONNX. The message carries the
    exporter's own words and what to try instead."""


class ExportWarning(UserWarning):
    """The export succeeded, but PyTorch's tracer fixed a value-dependent
    decision of the module's own code (``if x.sum() > 0``, ``int(x.max())``...)
    to what the example inputs gave: the engine may be wrong for other inputs."""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _tracer_notes(caught: list) -> list[str]:
    """``file:line: message`` for each distinct TracerWarning raised outside
    PyTorch itself (PyTorch's own input checks raise them harmlessly)."""
    tracer = getattr(torch.jit, "TracerWarning", None)
    notes: dict[tuple[str, int], str] = {}
    for w in caught:
        if tracer is None or not issubclass(w.category, tracer):
            continue
        if os.path.abspath(w.filename).startswith(_TORCH_DIR):
            continue
        line = linecache.getline(w.filename, w.lineno).strip() or str(w.message).split(". ")[0].strip()
        notes.setdefault((w.filename, w.lineno), f"{w.filename}:{w.lineno}: {line}")
    return list(notes.values())


def warn_tracer_notes(notes: Sequence[str], what: str, stacklevel: int = 3) -> None:
    """One ExportWarning listing where the tracer froze value-dependent code
    (the default stacklevel points at the caller of the function calling this)."""
    if not notes:
        return
    shown = "\n".join(f"  {n}" for n in notes[:5]) + (f"\n  ... {len(notes) - 5} more" if len(notes) > 5 else "")
    warnings.warn(
        f"PyTorch's TorchScript exporter traced {what} through code that depends on tensor values; the ONNX "
        f"file (and twinfer's engine) keeps what the example inputs gave there, which may be wrong for other "
        f"inputs:\n{shown}\nIf these lines only check inputs, ignore this. Otherwise use dynamo=True (it "
        "refuses such code rather than freezing it), or rewrite it with tensor ops (torch.where).",
        ExportWarning, stacklevel=stacklevel,
    )


def _advice(dynamo: bool) -> str:
    other = "dynamo=False (the TorchScript exporter)" if dynamo else "dynamo=True (the torch.export-based exporter)"
    return (
        "What to try:\n"
        f"  - the other exporter: twinfer.torch.compile(..., {other});\n"
        "  - make forward take and return tensors only (bind other arguments with a small wrapper nn.Module);\n"
        "  - remove data-dependent Python control flow from forward (if/for on tensor values);\n"
        "  - dynamic_batch=False if the model cannot work with a symbolic batch dimension;\n"
        "  - or export to ONNX yourself and use twinfer.load(path)."
    )


@contextlib.contextmanager
def _export_mode():
    """No autograd, and PyTorch's fused fast paths (e.g. nn.TransformerEncoderLayer's
    `_transformer_encoder_layer_fwd`) switched off: they have no ONNX form."""
    mha = getattr(torch.backends, "mha", None)
    was = mha.get_fastpath_enabled() if mha is not None else None
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter chatter (tracer warnings, deprecations)
            yield
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(was)


def _dynamic_shapes(args: Sequence[torch.Tensor], dynamic_axes: dict[str, dict[int, str]], names: Sequence[str]):
    """dynamic_axes (TorchScript style) -> dynamic_shapes for torch.export."""
    from torch.export import Dim

    shapes = []
    for name, a in zip(names, args):
        axes = dynamic_axes.get(name, {})
        shapes.append({d: Dim.DYNAMIC for d in axes} if axes and a.dim() > 0 else None)
    return tuple(shapes)


class _DefaultsBound(torch.nn.Module):
    """``inner`` called with the example's tensors only: its other arguments
    keep their Python defaults, frozen into the trace. The TorchScript
    exporter otherwise made a default such as ``scale: float = 2.0`` an extra
    graph input that no call fed."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner(*args)


def _has_defaults_past(module: torch.nn.Module, n: int) -> bool:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.default is not inspect.Parameter.empty for p in positional[n:])


def export_onnx(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    path: str | os.PathLike,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    dynamo: bool = False,
    opset: int | None = None,
) -> list[str]:
    """Export ``module(*args)`` to the ONNX file ``path`` (weights inside the file
    when they fit, else as external data next to it). Raises ExportError.

    Returns the places where the TorchScript tracer froze a value-dependent
    decision of code outside PyTorch (see ``warn_tracer_notes``); empty for
    ``dynamo=True``."""
    dynamic_axes = dynamic_axes or {}
    kwargs: dict[str, Any] = dict(input_names=list(input_names), output_names=list(output_names))
    if dynamo:
        if dynamic_axes:
            kwargs["dynamic_shapes"] = _dynamic_shapes(args, dynamic_axes, input_names)
        if opset is not None:
            kwargs["opset_version"] = opset
        kwargs["verbose"] = False
    else:
        kwargs["dynamic_axes"] = dynamic_axes or None
        kwargs["opset_version"] = opset or DEFAULT_OPSET
        if _has_defaults_past(module, len(args)):
            module = _DefaultsBound(module)
    chatter = io.StringIO()
    try:
        with _export_mode(), contextlib.redirect_stdout(chatter), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # recorded, not shown: only tracer warnings are reported
            torch.onnx.export(module, tuple(args), os.fspath(path), dynamo=dynamo, **kwargs)
    except Exception as e:  # the exporters raise many types; all mean "could not export"
        which = "torch.export-based (dynamo=True)" if dynamo else "TorchScript (dynamo=False)"
        message = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(e).__name__}: {e}").strip()  # no terminal colours
        if len(message) > 2000:
            message = message[:2000] + " ..."
        raise ExportError(
            f"PyTorch's {which} ONNX exporter refused {type(module).__name__}:\n  {message}\n{_advice(dynamo)}"
        ) from e
    return [] if dynamo else _tracer_notes(caught)


def export_to_cache_dir(folder: Path, stem: str, do_export) -> Path:
    """Run ``do_export(tmp_path)`` in a private temporary folder, then move the
    ONNX file (and any external-data files) into ``folder`` atomically, the
    .onnx last, so a concurrent process sees either nothing or a whole model."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{stem}.onnx"
    with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
        tmp_path = Path(tmp) / final.name
        do_export(tmp_path)
        for f in sorted(Path(tmp).iterdir(), key=lambda p: p.name == final.name):
            os.replace(f, folder / f.name)
    return final
