"""``twinfer.torch.compile``: an nn.Module in, an nn.Module out that runs on twinfer."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.utils._pytree as pytree

import twinfer
from twinfer._cache import cache_dir
from twinfer._progress import Steps
from twinfer.errors import DeviceError, InvalidArgumentError
from twinfer.torch._bridge import TorchRunner, as_torch_device, module_device, twinfer_device
from twinfer.torch._dynamic import normalize_dynamic_axes, probe_dynamic_dims, warn_frozen_dims
from twinfer.torch._export import ExportError, export_onnx, export_to_cache_dir, warn_tracer_notes
from twinfer.torch._key import module_key


def _positional_params(module: torch.nn.Module) -> list[inspect.Parameter]:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _args_from_dict(module: torch.nn.Module, named: dict) -> tuple:
    """{forward argument name: tensor} -> forward's positional order. The names
    given must be a leading run of forward's parameters (the export is
    positional); the rest must have defaults."""
    params = _positional_params(module)
    names = [p.name for p in params]
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise InvalidArgumentError(f"example_inputs names {unknown}, which {type(module).__name__}.forward does not "
                                   f"take (its arguments: {names})")
    k = len(named)
    if set(names[:k]) != set(named):
        last = max(names.index(n) for n in named)
        missing = [n for n in names[:last] if n not in named]
        raise InvalidArgumentError(f"example_inputs gives {sorted(named)} but not {missing} before them; the module "
                                   "is exported with positional inputs, so give those too")
    needed = [p.name for p in params[k:] if p.default is inspect.Parameter.empty]
    if needed:
        raise InvalidArgumentError(f"example_inputs lacks {needed}, which forward needs")
    return tuple(named[n] for n in names[:k])


def _as_args(example_inputs: Any, module: torch.nn.Module | None = None) -> tuple[torch.Tensor, ...]:
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, dict):
        if module is None:
            raise InvalidArgumentError("example_inputs must be a tensor or a tuple of tensors in forward's order")
        example_inputs = _args_from_dict(module, example_inputs)
    args = tuple(example_inputs)
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise ExportError(
                f"example input {i} is a {type(a).__name__}: twinfer.torch.compile exports forward(*tensors). "
                "Bind non-tensor arguments in a small wrapper nn.Module whose forward takes tensors only."
            )
    return args


def _input_names(module: torch.nn.Module, n: int) -> list[str]:
    """forward's own parameter names when they are plain positionals, else input_0, input_1, ..."""
    plain = [p.name for p in _positional_params(module)]
    if len(plain) >= n and all(name.isidentifier() for name in plain[:n]):
        return plain[:n]
    return [f"input_{i}" for i in range(n)]


