"""The Engine: a compiled model, and the one call that loads it."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, NamedTuple

from . import _core
from ._convert import Tensor, as_tensor
from .errors import DeviceError, InvalidArgumentError, ModelFormatError, ShapeError


class TensorSpec(NamedTuple):
    """An engine input or output: symbolic dims are strings, unknown dims None."""

    name: str
    dtype: str
    shape: tuple


def _inner_type(type_name: str) -> tuple[str, str]:
    """("sequence", "float32") for "sequence(float32)"; ("", name) for a tensor dtype."""
    for kind in ("sequence", "optional"):
        if type_name.startswith(kind + "(") and type_name.endswith(")"):
            return kind, type_name[len(kind) + 1 : -1]
    return "", type_name


def _to_value(x, type_name: str, what: str):
    """A fed value as a core Tensor of ``type_name``: sequence inputs take a list
    (or tuple) of arrays, optional inputs None or a value."""
    kind, inner = _inner_type(type_name)
    if kind == "":
        return as_tensor(x, type_name)
    if isinstance(x, Tensor) and x.dtype.startswith(kind + "("):
        return x
    if kind == "sequence":
        if not isinstance(x, (list, tuple)):
            raise InvalidArgumentError(f"{what} is a {type_name}: feed a list of arrays, not a {type(x).__name__}")
        items = [_to_value(v, inner, f"{what}[{k}]") for k, v in enumerate(x)]
    else:
        items = [] if x is None else [_to_value(x, inner, what)]
    # An unknown inner type ("?") takes the items' (checked by the engine).
    if inner.endswith("?") and items:
        type_name = f"{kind}({items[0].dtype})"
    elif inner.endswith("?"):
        type_name = f"{kind}(float32)"
    return Tensor._container(type_name, items)


def _from_value(t):
    """A core output as the user sees it: sequences as lists, an empty optional
    as None, anything else as the Tensor itself."""
    dtype = t.dtype
    if dtype.startswith("sequence("):
        return [_from_value(v) for v in t._items()]
    if dtype.startswith("optional("):
        items = t._items()
        return _from_value(items[0]) if items else None
    return t


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if _core.cuda_available() else "cpu"
    return device


def _model_source(model) -> tuple[Any, bool, str]:
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


class Engine:
    """A model compiled for one device and precision. Thread-safe: several
    threads may call ``run`` at once (each borrows its own execution context)."""

    def __init__(self, core: "_core.Engine", shape_ranges: dict | None = None):
        self._core = core
        self.calibration = None  # precision="int8": the twinfer.quantize.Calibration it was built with
        self._ranges = self._check_ranges(shape_ranges or {})
        # Plans for the declared extremes now: errors surface at load, and
        # the first runs at those shapes pay nothing extra.
        for pick in (0, 1):
            if self._ranges and len(self._ranges) == len(self.inputs):
                self._core.memory_report([list(self._ranges[s.name][pick]) for s in self.inputs])

    def _check_ranges(self, ranges: dict) -> dict:
        specs = {s.name: s for s in self.inputs}
        out = {}
        for name, rng in ranges.items():
            if name not in specs:
                raise InvalidArgumentError(f"shape_ranges names unknown input {name!r}; inputs are {list(specs)}")
            try:
                lo, hi = (tuple(int(d) for d in rng[0]), tuple(int(d) for d in rng[1]))
            except (TypeError, ValueError, IndexError):
                raise InvalidArgumentError(f"shape_ranges[{name!r}] must be (min_shape, max_shape)") from None
            spec = specs[name].shape
            if len(lo) != len(spec) or len(hi) != len(spec):
                raise InvalidArgumentError(f"shape_ranges[{name!r}]: rank must be {len(spec)} like {spec}")
            for d, (a, b, s) in enumerate(zip(lo, hi, spec)):
                if a < 0 or a > b or (isinstance(s, int) and not a == b == s):
                    raise InvalidArgumentError(f"shape_ranges[{name!r}]: dim {d} range [{a}, {b}] does not fit {spec}")
            out[name] = (lo, hi)
        return out

    @property
    def shape_ranges(self) -> dict[str, tuple[tuple, tuple]]:
        """The (min, max) shapes declared at load with ``shape_ranges=``."""
        return dict(self._ranges)

    def _check_in_range(self, name: str, shape: tuple) -> None:
        lo, hi = self._ranges[name]
        if len(shape) != len(lo) or any(not a <= d <= b for d, a, b in zip(shape, lo, hi)):
            raise ShapeError(f"input {name!r} has shape {list(shape)}, outside the declared range "
                             f"{list(lo)} .. {list(hi)}")

    # -- description -------------------------------------------------------
    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(n, d, tuple(s)) for n, d, s in self._core.inputs]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [TensorSpec(n, d, tuple(s)) for n, d, s in self._core.outputs]

    @property
    def device(self) -> str:
        return self._core.device

    @property
    def precision(self) -> str:
        return self._core.precision

    @property
    def num_threads(self) -> int:
        return self._core.num_threads

    # -- running -----------------------------------------------------------
    def _ordered_inputs(self, feeds: dict) -> list[Tensor]:
        specs = self.inputs
        names = {s.name for s in specs}
        unknown = [k for k in feeds if k not in names]
        if unknown:
            raise InvalidArgumentError(
                f"unknown input name(s) {unknown}; the model's inputs are {[s.name for s in specs]}"
            )
        missing = [s.name for s in specs if s.name not in feeds]
        if missing:
            raise InvalidArgumentError(f"missing input(s) {missing}")
        tensors = [_to_value(feeds[s.name], s.dtype, f"input {s.name!r}") for s in specs]
        if self._ranges:
            for s, t in zip(specs, tensors):
                if s.name in self._ranges:
                    self._check_in_range(s.name, t.shape)
        return tensors

    def run(self, feeds: dict, *, context: "_core.ExecutionContext | None" = None) -> dict[str, Tensor]:
        """Run on ``feeds`` ({input name: array}) and return {output name: Tensor}.

        Arrays are taken without copying where their layout allows (anything
        with ``__dlpack__``, NumPy, PyTorch, ...). The GIL is released while the
        model runs. ONNX sequence inputs take a list of arrays and sequence
        outputs come back as lists of Tensors; optional inputs take None or a
        value, and an empty optional output comes back as None.

        >>> out = engine.run({"input": np.zeros((1, 3, 224, 224), np.float32)})
        >>> out["logits"].numpy().shape
        (1, 1000)
        """
        tensors = self._ordered_inputs(feeds)
        outs = self._core.run_in(context, tensors) if context is not None else self._core.run(tensors)
        return {spec.name: _from_value(t) for spec, t in zip(self.outputs, outs)}

    def __call__(self, *inputs):
        """Positional inputs in the model's order; one output, or a tuple of them."""
        specs = self.inputs
        if len(inputs) != len(specs):
            raise InvalidArgumentError(f"expected {len(specs)} inputs, got {len(inputs)}")
        outs = [_from_value(t) for t in self._core.run(self._ordered_inputs({s.name: x for s, x in zip(specs, inputs)}))]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def create_context(self, num_threads: int = 0) -> "_core.ExecutionContext":
        """A private execution context (arena, thread budget) for ``run(..., context=)``."""
        return self._core.create_context(num_threads)

    # -- reports -----------------------------------------------------------
    def _shapes(self, shapes) -> list[list[int]]:
        if shapes is None:
            specs = self.inputs
            if any(not isinstance(d, int) for s in specs for d in s.shape):
                raise InvalidArgumentError("the model has symbolic input dims: pass shapes=[...] explicitly")
            return [list(s.shape) for s in specs]
        if isinstance(shapes, dict):
            return [list(shapes[s.name]) for s in self.inputs]
        return [list(s) for s in shapes]

    def stats(self) -> dict:
        """Load-time passes applied, plan-cache hits and misses."""
        return self._core.stats()

    def memory_report(self, shapes=None) -> dict:
        """Arena peak vs. the naive sum of all intermediates, and weight bytes."""
        return self._core.memory_report(self._shapes(shapes))

    def kernel_report(self, shapes=None) -> list[tuple[str, str, str]]:
        """(node, op, kernel implementation) for every step of the plan."""
        return [tuple(r) for r in self._core.kernel_report(self._shapes(shapes))]

    def profile_ops(self, feeds: dict, iterations: int = 10, warmup: int = 2):
        """Time every kernel over ``iterations`` runs on ``feeds``: a
        twinfer OpProfile (per op type, slowest nodes; prints as a table and
        renders as HTML in Jupyter).

        >>> print(engine.profile_ops({"input": x}))
        """
        from .op_profile import profile_ops

        return profile_ops(self, feeds, iterations, warmup)

    def op_histogram(self) -> dict[str, int]:
        return dict(self._core.op_histogram())

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.outputs)
        return f"twinfer.Engine(device={self.device}, precision={self.precision}, inputs=[{ins}], outputs=[{outs}])"

    def save(self, path: str | os.PathLike) -> None:
        """Write the engine to ``path`` (a twinfer engine file): the graph as the
        load-time passes left it (folded, fused, quantized), its precision,
        calibration and shape ranges. ``twinfer.load(path)`` reads it back
        without running those passes or needing calibration data; weights are
        mapped from the file. Kernels and memory plans are made again on
        load, for the CPU at hand.

        >>> twinfer.load("model.onnx", precision="int8", calibration=data).save("model.twinfer")
        >>> engine = twinfer.load("model.twinfer")
        """
        from . import __version__

        meta = {"twinfer_version": __version__}
        if self.calibration is not None:
            meta["calibration"] = json.dumps(self.calibration.to_dict())
        if self._ranges:
            meta["shape_ranges"] = json.dumps({k: [list(lo), list(hi)] for k, (lo, hi) in self._ranges.items()})
        self._core.save(os.fspath(path), meta)

    def _repr_html_(self) -> str:
        """Jupyter's view: an HTML table of the engine (see twinfer.display)."""
        from .display import engine_html

        return engine_html(self)


