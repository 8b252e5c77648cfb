"""``torch.compile(model, backend="twinfer")``: a TorchDynamo backend.

Dynamo hands a backend one captured graph (an ``fx.GraphModule``) and the
example inputs it will be called with. Recent PyTorch lifts the model's
parameters and buffers into graph inputs; they come back unchanged on every
call, so they are frozen into the ONNX file as constants (where twinfer can fold
them) and only the real activations are fed per call. When Dynamo makes a dim
symbolic, the graph also takes that size as a ``SymInt`` input; it is recomputed
inside the exported graph from the tensor it belongs to, and the dim is exported
as dynamic.

A graph twinfer cannot take (export refused, an op missing, non-tensor
outputs) runs eagerly in PyTorch instead, with a warning naming the reason.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

import twinfer
from twinfer._cache import cache_dir
from twinfer._progress import Steps
from twinfer.torch._bridge import TorchRunner, as_torch_device, twinfer_device
from twinfer.torch._export import export_onnx, export_to_cache_dir
from twinfer.torch._key import graph_key

BACKEND_NAME = "twinfer"


class _Unsupported(Exception):
    """This graph cannot go to twinfer; run it eagerly."""


def _is_static(x: torch.Tensor) -> bool:
    """A parameter or buffer Dynamo lifted into the graph's inputs."""
    if isinstance(x, torch.nn.Parameter):
        return True
    try:
        from torch._dynamo.utils import get_static_address_type

        return get_static_address_type(x) is not None
    except Exception:  # older/newer torch without the helper
        return False


def _is_module_setting(node: torch.fx.Node) -> bool:
    """A Python number that Dynamo passes as a 0-d tensor (with dynamic=True it
    does so for module attributes such as LayerNorm's eps or Dropout's p)
    and that it read from an attribute of an object: the module's settings,
    frozen like its parameters. A number the caller passes stays an input."""
    arg = node.meta.get("grapharg")
    if arg is None or not getattr(arg, "pass_arg_as_tensor", False):
        return False
    try:
        from torch._dynamo.source import AttrSource
    except ImportError:  # another torch layout: keep it an input
        return False
    source = getattr(arg, "source", None)
    while source is not None:
        if isinstance(source, AttrSource):
            return True
        source = getattr(source, "base", None)
    return False


class _Frozen(torch.nn.Module):
    """The graph with its constants bound and its SymInt inputs derived from
    tensor sizes, so it takes only the activations as inputs."""

    def __init__(self, gm: torch.fx.GraphModule, layout: list[tuple[str, Any]], constants: list[torch.Tensor]):
        super().__init__()
        self.gm = gm
        self.layout = layout
        for i, c in enumerate(constants):
            self.register_buffer(f"const_{i}", c.detach(), persistent=False)

    def forward(self, *xs):
        args = []
        for kind, ref in self.layout:
            if kind == "const":
                args.append(getattr(self, f"const_{ref}"))
            elif kind == "input":
                args.append(xs[ref])
            else:  # "size": (input index, dim)
                args.append(xs[ref[0]].size(ref[1]))
        out = self.gm(*args)
        return tuple(out) if isinstance(out, list) else out


def _example_value(node: torch.fx.Node):
    return node.meta.get("example_value", node.meta.get("val"))