def _device_of(device, module, args) -> torch.device:
    dev = module_device(module, args) if device is None else as_torch_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {dev} was asked for, but PyTorch sees no CUDA GPU here; use device='cpu'")
        if not twinfer.cuda_available():
            raise DeviceError(
                f"device {dev} was asked for, but this twinfer build cannot use a GPU here "
                "(twinfer.cuda_available() is False; twinfer.build_info() says what it contains); use device='cpu'"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


class CompiledModule(torch.nn.Module):
    """An nn.Module whose forward runs a twinfer engine.

    Attributes: ``engine`` (the twinfer.Engine), ``onnx_path`` (the cached ONNX
    file), ``cache_hit`` (True when the export was found in the cache and
    PyTorch's exporter was not called), ``engine_cache_hit`` (True when the
    built engine was loaded from the cache too, so no load-time pass ran),
    ``input_names``, ``output_names``, ``dynamic_batch``, ``dynamic_axes``.
    """

    def __init__(self, engine: twinfer.Engine, device: torch.device, output_spec: pytree.TreeSpec, onnx_path: Path,
                 cache_hit: bool, dynamic_batch: bool, name: str, num_threads: int = 0,
                 dynamic_axes: dict | None = None):
        super().__init__()
        self.dynamic_axes = dict(dynamic_axes or {})
        self._num_threads = num_threads
        self.engine_cache_hit = False
        self.engine = engine
        self.onnx_path = onnx_path
        self.cache_hit = cache_hit
        self.dynamic_batch = dynamic_batch
        self._device = device
        self._output_spec = output_spec
        self._runner = TorchRunner(engine, device)
        self._name = name

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def input_names(self) -> list[str]:
        return list(self._runner.input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._runner.output_names)

    def to(self, *args: Any, **kwargs: Any) -> "CompiledModule":
        """Move the engine like ``nn.Module.to`` moves parameters: the same ONNX
        export is loaded again on the new device (same precision and threads),
        and inputs and outputs then live there. A dtype is refused: the
        engine's arithmetic is ``precision=`` of ``twinfer.torch.compile``."""
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            raise InvalidArgumentError(
                f"a compiled module keeps its precision ({self.engine.precision}); to change it, call "
                "twinfer.torch.compile(module, ..., precision='fp16' / 'bf16' / 'fp32') again"
            )
        if device is None:
            return self
        dev = _device_of(device, self, ())
        if dev != self._device:
            engine = twinfer.load(self.onnx_path, device=twinfer_device(dev), precision=self.engine.precision,
                                  num_threads=self._num_threads)
            self.engine, self._device, self._runner = engine, dev, TorchRunner(engine, dev)
        return self

    def cuda(self, device: int | torch.device | None = None) -> "CompiledModule":
        if isinstance(device, int):
            device = torch.device("cuda", device)
        return self.to(device if device is not None else "cuda")

    def cpu(self) -> "CompiledModule":
        return self.to("cpu")

    def forward(self, *inputs: torch.Tensor, **named: torch.Tensor) -> Any:
        """Same call and same return structure as the original module's forward
        (tensors by position, or by forward's argument names)."""
        if named:
            names = self.input_names
            unknown = sorted(set(named) - set(names[len(inputs):]))
            if unknown:
                raise InvalidArgumentError(f"unexpected or repeated input(s) {unknown}; the inputs are {names}")
            missing = [n for n in names[len(inputs):] if n not in named]
            if missing:
                raise InvalidArgumentError(f"missing input(s) {missing}")
            inputs = tuple(inputs) + tuple(named[n] for n in names[len(inputs):])
        outs = self._runner(inputs)
        return pytree.tree_unflatten(outs, self._output_spec)

    def extra_repr(self) -> str:
        return (
            f"{self._name}, device={self._device}, precision={self.engine.precision}, "
            f"dynamic_batch={self.dynamic_batch}, "
            + (f"dynamic_axes={self.dynamic_axes}, " if self.dynamic_axes else "")
            + f"cache_hit={self.cache_hit}"
        )

    def _repr_html_(self) -> str:
        from twinfer.display import engine_html

        return engine_html(self.engine, title=f"twinfer.torch.compile({self._name})")


def _structure_path(onnx_path: Path) -> Path:
    return onnx_path.with_suffix(".json")


def _write_meta(meta_path: Path, meta: dict) -> None:
    tmp = meta_path.with_suffix(f".json.{os.getpid()}")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, meta_path)


