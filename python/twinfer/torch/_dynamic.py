"""Dynamic dims beyond the batch for ``twinfer.torch.compile``: the user's
``dynamic_axes`` (torch.onnx.export's form) checked and normalised, and a
check that the exported engine really serves other sizes of them."""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch
import torch.utils._pytree as pytree

import twinfer
from twinfer.errors import InvalidArgumentError
from twinfer.torch._export import ExportWarning


def normalize_dynamic_axes(dynamic_axes: dict | None, input_names: list[str], args: Sequence[torch.Tensor]) -> dict:
    """The user's dynamic_axes, in torch.onnx.export's form ({name: {dim: "symbol"}}
    or {name: [dims]}), checked and normalised to {name: {dim: symbol}}. Keys
    are forward's argument names (or output_0, output_1, ... for outputs). A
    symbol names one size: dims sharing it must be equal at run time (batch
    and sequence of input_ids and attention_mask); list form gives each dim a
    symbol of its own."""
    if not dynamic_axes:
        return {}
    if not isinstance(dynamic_axes, dict):
        raise InvalidArgumentError("dynamic_axes must be a dict {input name: {dim: 'symbol'} or [dims]}")
    ranks = {n: a.dim() for n, a in zip(input_names, args)}
    out = {}
    for name, axes in dynamic_axes.items():
        if name not in ranks and not (isinstance(name, str) and name.startswith("output_") and name[7:].isdigit()):
            raise InvalidArgumentError(f"dynamic_axes names '{name}', which is not an input of forward "
                                       f"({list(ranks)}) nor an output (output_0, output_1, ...)")
        if isinstance(axes, (list, tuple)):
            axes = {d: None for d in axes}
        if not isinstance(axes, dict):
            raise InvalidArgumentError(f"dynamic_axes['{name}'] must be {{dim: 'symbol'}} or a list of dims")
        norm = {}
        for d, symbol in axes.items():
            rank = ranks.get(name)
            if not isinstance(d, int) or (rank is not None and not -rank <= d < rank):
                raise InvalidArgumentError(f"dynamic_axes['{name}'] has dim {d!r}, not a dim of a rank-{rank} input")
            d = d % rank if rank else d
            if symbol is not None and (not isinstance(symbol, str) or not symbol.isidentifier()):
                raise InvalidArgumentError(f"dynamic_axes['{name}'][{d}] must name its size with an identifier, "
                                           f"not {symbol!r}")
            norm[d] = symbol or f"{name}_dim{d}"
        out[name] = dict(sorted(norm.items()))
    return out


def probe_dynamic_dims(module: torch.nn.Module, args: Sequence[torch.Tensor], input_names: Sequence[str],
                       axes: dict, compiled: Any) -> str | None:
    """Runs the module and the compiled engine on the example inputs cut one
    shorter along every dynamic input dim the user named; returns what went
    wrong, or None. PyTorch's TorchScript tracer fixes sizes that flow
    through Python ints inside PyTorch's own code (nn.MultiheadAttention's
    reshapes), so an export can claim a dynamic dim its graph cannot change:
    better said at compile time than found at the first other length."""
    probe = []
    for name, a in zip(input_names, args):
        for d in axes.get(name, {}):
            if a.shape[d] < 2:
                return None  # nothing to shrink: no check
            a = a.narrow(d, 0, a.shape[d] - 1)
        probe.append(a)
    shapes = [tuple(p.shape) for p in probe]
    was_training = module.training
    try:
        module.eval()
        with torch.no_grad():
            want = pytree.tree_leaves(module(*probe))
    except Exception:  # the module itself does not take these sizes: nothing to compare
        return None
    finally:
        module.train(was_training)
    try:
        got = pytree.tree_leaves(compiled(*[p.to(compiled.device) for p in probe]))
    except twinfer.Error as e:
        return f"at input shapes {shapes} the engine fails: {e}"
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.to(g.device)
        scale = float(w.abs().max()) if w.numel() and w.is_floating_point() else 0.0
        if g.shape != w.shape or (w.is_floating_point() and not torch.allclose(g, w, rtol=1e-3, atol=1e-4 * max(scale, 1.0))):
            return f"at input shapes {shapes} output {i} differs from the module's"
    return None


def warn_frozen_dims(problem: str | None, name: str, stacklevel: int = 3) -> None:
    if problem:
        warnings.warn(
            f"{name}: the exported engine does not serve other sizes of the dims in dynamic_axes ({problem}). "
            "PyTorch's exporter fixed a size while tracing (the TorchScript exporter does so inside e.g. "
            "nn.MultiheadAttention); try dynamo=True, or export sizes you need with separate compiles.",
            ExportWarning, stacklevel=stacklevel,
        )
