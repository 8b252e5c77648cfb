"""The Engine class: a compiled model (run, reports, save), and open_engine,
which compiles a model source with every load option already resolved.
twinfer.load (engine.py) and twinfer.quantize both build engines through it,
so quantize never imports engine.py, which imports quantize."""

from __future__ import annotations

import json
import numbers
import operator
import os
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from . import _core
from ._convert import Tensor, as_tensor, is_device_array, numpy_dtype
from ._streams import LEGACY_DEFAULT, producer_stream, stream_handle
from .errors import DTypeError, Error, InvalidArgumentError, ShapeError


class TensorSpec(NamedTuple):
    """An engine input or output: symbolic dims are strings, unknown dims None.
    ``has_shape`` is False where even the rank is unknown (an input or output
    declared without a shape that inference cannot tell, a
    ConcatFromSequence's output): ``shape`` is then ``()``, which is not a
    scalar there."""

    name: str
    dtype: str
    shape: tuple
    has_shape: bool = True


class KernelRow(NamedTuple):
    """One step of a plan (Engine.kernel_report): the node, its op, the kernel
    that runs it, where ("cpu", "cuda", "sim", or "copy" for a host<->device
    transfer placement inserted), for a device engine's node that runs on
    the CPU, why, and the type of its first output ("float16" where a
    precision="fp16" plan computes in 16 bits)."""

    node: str
    op: str
    kernel: str
    backend: str
    note: str
    dtype: str = ""


def _inner_type(type_name: str) -> tuple[str, str]:
    """("sequence", "float32") for "sequence(float32)", ("map", "int64,float32")
    for "map(int64,float32)"; ("", name) for a tensor dtype."""
    for kind in ("sequence", "optional", "map"):
        if type_name.startswith(kind + "(") and type_name.endswith(")"):
            return kind, type_name[len(kind) + 1 : -1]
    return "", type_name


def thread_count(value, default: str = "all cores") -> int:
    """num_threads= as load and create_context take it: an int >= 0, 0 for
    ``default``. Checked here because the core's int conversion took -1 as 0
    (all cores), truncated 2.7 and parsed "2" without a word."""
    try:
        if isinstance(value, bool):  # an int to Python, but surely not a thread count
            raise TypeError
        count = operator.index(value)  # ints and NumPy ints; not floats or strings
    except TypeError:
        count = -1
    if count < 0:
        raise InvalidArgumentError(f"num_threads must be an int >= 0 (0: {default}), not {value!r}")
    return count


def _convert_error(e: Exception, what: str, type_name: str) -> Exception:
    """Why ``what`` could not become a ``type_name`` tensor, as a twinfer error
    naming it: NumPy's and DLPack's own errors (a ragged list, an int too large,
    None in a list, a sparse torch tensor) say nothing of which input it was."""
    if isinstance(e, Error):  # twinfer's own: the same error, now naming the input
        return type(e)(f"{what}: {e}")
    # A TypeError here is an element that is not a number ([1, None]).
    kind = DTypeError if isinstance(e, TypeError) else InvalidArgumentError
    return kind(f"{what}: cannot convert it to {type_name}: {e} ({type(e).__name__})")