def load(model, device: str = "auto", precision: str = "fp32", **options) -> Engine:
    """Load and compile a model.

    model: a path to an ONNX file or to a saved engine (``Engine.save``), ONNX bytes, or an
           ``onnx.ModelProto``. A saved engine takes only device= and num_threads=.
    device: "auto" (the GPU when present, else the CPU), "cpu", "cuda" or "cuda:N".
    precision: "fp32" (default), "tf32", "fp16", "bf16" (GPU) — fp32 on the CPU.
    options: num_threads (CPU threads per run, default all), optimize (passes, default True),
             base_dir (folder for external weights when loading from bytes),
             shape_ranges ({input name: (min_shape, max_shape)}: plans for both are built at
             load, and a run outside the range raises twinfer.ShapeError),
             extra_outputs (names of intermediate values to return too, after the model's outputs),
             for precision="int8": calibration (sample inputs: feed dicts or arrays; or a saved
             twinfer.quantize.Calibration / its JSON path), calibrator ("percentile" default,
             "percentile", "minmax"), percentile (99.99), keep_float (node names left in float),
             bias_correction (True: each layer's bias absorbs the mean shift its int8
             weights cause, from the calibration's per-channel means),
             progress (a bar while calibrating),
             weights ("fp32" default; "int8": MatMul/Gemm weights stored int8 per output channel and
             dequantized inside the GEMM, activations stay float32 — a quarter of the weight bytes).

    >>> engine = twinfer.load("resnet50.onnx", device="cpu")
    """
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model) and _core.is_engine_file(os.fspath(model)):
        return _load_saved(os.fspath(model), device, precision, options)
    source, is_path, base_dir = _model_source(model)
    base_dir = options.pop("base_dir", base_dir)
    num_threads = int(options.pop("num_threads", 0))
    optimize = bool(options.pop("optimize", True))
    shape_ranges = options.pop("shape_ranges", None)
    extra_outputs = [str(n) for n in options.pop("extra_outputs", ())]
    calibration = _int8_calibration(model, precision, options, num_threads)
    int8_amax = dict(calibration.amax) if calibration is not None else {}
    int8_unsigned = calibration.unsigned() if calibration is not None else set()
    bias_correction = bool(options.pop("bias_correction", True))
    int8_mean = dict(calibration.channel_mean) if calibration is not None and bias_correction else {}
    keep_float = set(options.pop("keep_float", ()))
    weights = options.pop("weights", "fp32")
    if weights not in ("fp32", "float32", "int8"):
        raise InvalidArgumentError(f"weights must be 'fp32' or 'int8', got {weights!r}")
    int8_weights = weights == "int8"
    if options:
        raise InvalidArgumentError(f"unknown option(s): {sorted(options)}")
    requested = device
    device = _resolve_device(device)
    try:
        core = _core.load_model(source, is_path, device, precision, num_threads, optimize, os.fspath(base_dir),
                                extra_outputs, int8_amax, keep_float, int8_weights, int8_unsigned, int8_mean)
    except DeviceError:
        if requested != "auto":
            raise
        warnings.warn("the CUDA backend cannot run this model here; using the CPU", RuntimeWarning, stacklevel=2)
        core = _core.load_model(source, is_path, "cpu", precision, num_threads, optimize, os.fspath(base_dir),
                                extra_outputs, int8_amax, keep_float, int8_weights, int8_unsigned, int8_mean)
    engine = Engine(core, shape_ranges)
    engine.calibration = calibration
    return engine