def compile(
    module: torch.nn.Module,
    example_inputs: torch.Tensor | Sequence[torch.Tensor] | dict[str, torch.Tensor],
    precision: str = "fp32",
    device: str | torch.device | None = None,
    dynamic_batch: bool = True,
    *,
    dynamic_axes: dict[str, dict[int, str] | Sequence[int]] | None = None,
    dynamo: bool = False,
    opset: int | None = None,
    num_threads: int = 0,
    progress: bool = True,
    cache: bool = True,
) -> CompiledModule:
    """Compile ``module`` into a twinfer engine wrapped as an ``nn.Module``.

    The module is exported to ONNX once (in eval mode, without autograd) and the
    file is cached on disk (``$TWINFER_CACHE/torch``, default ``~/.cache/twinfer``)
    under a hash of the weights, the code, the inputs' signature and the export
    options, with the built engine next to it (a saved engine file per precision
    and device type), so another process compiling the same module skips both
    the export and the engine build.

    module: the model (its forward must take tensors and return tensors, or
        tuples/lists/dicts of them).
    example_inputs: a tensor or a tuple of tensors, as forward takes them, or
        a dict {forward argument name: tensor} (a leading run of forward's
        arguments; the rest keep their defaults).
    precision: "fp32" (default; the CPU), "tf32", "fp16", "bf16" (GPU).
    device: where the engine runs; None follows the module (its parameters,
        else the example inputs). Inputs and outputs live on this device.
    dynamic_batch: dim 0 of every input and output becomes symbolic, so any
        batch size runs on one engine.
    dynamic_axes: more symbolic dims, as ``torch.onnx.export`` takes them:
        ``{"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch",
        1: "seq"}}`` keyed by forward's argument names (``output_0``, ... for
        outputs; those that follow from the inputs need not be given). Dims
        with the same symbol must be equal at run time; a list of dims gives
        each its own. One engine then serves every size of those dims (a plan
        per distinct shape, cached).
    dynamo: False uses PyTorch's TorchScript exporter, True the torch.export one.
    progress: show a progress bar when exporting/building takes a while.
    cache: False exports afresh (and still writes the cache).

    >>> import torch, torchvision, twinfer.torch
    >>> model = torchvision.models.resnet18().eval()
    >>> fast = twinfer.torch.compile(model, torch.randn(2, 3, 64, 64))
    >>> fast(torch.randn(5, 3, 64, 64)).shape
    torch.Size([5, 1000])
    >>> enc = twinfer.torch.compile(bert, {"input_ids": ids, "attention_mask": mask},   # doctest: +SKIP
    ...     dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    >>> enc(input_ids=ids[:, :5], attention_mask=mask[:, :5])                          # doctest: +SKIP

    Raises twinfer.torch.ExportError (a twinfer.Error) when PyTorch cannot export
    the module, with the exporter's message and what to try instead, and
    twinfer.DeviceError when ``device`` is a GPU this process cannot use. Warns
    (twinfer.torch.ExportWarning) when the TorchScript tracer froze code of the
    module that branches on tensor values: the engine then follows the branch
    the example inputs took.
    """
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgumentError(f"twinfer.torch.compile takes an nn.Module, not a {type(module).__name__}")
    args = _as_args(example_inputs, module)
    dev = _device_of(device, module, args)
    # Exported where the module lives (the ONNX file does not depend on it); the engine runs on `dev`.
    args = tuple(a.to(module_device(module, args)) for a in args)
    name = type(module).__name__
    input_names = _input_names(module, len(args))
    axes = normalize_dynamic_axes(dynamic_axes, input_names, args)
    options = {"dynamic_batch": bool(dynamic_batch), "dynamo": bool(dynamo), "opset": opset, "inputs": input_names}
    if axes:
        options["dynamic_axes"] = axes
    key = module_key(module, args, options)
    folder = cache_dir("torch")
    stem = f"{name}-{key[:24]}"
    onnx_path = folder / f"{stem}.onnx"
    meta_path = _structure_path(onnx_path)
    hit = cache and onnx_path.exists() and meta_path.exists()

    was_training = module.training
    with Steps(2, f"twinfer.torch.compile({name})", enabled=progress) as steps:
        if hit:
            steps.step("loading the cached ONNX export")
            meta = json.loads(meta_path.read_text())
        else:
            steps.step("exporting to ONNX")
            module.eval()
            try:
                with torch.no_grad():
                    eager = module(*args)
                leaves, spec = pytree.tree_flatten(eager)
                if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
                    raise ExportError(
                        f"{name}.forward returned {type(eager).__name__} holding non-tensors; twinfer.torch.compile "
                        "needs forward to return tensors (or tuples/lists/dicts of tensors)."
                    )
                output_names = [f"output_{i}" for i in range(len(leaves))]
                dyn = {}
                if dynamic_batch:
                    dyn = {n: {0: "batch"} for n, a in zip(input_names, args) if a.dim() > 0}
                    dyn.update({n: {0: "batch"} for n, t in zip(output_names, leaves) if t.dim() > 0})
                for n, dims in axes.items():  # the user's dims win where both name one
                    if n.startswith("output_") and int(n[7:]) >= len(leaves):
                        raise InvalidArgumentError(f"dynamic_axes names '{n}', but forward returns "
                                                   f"{len(leaves)} tensor(s)")
                    dyn[n] = {**dyn.get(n, {}), **dims}

                notes: list[str] = []

                def do_export(path):
                    notes[:] = export_onnx(module, args, path, input_names, output_names, dyn, dynamo=dynamo,
                                           opset=opset)

                onnx_path = export_to_cache_dir(folder, stem, do_export)
            finally:
                module.train(was_training)
            meta = {"output_spec": pytree.treespec_dumps(spec), "input_names": input_names,
                    "output_names": output_names, "tracer_notes": notes}
            _write_meta(meta_path, meta)
        # The built engine is cached too (a saved engine file per precision
        # and device type): a process that finds it skips the build's passes.
        engine_path = folder / f"{stem}-{precision}-{dev.type}.twinfer"
        engine = None
        if cache and hit and engine_path.exists():
            steps.step("loading the cached engine")
            try:
                engine = twinfer.load(engine_path, device=twinfer_device(dev), num_threads=num_threads)
            except twinfer.Error:
                engine = None  # another twinfer version wrote it: build again
        engine_hit = engine is not None
        if engine is None:
            steps.step("building the twinfer engine")
            engine = twinfer.load(onnx_path, device=twinfer_device(dev), precision=precision, num_threads=num_threads)
            try:
                engine.save(engine_path)
            except (twinfer.Error, OSError):
                pass  # a read-only cache still gives a working module
    # Said again on a cache hit: the engine still carries what the tracer froze.
    warn_tracer_notes(meta.get("tracer_notes", []), name)
    spec = pytree.treespec_loads(meta["output_spec"])
    compiled = CompiledModule(engine, dev, spec, onnx_path, bool(hit), bool(dynamic_batch), name, num_threads, axes)
    compiled.engine_cache_hit = engine_hit
    if axes and "frozen_dims" not in meta:  # checked once per export, remembered with it
        meta["frozen_dims"] = probe_dynamic_dims(module, args, input_names, axes, compiled)
        _write_meta(meta_path, meta)
    warn_frozen_dims(meta.get("frozen_dims"), name)
    return compiled
