"""twinfer.load: reads a model (or a saved engine), calibrates it first when
precision="int8" is given sample data, and compiles it into an Engine
(_engine.py)."""

from __future__ import annotations

import json
import numbers
import operator
import os
import warnings
from collections.abc import Iterable

from . import _core
from ._engine import Engine, TensorSpec, open_engine, thread_count  # noqa: F401  (twinfer.engine.Engine, .TensorSpec)
from ._source import model_source
from .errors import DeviceError, InvalidArgumentError, ModelFormatError


# The options of running (_device_options): a saved engine takes them too.
RUN_OPTIONS = ("allow_cpu_fallback", "cuda_graphs", "stream_priority", "sim_coverage", "max_cached_plans",
               "plan_ahead")


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if _core.cuda_available() else "cpu"
    return device


def _check_device_precision(device, precision) -> None:
    """device= and precision= must be strings (the core names a wrong one):
    anything else reached the core's binding, whose error is a dump of its
    internal signature."""
    if not isinstance(device, str):
        raise InvalidArgumentError(f"device must be a string: 'auto', 'cpu', 'cuda', 'cuda:N' or 'sim', not {device!r}")
    if precision is not None and not isinstance(precision, str):
        raise InvalidArgumentError(f"precision must be a string: 'fp32', 'tf32', 'fp16', 'bf16', 'int8' or 'fp8' (or "
                                   f"None: the model's fp32, a saved engine's own), not {precision!r}")


def _int_option(options: dict, name: str, default: int, least: int | None = None) -> int:
    """options[name] (popped) as an int: a float or a string is refused, not
    truncated or parsed."""
    value = options.pop(name, default)
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an int, not {value!r}") from None
    if least is not None and number < least:
        raise InvalidArgumentError(f"{name} must be at least {least}, got {number}")
    return number


def _names_option(name: str, value) -> list[str]:
    """A list of names (extra_outputs=, keep_float=): one string is one name,
    not its letters."""
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(f"{name} must be a list of names (strings), not {value!r}")
    return names