def _load_saved(path: str, device: str, precision: str, options: dict) -> Engine:
    """A saved engine (Engine.save): device and num_threads are chosen now;
    everything else was fixed when it was built."""
    from . import __version__

    num_threads = int(options.pop("num_threads", 0))
    if options:
        raise InvalidArgumentError(
            f"{path} is a saved engine: only device= and num_threads= apply when loading it, not {sorted(options)} "
            "(they were fixed when it was built; load the ONNX model to change them)")
    requested = device
    try:
        core, meta = _core.load_engine(path, _resolve_device(device), num_threads)
    except DeviceError:
        if requested != "auto":
            raise
        warnings.warn("the CUDA backend cannot run this model here; using the CPU", RuntimeWarning, stacklevel=3)
        core, meta = _core.load_engine(path, "cpu", num_threads)
    saved_by = meta.get("twinfer_version")
    if saved_by != __version__:
        raise ModelFormatError(f"{path} was saved by twinfer {saved_by}; this is twinfer {__version__}: "
                               "load the ONNX model again and save a new engine")
    if precision not in ("fp32", "float32", core.precision):
        raise InvalidArgumentError(f"{path} is a saved {core.precision} engine; precision={precision!r} cannot change "
                                   "it (load the ONNX model with that precision instead)")
    ranges = {k: (tuple(v[0]), tuple(v[1])) for k, v in json.loads(meta.get("shape_ranges", "{}")).items()}
    engine = Engine(core, ranges)
    if "calibration" in meta:
        from .quantize import Calibration

        engine.calibration = Calibration.from_dict(json.loads(meta["calibration"]))
    return engine


def _int8_calibration(model, precision: str, options: dict, num_threads: int):
    """For precision="int8": the Calibration given, or one computed from the
    calibration data (options calibration=, calibrator=, percentile=)."""
    calibration = options.pop("calibration", None)
    # Percentile by default: the entropy (KL) search clips spiky activations
    # such as ReLU6 outputs far too hard (EfficientNet-Lite0 lost every top-1).
    calibrator = options.pop("calibrator", "percentile")
    percentile = float(options.pop("percentile", 99.99))
    progress = bool(options.pop("progress", True))
    if precision != "int8":
        if calibration is not None:
            raise InvalidArgumentError("calibration= is only used with precision='int8'")
        return None
    from .quantize import Calibration, calibrate

    if calibration is None:
        raise InvalidArgumentError("precision='int8' needs calibration= (sample inputs, or a twinfer.quantize.Calibration)")
    if isinstance(calibration, Calibration):
        return calibration
    if isinstance(calibration, (str, os.PathLike)):
        return Calibration.load(calibration)
    return calibrate(model, calibration, calibrator=calibrator, percentile=percentile, num_threads=num_threads,
                     progress=progress)