def _plan(gm: torch.fx.GraphModule, example_inputs: list):
    """Split the graph's inputs into constants, activations and sizes."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise _Unsupported("graph inputs do not match the example inputs")
    layout: list[tuple[str, Any]] = []
    constants: list[torch.Tensor] = []
    inputs: list[int] = []  # positions of the activations among the graph's inputs
    sym_dims: list[dict[int, str]] = []
    symbol_home: dict[str, tuple[int, int]] = {}
    for pos, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(x, torch.Tensor):
            if _is_static(x) or _is_module_setting(node):
                layout.append(("const", len(constants)))
                constants.append(x)
                continue
            k = len(inputs)
            layout.append(("input", k))
            inputs.append(pos)
            dims = {}
            ev = _example_value(node)
            shape = ev.shape if isinstance(ev, torch.Tensor) else x.shape
            for d, s in enumerate(shape):
                if isinstance(s, torch.SymInt):
                    dims[d] = str(s)
                    symbol_home.setdefault(str(s), (k, d))
            sym_dims.append(dims)
        else:
            layout.append(("size", str(x)))
    for i, (kind, ref) in enumerate(layout):
        if kind == "size":
            if ref not in symbol_home:
                raise _Unsupported(f"size input {ref} is not the size of any input tensor")
            layout[i] = ("size", symbol_home[ref])
    return layout, constants, inputs, sym_dims


def _outputs(gm: torch.fx.GraphModule):
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    res = out.args[0]
    as_list = isinstance(res, list)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    dyn = []
    for r in res:
        ev = _example_value(r) if isinstance(r, torch.fx.Node) else None
        if not isinstance(ev, torch.Tensor):
            raise _Unsupported("the graph returns non-tensor values")
        dyn.append({d: str(s) for d, s in enumerate(ev.shape) if isinstance(s, torch.SymInt)})
    return len(res), dyn, as_list


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list, options: dict) -> Callable:
    layout, constants, positions, sym_dims = _plan(gm, example_inputs)
    n_out, out_dims, as_list = _outputs(gm)
    acts = [example_inputs[p] for p in positions]
    if not acts:
        raise _Unsupported("the graph takes no tensor inputs")
    dev = as_torch_device(options.get("device") or acts[0].device)
    in_names = [f"input_{i}" for i in range(len(acts))]
    out_names = [f"output_{i}" for i in range(n_out)]
    dyn = {n: d for n, d in zip(in_names + out_names, sym_dims + out_dims) if d}
    signature = [[str(a.dtype), [sym_dims[i].get(d, s) for d, s in enumerate(a.shape)]] for i, a in enumerate(acts)]
    exp_opts = {"dynamo": bool(options.get("dynamo", False)), "opset": options.get("opset")}
    key = graph_key(gm.code, constants, signature, exp_opts)
    folder = cache_dir("torch")
    stem = f"graph-{key[:24]}"
    path = folder / f"{stem}.onnx"
    with Steps(2, "twinfer backend", enabled=options.get("progress", True)) as steps:
        if not path.exists():
            steps.step("exporting to ONNX")
            frozen = _Frozen(gm, layout, constants)

            def do_export(p):
                export_onnx(frozen, acts, p, in_names, out_names, dyn, dynamo=exp_opts["dynamo"],
                            opset=exp_opts["opset"])

            path = export_to_cache_dir(folder, stem, do_export)
        steps.step("building the twinfer engine")
        engine = twinfer.load(path, device=twinfer_device(dev), precision=options.get("precision", "fp32"),
                              num_threads=int(options.get("num_threads", 0)))
    # The exporter may drop an input whose value it fixed while tracing (a
    # number turned into a constant): that value would then never change.
    dropped = sorted(set(in_names) - {s.name for s in engine.inputs})
    if dropped:
        raise _Unsupported(f"the ONNX exporter fixed input(s) {dropped} to their example values")
    runner = TorchRunner(engine, dev)

    def run(*args):
        outs = runner([args[p] for p in positions])
        return outs if as_list else tuple(outs)

    run.twinfer_engine = engine  # for inspection: which graphs went to twinfer
    return run


def twinfer_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None,
                    mode: str | None = None) -> Callable:
    """The Dynamo backend. ``torch.compile(model, backend="twinfer", options={...})``
    takes: precision, device, num_threads, dynamo (the exporter), opset, progress.
    ``mode`` is accepted and ignored (twinfer has one mode)."""
    options = dict(options or {})
    unknown = sorted(set(options) - {"precision", "device", "num_threads", "dynamo", "opset", "progress"})
    if unknown:
        raise twinfer.InvalidArgumentError(f"unknown twinfer backend option(s) {unknown}")
    try:
        return _compile_graph(gm, example_inputs, options)
    except (_Unsupported, twinfer.Error) as e:
        warnings.warn(f"twinfer backend: running this graph eagerly in PyTorch ({e})", RuntimeWarning, stacklevel=2)
        return gm.forward


def register() -> None:
    """Make ``torch.compile(model, backend="twinfer")`` available (idempotent;
    an installed twinfer also announces it through the ``torch_dynamo_backends``
    entry point, so the name works even before ``import twinfer.torch``)."""
    from torch._dynamo import register_backend

    try:
        register_backend(twinfer_backend, name=BACKEND_NAME)
    except AssertionError:  # "duplicate name": already registered (this function or the entry point's)
        pass