def load(model, device: str = "auto", precision: str | None = None, **options) -> Engine:
    """Load and compile a model.

    model: a path to an ONNX file or to a saved engine (``Engine.save``), ONNX bytes, or an
           ``onnx.ModelProto``. A saved engine takes only device=, num_threads= and the options
           of running: allow_cpu_fallback, cuda_graphs, stream_priority, sim_coverage,
           max_cached_plans and plan_ahead (the rest was fixed when it was built).
    device: "auto" (the GPU when present, else the CPU), "cpu", "cuda" or "cuda:N"; "sim" is the
            simulated device, a GPU stand-in on the CPU for tests (twinfer.testing).
    precision: "fp32" (the default for a model), "tf32", "fp16", "bf16" (GPU) — fp32 on the CPU;
               "int8" (calibrated; CPU and GPU); "fp8" (GPU: calibrated E4M3 GEMMs, the rest in
               fp16). A saved engine keeps the precision it was built with: none given, or the same.
    options: num_threads (CPU threads per run: an int, 0 (the default) for all cores),
             optimize (passes, default True),
             base_dir (folder for external weights when loading from bytes),
             shape_ranges ({input name: (min_shape, max_shape)}: plans for both are built at
             load, and a run outside the range raises twinfer.ShapeError),
             extra_outputs (names of intermediate values to return too, after the model's outputs),
             max_cached_plans (16: plans kept, one per input shape, least recently used dropped;
             raise it when inputs take more shapes, such as sentence lengths, and repeat them),
             plan_ahead (True: when the shapes of new plans grow by the same step, as a decoder's
             past length does, the plan for the next step is built on a background thread
             while the caller works, so the next run finds it ready; False: only on demand),
             override_initializers (initializers the model also lists as graph inputs, which ONNX
             makes overridable defaults, are folded in as constants and listed in
             ``engine.overridable_initializers``; True makes all of them inputs, or a list of
             names some: a run may feed them and one that does not gets their default, at the
             cost of folding nothing that depends on them),
             for precision="int8" / "fp8": calibration (sample inputs: feed dicts or arrays; or a saved
             twinfer.quantize.Calibration / its JSON path), calibrator ("percentile" default for
             int8, "minmax" for fp8, "entropy"), percentile (99.99), keep_float (node names left in float;
             an unnamed node by its first output's name),
             bias_correction (True: each layer's bias absorbs the mean shift its int8
             weights cause, from the calibration's per-channel means), per_token ("auto": the
             token sequences, activations of rank >= 3 read by MatMul/Gemm with constant weights,
             get one int8 scale per token computed at run time; True: every MatMul/Gemm input;
             False: none), smoothing (True: SmoothQuant's alpha 0.5 for the token sequences,
             chosen at calibration, or an alpha in [0, 1]; False: off),
             progress (a bar while calibrating),
             weights ("fp32" default; "int8": MatMul/Gemm weights stored int8 per output channel and
             dequantized inside the GEMM, activations stay float32 — a quarter of the weight bytes),
             on a GPU: allow_cpu_fallback (True: nodes without a GPU kernel run on the CPU, with
             copies between; False: such nodes raise at load, listed, and a run whose shapes
             depend on values, which only the CPU evaluator runs, raises), cuda_graphs (True: after the
             first run at an input shape, runs replay a captured CUDA graph), stream_priority
             (the engine's streams; lower is more urgent), sim_coverage (device="sim" only:
             "all" runs every node on the simulated device, "cuda" only those CUDA has kernels for).

    >>> engine = twinfer.load("resnet50.onnx", device="cpu")
    """
    _check_device_precision(device, precision)
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model) and _core.is_engine_file(os.fspath(model)):
        return _load_saved(os.fspath(model), device, precision, options)
    precision = "fp32" if precision is None else precision
    source, is_path, base_dir = model_source(model)
    base_dir = options.pop("base_dir", base_dir)
    if not isinstance(base_dir, (str, os.PathLike)):
        raise InvalidArgumentError(f"base_dir must be a folder's path, not {base_dir!r}")
    num_threads = thread_count(options.pop("num_threads", 0))
    optimize = bool(options.pop("optimize", True))
    shape_ranges = options.pop("shape_ranges", None)
    extra_outputs = _names_option("extra_outputs", options.pop("extra_outputs", ()))
    smoothing = _smoothing_alpha(options.pop("smoothing", True))
    per_token = options.pop("per_token", "auto")
    if per_token not in ("auto", True, False):
        raise InvalidArgumentError(f"per_token must be 'auto', True or False, got {per_token!r}")
    calibration = _int8_calibration(model, precision, options, num_threads, smoothing)
    bias_correction = bool(options.pop("bias_correction", True))
    keep_float = set(_names_option("keep_float", options.pop("keep_float", ())))
    if keep_float:
        _check_layer_names(model, keep_float)
    weights = options.pop("weights", "fp32")
    if weights not in ("fp32", "float32", "int8"):
        raise InvalidArgumentError(f"weights must be 'fp32' or 'int8', got {weights!r}")
    int8_weights = weights == "int8"
    override = options.pop("override_initializers", None)
    if override is True:
        override_names, override_all = [], True
    elif override in (None, False):
        override_names, override_all = [], False
    elif isinstance(override, str) or not isinstance(override, Iterable) or \
            not all(isinstance(n, str) for n in override):
        raise InvalidArgumentError(
            f"override_initializers must be True or a list of initializer names, got {override!r}")
    else:
        override_names, override_all = list(override), False
    device_options = _device_options(options)
    if options:
        raise InvalidArgumentError(f"unknown option(s): {sorted(options)}")
    resolved = dict(num_threads=num_threads, optimize=optimize, extra_outputs=extra_outputs, calibration=calibration,
                    bias_correction=bias_correction, keep_float=keep_float, int8_weights=int8_weights,
                    smoothing=smoothing is not None, per_token=per_token, override_initializers=override_names,
                    override_all_initializers=override_all, **device_options)
    requested = device
    device = _resolve_device(device)
    try:
        core = open_engine((source, is_path, base_dir), device, precision, **resolved)
    except DeviceError:
        if requested != "auto":
            raise
        warnings.warn("the CUDA backend cannot run this model here; using the CPU", RuntimeWarning, stacklevel=2)
        core = open_engine((source, is_path, base_dir), "cpu", precision, **resolved)
    engine = Engine(core, shape_ranges)
    engine.calibration = calibration
    return engine


