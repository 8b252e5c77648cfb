"""torch.nn.Module -> ONNX file, with PyTorch's refusals turned into twinfer
errors that say what to try next."""

from __future__ import annotations

import contextlib
import io
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


def export_onnx(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    path: str | os.PathLike,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    dynamo: bool = False,
    opset: int | None = None,
) -> None:
    """Export ``module(*args)`` to the ONNX file ``path`` (weights inside the file
    when they fit, else as external data next to it). Raises ExportError."""
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
    chatter = io.StringIO()
    try:
        with _export_mode(), contextlib.redirect_stdout(chatter):
            torch.onnx.export(module, tuple(args), os.fspath(path), dynamo=dynamo, **kwargs)
    except Exception as e:  # the exporters raise many types; all mean "could not export"
        which = "torch.export-based (dynamo=True)" if dynamo else "TorchScript (dynamo=False)"
        message = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(e).__name__}: {e}").strip()  # no terminal colours
        if len(message) > 2000:
            message = message[:2000] + " ..."
        raise ExportError(
            f"PyTorch's {which} ONNX exporter refused {type(module).__name__}:\n  {message}\n{_advice(dynamo)}"
        ) from e


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