def _to_value(x, type_name: str, what: str, stream: int | None = None):
    """A fed value as a core Tensor of ``type_name``: sequence inputs take a list
    (or tuple) of arrays, optional inputs None or a value. ``stream``: the
    stream a device engine reads device arrays on (DLPack's stream protocol)."""
    kind, inner = _inner_type(type_name)
    if kind == "":
        try:
            return as_tensor(x, type_name, stream)
        except (TypeError, ValueError, BufferError, OverflowError) as e:
            raise _convert_error(e, what, type_name) from (None if isinstance(e, Error) else e)
    if isinstance(x, Tensor) and x.dtype.startswith(kind + "("):
        return x
    if kind == "map":
        if not isinstance(x, dict):
            raise InvalidArgumentError(f"{what} is a {type_name}: feed a dict, not a {type(x).__name__}")
        key_type, value_type = inner.split(",", 1)
        keys = np.array(list(x.keys()), dtype=object if key_type == "string" else numpy_dtype(key_type))
        values = np.array(list(x.values()), dtype=object if value_type == "string" else numpy_dtype(value_type))
        return Tensor._container(type_name, [as_tensor(keys, key_type), as_tensor(values, value_type)])
    if kind == "sequence":
        if not isinstance(x, (list, tuple)):
            raise InvalidArgumentError(f"{what} is a {type_name}: feed a list of arrays, not a {type(x).__name__}")
        items = [_to_value(v, inner, f"{what}[{k}]", stream) for k, v in enumerate(x)]
    else:
        items = [] if x is None else [_to_value(x, inner, what, stream)]
    # An unknown inner type ("?") takes the items' (checked by the engine).
    if inner.endswith("?") and items:
        type_name = f"{kind}({items[0].dtype})"
    elif inner.endswith("?"):
        type_name = f"{kind}(float32)"
    return Tensor._container(type_name, items)


def _from_value(t):
    """A core output as the user sees it: sequences as lists, an empty optional
    as None, a map as a dict of Python scalars, anything else as the Tensor
    itself."""
    dtype = t.dtype
    if dtype.startswith("sequence(map("):  # ZipMap's rows: converted in one call
        dicts = _core._maps_as_dicts(t)
        if dicts is not None:
            return dicts
    if dtype.startswith("sequence("):
        return [_from_value(v) for v in t._items()]
    if dtype.startswith("map("):
        d = _core._map_as_dict(t)
        if d is not None:
            return d
        keys, values = t._items()
        return dict(zip(keys.numpy().tolist(), values.numpy().tolist()))
    if dtype.startswith("optional("):
        items = t._items()
        return _from_value(items[0]) if items else None
    return t