def _check_layer_names(model, names: set) -> None:
    """keep_float names nodes (a node without a name by its first output, as
    analyze() reports it): a name the model lacks was silently ignored."""
    source, is_path, base_dir = model_source(model)
    info = _core.read_model_info(source, is_path, base_dir)
    known = {name or (outs[0] if outs else "") for (name, _op, _domain), (_ins, outs) in
             zip(info["nodes"], info["node_io"])}
    unknown = sorted(n for n in names if n not in known or not n)
    if unknown:
        raise InvalidArgumentError(f"keep_float names no node of the model: {unknown} (nodes are named by their "
                                   "name, or their first output's when they have none)")


def _device_options(options: dict) -> dict:
    """The options of running (popped from ``options``), checked: the GPU
    runtime's and the plan cache's; a saved engine takes them too."""
    out = dict(allow_cpu_fallback=bool(options.pop("allow_cpu_fallback", True)),
               cuda_graphs=bool(options.pop("cuda_graphs", True)),
               stream_priority=_int_option(options, "stream_priority", 0),
               sim_coverage=options.pop("sim_coverage", "all"),
               max_cached_plans=_int_option(options, "max_cached_plans", 16, least=1),
               plan_ahead=bool(options.pop("plan_ahead", True)))  # keep RUN_OPTIONS in step
    if out["sim_coverage"] not in ("all", "cuda"):
        raise InvalidArgumentError(f"sim_coverage must be 'all' or 'cuda', got {out['sim_coverage']!r}")
    return out


def _load_saved(path: str, device: str, precision: str | None, options: dict) -> Engine:
    """A saved engine (Engine.save): device, num_threads and the GPU runtime's
    options are chosen now; everything else was fixed when it was built."""
    from ._version import __version__

    num_threads = thread_count(options.pop("num_threads", 0))
    device_options = _device_options(options)
    if options:
        raise InvalidArgumentError(
            f"{path} is a saved engine: only device=, num_threads= and the options of running "
            f"({', '.join(RUN_OPTIONS)}) apply when loading it, not {sorted(options)} (they were fixed when it was "
            "built; load the ONNX model to change them)")
    requested = device
    try:
        core, meta = _core.load_engine(path, _resolve_device(device), num_threads, **device_options)
    except DeviceError:
        if requested != "auto":
            raise
        warnings.warn("the CUDA backend cannot run this model here; using the CPU", RuntimeWarning, stacklevel=3)
        core, meta = _core.load_engine(path, "cpu", num_threads, **device_options)
    built_for = meta.get("backend")
    runs_on = "cpu" if core.device == "cpu" or (core.device.startswith("sim") and
                                                 device_options["sim_coverage"] == "all") else "cuda"
    if built_for and built_for != runs_on:
        warnings.warn(f"{path} was optimised for the {built_for} backend and now runs on {core.device}: fused ops "
                      f"without a {runs_on} kernel run on the CPU (save an engine loaded on this device to avoid "
                      "that)", RuntimeWarning, stacklevel=3)
    saved_by = meta.get("twinfer_version")
    if saved_by != __version__:
        raise ModelFormatError(f"{path} was saved by twinfer {saved_by}; this is twinfer {__version__}: "
                               "load the ONNX model again and save a new engine")
    if precision is not None and ("fp32" if precision == "float32" else precision) != core.precision:
        raise InvalidArgumentError(f"{path} is a saved {core.precision} engine; precision={precision!r} cannot change "
                                   "it (leave precision out, or load the ONNX model with that precision instead)")
    ranges = {k: (tuple(v[0]), tuple(v[1])) for k, v in json.loads(meta.get("shape_ranges", "{}")).items()}
    engine = Engine(core, ranges)
    if "calibration" in meta:
        from .quantize import Calibration

        engine.calibration = Calibration.from_dict(json.loads(meta["calibration"]))
    return engine


def _smoothing_alpha(value) -> float | None:
    """smoothing=: True (SmoothQuant's alpha 0.5), an alpha in [0, 1], or False / None (off)."""
    from .quantize.smoothing import DEFAULT_ALPHA

    if value is True:
        return DEFAULT_ALPHA
    if value is False or value is None:
        return None
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        alpha = -1.0
    if not 0.0 <= alpha <= 1.0:
        raise InvalidArgumentError(f"smoothing must be True, False or an alpha in [0, 1], got {value!r}")
    return alpha


def _int8_calibration(model, precision: str, options: dict, num_threads: int, smoothing: float | None = None):
    """For precision="int8" / "fp8": the Calibration given, or one computed from
    the calibration data (options calibration=, calibrator=, percentile=)."""
    calibration = options.pop("calibration", None)
    # int8: percentile by default: the entropy (KL) search clips spiky
    # activations such as ReLU6 outputs far too hard (EfficientNet-Lite0 lost
    # every top-1). fp8: the largest value; E4M3's exponent keeps the small
    # ones, clipping would only lose the large.
    calibrator = options.pop("calibrator", "minmax" if precision == "fp8" else "percentile")
    percentile = options.pop("percentile", 99.99)
    if isinstance(percentile, bool) or not isinstance(percentile, numbers.Real):
        raise InvalidArgumentError(f"percentile must be a number (99.99: the default), not {percentile!r}")
    percentile = float(percentile)
    progress = bool(options.pop("progress", True))
    if precision not in ("int8", "fp8"):
        if calibration is not None:
            raise InvalidArgumentError("calibration= is only used with precision='int8' or 'fp8'")
        return None
    from .quantize import Calibration, calibrate

    if calibration is None:
        raise InvalidArgumentError(f"precision={precision!r} needs calibration= (sample inputs, or a "
                                   "twinfer.quantize.Calibration)")
    if isinstance(calibration, (Calibration, str, os.PathLike)):
        cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
        _check_calibration_fits(model, cal, smoothing if precision == "int8" else None)
        return cal
    # fp8 keeps its per-tensor scales: smoothing is an int8 option.
    return calibrate(model, calibration, calibrator=calibrator, percentile=percentile, num_threads=num_threads,
                     progress=progress, smoothing=smoothing if precision == "int8" else None)


def _check_calibration_fits(model, cal, smoothing: float | None) -> None:
    """A ready Calibration must be this model's: one that names none of its
    activations (made for another model) would build an all-float engine
    that says int8; one smoothed with another alpha than asked was silently
    used as it was."""
    from .quantize.calibration import quantizable_activations

    if not set(quantizable_activations(model)) & set(cal.amax):
        raise InvalidArgumentError("the calibration names none of this model's quantizable activations; was it "
                                   "made for another model? (calibrate with this model's data)")
    if (smoothing is not None and cal.smoothing_alpha is not None
            and abs(float(smoothing) - cal.smoothing_alpha) > 1e-9):
        raise InvalidArgumentError(f"the calibration was smoothed with alpha {cal.smoothing_alpha}, not {smoothing}: "
                                   "calibrate again with the data for another alpha")