class Engine:
    """A model compiled for one device and precision. Thread-safe: several
    threads may call ``run`` at once (each borrows its own execution context)."""

    def __init__(self, core: "_core.Engine", shape_ranges: dict | None = None):
        self._core = core
        self.calibration = None  # precision="int8": the twinfer.quantize.Calibration it was built with
        self._on_device = core.device != "cpu"
        # Inputs/outputs declared without a shape: their spec's () is any rank
        # (onnxruntime lists them with [] too), not a scalar.
        self._rank_unknown = frozenset(core._rank_unknown)
        # The engine never changes: its specs are read once, not per call.
        self._specs = tuple(TensorSpec(n, d, tuple(s), n not in self._rank_unknown) for n, d, s in core.inputs)
        self._output_names = tuple(spec[0] for spec in core.outputs)
        self._input_names = tuple(s.name for s in self._specs)
        self._input_types = tuple(s.dtype for s in self._specs)
        # Initializers made inputs (override_initializers=): what a run that
        # does not feed them uses. Those left folded, named when fed.
        self._defaults = dict(core._input_defaults)
        self._folded = tuple(TensorSpec(n, d, tuple(s)) for n, d, s in core.folded_overridable)
        # The per-call fast path (plain arrays in, arrays out) needs no
        # sequence/optional handling.
        plain_inputs = all(_inner_type(t)[0] == "" for t in self._input_types)
        self._plain_io = plain_inputs and all(_inner_type(spec[1])[0] == "" for spec in core.outputs)
        self._warned_fallback = False
        self._ranges = self._check_ranges(shape_ranges or {})
        # run()'s fast path converts the feeds in the core (_core.Engine._run_feeds);
        # declared shape ranges are checked here, on the general path.
        # The fast path converts any output (a ZipMap's rows too) but plain inputs only.
        self._fast_feeds = plain_inputs and not self._ranges
        # Plans for the declared extremes now: errors surface at load, and
        # the first runs at those shapes pay nothing extra.
        for pick in (0, 1):
            if self._ranges and len(self._ranges) == len(self.inputs):
                self._core.memory_report([list(self._ranges[s.name][pick]) for s in self.inputs])

    def _check_ranges(self, ranges: dict) -> dict:
        if not isinstance(ranges, Mapping):  # a list of pairs would fail far inside, as 'no attribute items'
            raise InvalidArgumentError(f"shape_ranges must be a dict {{input name: (min_shape, max_shape)}}, not a "
                                       f"{type(ranges).__name__}")
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
            if name in self._rank_unknown:
                spec = (None,) * len(lo)  # any rank: the range decides it
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
        return list(self._specs)

    @property
    def input_defaults(self) -> dict:
        """{input name: NumPy copy of its default} for the initializers made
        inputs with ``override_initializers=``; a run that does not feed one uses it."""
        return {n: np.array(t.numpy()) for n, t in self._defaults.items()}

    @property
    def overridable_initializers(self) -> list[TensorSpec]:
        """Initializers the model also lists as graph inputs (ONNX's overridable
        defaults) that were folded in as constants: load with
        ``override_initializers=`` to make them inputs."""
        return list(self._folded)

    @property
    def outputs(self) -> list[TensorSpec]:
        return [TensorSpec(n, d, tuple(s), n not in self._rank_unknown) for n, d, s in self._core.outputs]

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
    def _ordered_inputs(self, feeds: dict, stream: int | None = None) -> list[Tensor]:
        if self._plain_io and stream is None and not self._ranges and len(feeds) == len(self._input_names):
            # Values the core's fast path does not take (lists, torch tensors...):
            # converted here, still without the checks below.
            try:
                return [as_tensor(feeds[n], t) for n, t in zip(self._input_names, self._input_types)]
            except (KeyError, TypeError, ValueError, BufferError, OverflowError):
                pass  # a wrong name or value: the full path below says which input
        specs = self._specs
        names = {s.name for s in specs}
        unknown = [k for k in feeds if k not in names]
        if unknown:
            folded = [k for k in unknown if any(s.name == k for s in self._folded)]
            if folded:
                one = len(folded) == 1
                raise InvalidArgumentError(
                    f"{folded[0] if one else folded!r} {'is an initializer' if one else 'are initializers'} that the "
                    f"model also lists as {'a graph input' if one else 'graph inputs'} (an overridable default): "
                    f"twinfer folds {'it' if one else 'them'} in as {'a constant' if one else 'constants'}; load "
                    f"with override_initializers={folded!r} (or True) to feed {'it' if one else 'them'}")
            raise InvalidArgumentError(
                f"unknown input name(s) {unknown}; the model's inputs are {[s.name for s in specs]}"
            )
        missing = [s.name for s in specs if s.name not in feeds and s.name not in self._defaults]
        if missing:
            raise InvalidArgumentError(f"missing input(s) {missing}")
        tensors = [_to_value(feeds[s.name], s.dtype, f"input {s.name!r}", stream) if s.name in feeds
                   else self._defaults[s.name] for s in specs]
        if self._ranges:
            for s, t in zip(specs, tensors):
                if s.name in self._ranges:
                    self._check_in_range(s.name, t.shape)
        return tensors

    def run(self, feeds: dict, *, context: "_core.ExecutionContext | None" = None, stream=None,
            outputs: str = "auto") -> dict[str, Tensor]:
        """Run on ``feeds`` ({input name: array}) and return {output name: Tensor}.
        (``engine(x, ...)`` takes the inputs positionally; ``feeds`` must be a dict.)

        Arrays are taken without copying where their layout allows (anything
        with ``__dlpack__``, NumPy, PyTorch, ...). The GIL is released while the
        model runs. ONNX sequence inputs take a list of arrays and sequence
        outputs come back as lists of Tensors; optional inputs take None or a
        value, and an empty optional output comes back as None.

        On a GPU (device engines): ``stream`` runs on a caller's stream (a
        ``torch.cuda.Stream``, a CuPy stream, an int handle, or a twinfer
        ``context.stream``); with none given, device arrays from torch or CuPy
        run on their framework's current stream, other frameworks' device
        arrays (JAX, ...) on the legacy default stream (what DLPack producers
        order their work against when told no stream), and twinfer Tensors and
        host arrays on the context's own stream. Inputs are read in stream
        order (no device-wide sync).
        ``outputs``: "auto" gives host tensors when every input was a host array
        (NumPy in, NumPy out; the run is waited for) and device tensors
        otherwise, which return at once and carry a ready event that
        ``Tensor.__dlpack__(stream=...)``, ``.numpy()`` and other twinfer runs
        wait on; "host" or "device" choose.

        >>> out = engine.run({"input": np.zeros((1, 3, 224, 224), np.float32)})
        >>> out["logits"].numpy().shape
        (1, 1000)
        """
        if self._fast_feeds and stream is None:
            # NumPy arrays and twinfer Tensors are converted in the core, in one
            # call (benchmarks/call_overhead.py); anything else comes back None.
            out = self._core._run_feeds(feeds, self._input_names, self._output_names, context, outputs)
            if out is not None:
                if self._on_device and not self._warned_fallback:
                    self._warn_host_fallback(stacklevel=3)
                return out
        if not isinstance(feeds, Mapping):  # after the fast path, which takes dicts only
            raise InvalidArgumentError(self._not_feeds(feeds))
        if not self._on_device:
            if stream is not None:
                raise InvalidArgumentError(f"stream= is for device engines; this one runs on {self.device}")
            tensors = self._ordered_inputs(feeds)
            outs = self._core.run_in(context, tensors) if context is not None else self._core.run(tensors)
            if self._plain_io:
                return dict(zip(self._output_names, outs))
            return {name: _from_value(t) for name, t in zip(self._output_names, outs)}
        return dict(zip(self._output_names, self._run_device(feeds, context, stream, outputs)))

    def _not_feeds(self, feeds) -> str:
        """Why ``feeds`` is not what run takes: a list or a bare array, as
        onnxruntime's run and twinfer.backend's take them."""
        names = list(self._input_names)
        return (f"feeds must be a dict {{input name: array}}, got {type(feeds).__name__}: "
                f"run({{{', '.join(f'{n!r}: ...' for n in names)}}}), or positionally, in the model's "
                f"order, engine({', '.join(n if n.isidentifier() else f'x{i}' for i, n in enumerate(names))})")

    def _run_device(self, feeds: dict, context, stream, outputs: str) -> list:
        if outputs not in ("auto", "host", "device"):
            raise InvalidArgumentError(f"outputs must be 'auto', 'host' or 'device', got {outputs!r}")
        handle = stream_handle(stream)
        if handle is None:
            # The first framework device array, fed alone or in a sequence.
            arrays = (a for x in feeds.values() for a in (x if isinstance(x, (list, tuple)) else (x,)))
            for x in arrays:
                if not isinstance(x, Tensor) and is_device_array(x):
                    handle = producer_stream(x)
                    break
        # DLPack's stream 0 is ambiguous; the legacy default stream is what it means here.
        dl_stream = LEGACY_DEFAULT if handle == 0 else handle
        tensors = self._ordered_inputs(feeds, dl_stream if handle is not None else None)
        host = outputs == "host" or (outputs == "auto" and all(t.device == "cpu" for t in tensors))
        if context is not None:
            outs = self._core.run_in(context, tensors, handle, host)
        else:
            outs = self._core.run(tensors, handle, host)
        if self._plain_io:
            outs = list(outs)
        else:
            outs = [_from_value(t) for t in outs]
        if not self._warned_fallback:
            self._warn_host_fallback(stacklevel=4)
        return outs

    def _warn_host_fallback(self, stacklevel: int) -> None:
        """Warns once when a device engine ran a plan through the CPU evaluator."""
        reason = self._core.host_fallback_reason
        if reason:
            self._warned_fallback = True
            part = reason.startswith("part of it")  # a split plan: the nodes before ran on the device
            warnings.warn(f"{self.device}: this model ran through the CPU evaluator ({reason}); its results are "
                          f"right but {'that part runs' if part else 'it runs'} at host speed", RuntimeWarning,
                          stacklevel=stacklevel)

    def __call__(self, *inputs):
        """Positional inputs in the model's order; one output, or a tuple of them.
        Inputs with a default (``override_initializers=``) come last and may be left out."""
        least = len(self._input_names) - len(self._defaults)
        if not least <= len(inputs) <= len(self._input_names):
            expected = str(least) if least == len(self._input_names) else f"{least} to {len(self._input_names)}"
            raise InvalidArgumentError(f"expected {expected} inputs, got {len(inputs)}")
        feeds = dict(zip(self._input_names, inputs))
        outs = self._core._run_feeds(feeds, self._input_names, None) if self._fast_feeds else None
        if outs is not None:
            if self._on_device and not self._warned_fallback:
                self._warn_host_fallback(stacklevel=3)
        elif self._on_device:
            outs = self._run_device(feeds, None, None, "auto")
        elif self._plain_io:
            outs = self._core.run(self._ordered_inputs(feeds))
        else:
            outs = [_from_value(t) for t in self._core.run(self._ordered_inputs(feeds))]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def create_context(self, num_threads: int = 0, priority: int | str | None = None,
                       sm_share: float | None = None) -> "_core.ExecutionContext":
        """A private execution context for ``run(..., context=)``: its arenas, thread
        budget and, on a GPU, its own stream (``priority``: a stream priority, lower
        is more urgent, see ``twinfer.stream_priority_range``, or "high" / "normal" /
        "low" as Parallel takes them; None: the engine's stream_priority;
        ``sm_share``: run on that fraction of the GPU's SMs, a CUDA green context
        whose size is ``context.sm_count``). A context runs one thing at a time:
        threads sharing one take turns; one per thread runs them side by side."""
        if isinstance(priority, str):
            from .concurrency._members import PRIORITIES, _stream_priority

            if priority not in PRIORITIES:
                raise InvalidArgumentError(f"priority must be an int or one of {PRIORITIES}, not {priority!r}")
            priority = _stream_priority(self, priority)
        elif priority is not None and not isinstance(priority, int):
            raise InvalidArgumentError(f"priority must be an int or one of 'high', 'normal', 'low', not "
                                       f"{type(priority).__name__}")
        # Checked here: the core's binding takes only an int and a float (the
        # core checks the share's range).
        num_threads = thread_count(num_threads, "the engine's num_threads")
        if sm_share is not None and (isinstance(sm_share, bool) or not isinstance(sm_share, numbers.Real)):
            raise InvalidArgumentError(f"sm_share must be None or a number in (0, 1], not {sm_share!r}")
        return self._core.create_context(num_threads, priority, sm_share)

    # -- reports -----------------------------------------------------------
    def _shapes(self, shapes) -> list[list[int]]:
        if shapes is None:
            specs = self._specs
            if any(not isinstance(d, int) for s in specs for d in s.shape):
                raise InvalidArgumentError("the model has symbolic input dims: pass shapes=[...] explicitly")
            return [list(s.shape) for s in specs]
        if isinstance(shapes, dict):
            # A misspelt name first: otherwise only the input it meant shows, as missing.
            unknown = [k for k in shapes if k not in self._input_names]
            if unknown:
                raise InvalidArgumentError(f"shapes name unknown input(s) {unknown}; inputs are "
                                           f"{list(self._input_names)}")
            shapes = {**{n: t.shape for n, t in self._defaults.items()}, **shapes}
            missing = [s.name for s in self.inputs if s.name not in shapes]
            if missing:
                raise InvalidArgumentError(f"shapes for input(s) {missing} missing; inputs are {[s.name for s in self.inputs]}")
            shapes = [shapes[s.name] for s in self.inputs]
        try:
            return [[operator.index(d) for d in s] for s in shapes]
        except TypeError:
            raise InvalidArgumentError(f"shapes must be lists of ints, one per input, got {shapes!r}") from None

    def stats(self) -> dict:
        """Load-time passes applied, plan-cache hits and misses, plans built
        ahead of the runs that used them (``plans_ahead``, ``plans_ahead_used``)."""
        return self._core.stats()

    def memory_report(self, shapes=None) -> dict:
        """Arena peak vs. the naive sum of all intermediates, weight bytes, step
        counts, and ``in_place_steps``: steps whose output took an input's block."""
        return self._core.memory_report(self._shapes(shapes))

    def kernel_report(self, shapes=None) -> list[KernelRow]:
        """One KernelRow (node, op, kernel, backend, note, dtype) per step of the plan at
        ``shapes``: on a device engine, where each node runs and, for a node on
        the CPU, why; "copy" rows are the host<->device transfers between them.

        ``shapes`` may also be a feeds dict of arrays: the plan a run with them
        uses, keyed by the values of shape and steering inputs too
        (``stats()["shape_inputs"]``, ``["steering_inputs"]``)."""
        if isinstance(shapes, dict) and any(not isinstance(v, (tuple, list)) for v in shapes.values()):
            rows = self._core.kernel_report_for(self._ordered_inputs(shapes))
        else:
            rows = self._core.kernel_report(self._shapes(shapes))
        return [KernelRow(*r) for r in rows]

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
        borrowed from the file's bytes, read once. Kernels and memory plans are made again on
        load, for the CPU at hand.

        >>> twinfer.load("model.onnx", precision="int8", calibration=data).save("model.twinfer")
        >>> engine = twinfer.load("model.twinfer")
        """
        from ._version import __version__

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


def open_engine(source: tuple, device: str, precision: str = "fp32", *, num_threads: int = 0,
                optimize: bool = True, extra_outputs=(), calibration=None, bias_correction: bool = True,
                keep_float=(), int8_weights: bool = False, allow_cpu_fallback: bool = True,
                cuda_graphs: bool = True, stream_priority: int = 0, sim_coverage: str = "all",
                smoothing: bool = True, per_token="auto", max_cached_plans: int = 16,
                plan_ahead: bool = True, override_initializers=(),
                override_all_initializers: bool = False) -> "_core.Engine":
    """The core engine for ``source`` ((source, is_path, base_dir) from
    twinfer._source.model_source) on a concrete ``device``; for
    precision="int8", ``calibration`` is a ready twinfer.quantize.Calibration,
    ``smoothing`` applies its smoothing factors, ``per_token`` quantizes
    MatMul/Gemm activations per token ("auto": the calibration's token
    sequences; True: every one; False: none)."""
    src, is_path, base_dir = source
    # A range of 0 (always 0 in the calibration data) says nothing: scale 1
    # would quantize every real value to a few levels; those layers stay float.
    int8_amax = {k: v for k, v in calibration.amax.items() if v > 0} if calibration is not None else {}
    if calibration is not None and len(int8_amax) < len(calibration.amax):
        blank = sorted(k for k in calibration.amax if k not in int8_amax)
        warnings.warn(f"activation(s) {blank} have a calibrated range of 0: the layers reading them stay in float",
                      RuntimeWarning, stacklevel=3)
    int8_unsigned = calibration.unsigned() if calibration is not None else set()
    int8_mean = dict(calibration.channel_mean) if calibration is not None and bias_correction else {}
    int8_smoothing = {}
    if calibration is not None and smoothing:
        int8_smoothing = {n: (f, calibration.smoothed_amax[n]) for n, f in calibration.smoothing.items()
                          if n in calibration.smoothed_amax}
    int8_per_token = set()
    if calibration is not None:
        # insert_qdq applies it to MatMul/Gemm first inputs only, so every
        # calibrated activation may be named for True.
        int8_per_token = set(calibration.tokens) if per_token == "auto" else set(calibration.amax) if per_token else set()
    return _core.load_model(src, is_path, device, precision, num_threads, optimize, os.fspath(base_dir),
                            [str(n) for n in extra_outputs], int8_amax, set(keep_float), int8_weights,
                            int8_unsigned, int8_mean, allow_cpu_fallback, cuda_graphs, stream_priority,
                            sim_coverage, int8_smoothing, int8_per_token, max_cached_plans=max_cached_plans,
                            plan_ahead=plan_ahead, override_initializers=list(override_initializers),
                            override_all_initializers=override_all_initializers)
