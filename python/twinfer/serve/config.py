"""A model's config.pbtxt, read into Triton's own ModelConfig message.

protobuf's text format parses the file into the ModelConfig class generated
from Triton's model_config.proto (it ships with tritonclient), so every field
Triton documents parses exactly as Triton parses it. What twinfer serves is
then checked field by field: every error names the model and the field, and
fields whose meaning twinfer cannot honour are refused rather than ignored.
The checks against the model itself (input names, types, dims) come once the
engine is loaded: ``complete_io``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from .errors import ModelLoadError
from .tensors import config_type_of, dtype_of_config_type

log = logging.getLogger("twinfer.serve")

ModelConfig = mc.ModelConfig

CONFIG_FILE = "config.pbtxt"
ONNX_FILE = "model.onnx"
ENGINE_FILE = "model.twinfer"
# Triton's names for an ONNX model, and twinfer's own backend name.
ONNX_PLATFORM = "onnxruntime_onnx"
ENGINE_PLATFORM = "twinfer_engine"
BACKENDS = ("onnxruntime", "twinfer")
PRECISIONS = ("fp32", "int8", "fp16", "bf16", "tf32")

# Fields whose meaning twinfer does not implement: a config that sets them is
# refused, because serving it would silently behave otherwise than written.
_REFUSED = {
    "sequence_batching": "stateful sequence batching",
    "ensemble_scheduling": "ensembles",
    "batch_input": "batch inputs",
    "batch_output": "batch outputs",
}
# Fields that tune Triton's own backends or features; they do not change a
# result, so they are accepted and logged as not applied.
_NOT_APPLIED = ("optimization", "model_warmup", "response_cache", "metric_tags", "model_operations",
                "model_repository_agents", "model_metrics", "runtime", "cc_model_filenames")


@dataclass(frozen=True)
class TensorConfig:
    """An input or output as configured: dims without the batch dim when
    max_batch_size > 0, -1 for a dim of any size."""

    name: str
    dtype: str  # twinfer's name, "float32"
    dims: tuple[int, ...]


@dataclass(frozen=True)
class InstanceGroup:
    kind: str  # "cpu" or "gpu" (KIND_AUTO resolved when the model loads)
    count: int
    gpus: tuple[int, ...]


@dataclass
class ModelSettings:
    """What twinfer takes from a ModelConfig, checked."""

    name: str
    platform: str
    backend: str
    model_filename: str  # "" = model.onnx, else model.twinfer
    max_batch_size: int
    inputs: list[TensorConfig]
    outputs: list[TensorConfig]
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    default_timeout_us: int  # 0: none
    allow_timeout_override: bool
    max_queue_size: int
    instance_groups: list[InstanceGroup]
    version_policy: tuple  # ("latest", n) | ("all",) | ("specific", (v, ...))
    precision: str
    calibration: str | None  # an absolute path
    num_threads: int
    not_applied: list[str] = field(default_factory=list)


def _error(model: str, where: str, problem: str) -> ModelLoadError:
    return ModelLoadError(f"model {model!r}: {where}: {problem}")


def read_config(model_dir: Path) -> ModelConfig:
    """config.pbtxt of ``model_dir`` parsed into a ModelConfig; an empty one
    when there is no file (everything is then completed from the model)."""
    name = model_dir.name
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        return ModelConfig()
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise _error(name, CONFIG_FILE, f"cannot be read ({e})") from None
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as e:  # says the line, column and the unknown field or bad value
        raise _error(name, CONFIG_FILE, str(e)) from None


def config_from_json(model: str, text: str) -> ModelConfig:
    """A ModelConfig from JSON (the repository load request's "config" parameter)."""
    try:
        return json_format.Parse(text, ModelConfig())
    except json_format.ParseError as e:
        raise _error(model, "config (JSON of the load request)", str(e)) from None


def config_to_dict(config: ModelConfig) -> dict:
    """The JSON form Triton's HTTP API returns: field names as in the .proto,
    fields at their defaults included (max_batch_size 0 is an answer too),
    64-bit integers as numbers (protobuf's JSON writes them as strings)."""
    data = json_format.MessageToDict(config, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    return _int64_as_numbers(config, data)


def _int64_as_numbers(message, data: dict) -> dict:
    from google.protobuf.descriptor import FieldDescriptor as F

    int64 = (F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64)
    for fd in message.DESCRIPTOR.fields:
        if fd.name not in data:
            continue
        value = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is not None:
                data[fd.name] = {k: _int64_as_numbers(value[k], v) for k, v in data[fd.name].items()}
        elif fd.message_type is not None:
            if fd.is_repeated:
                data[fd.name] = [_int64_as_numbers(m, d) for m, d in zip(value, data[fd.name])]
            else:
                data[fd.name] = _int64_as_numbers(value, data[fd.name])
        elif fd.type in int64:
            data[fd.name] = [int(v) for v in data[fd.name]] if fd.is_repeated else int(data[fd.name])
    return data


def _tensor_configs(model: str, what: str, tensors) -> list[TensorConfig]:
    out, seen = [], set()
    for i, t in enumerate(tensors):
        where = f"{what}[{i}]"
        if not t.name:
            raise _error(model, f"{where}.name", "missing")
        where = f"{what} {t.name!r}"
        if t.name in seen:
            raise _error(model, where, "listed twice")
        seen.add(t.name)
        type_name = mc.DataType.Name(t.data_type)
        if t.data_type == mc.TYPE_INVALID:
            raise _error(model, f"{where}.data_type", "missing (TYPE_FP32, TYPE_INT64, ...)")
        try:
            dtype = dtype_of_config_type(type_name)
        except ValueError as e:
            raise _error(model, f"{where}.data_type", str(e)) from None
        if any(d < -1 for d in t.dims):
            raise _error(model, f"{where}.dims", f"{list(t.dims)}: a dim is a size >= 0 or -1 (any size)")
        if t.HasField("reshape"):
            raise _error(model, f"{where}.reshape", "not supported by twinfer (reshape in the model instead)")
        for flag in ("is_shape_tensor", "allow_ragged_batch", "optional", "is_non_linear_format_io"):
            if getattr(t, flag, False):
                raise _error(model, f"{where}.{flag}", "not supported by twinfer")
        out.append(TensorConfig(t.name, dtype, tuple(int(d) for d in t.dims)))
    return out


def _parameters(model: str, config: ModelConfig, model_dir: Path) -> tuple[str, str | None, int]:
    params = {k: v.string_value for k, v in config.parameters.items()}
    precision = params.pop("precision", "fp32").strip().lower() or "fp32"
    if precision in ("float32",):
        precision = "fp32"
    if precision not in PRECISIONS:
        raise _error(model, "parameters.precision", f"{precision!r} is not a precision; twinfer takes "
                     "fp32 or int8 (fp16, bf16 and tf32 come with the GPU kernels)")
    calibration = params.pop("calibration", "").strip() or None
    if calibration is not None:
        path = Path(calibration) if os.path.isabs(calibration) else model_dir / calibration
        if not path.is_file():
            raise _error(model, "parameters.calibration", f"no file {path}")
        calibration = str(path)
    if precision == "int8" and calibration is None:
        raise _error(model, "parameters.calibration", "precision int8 needs a calibration file (a "
                     "twinfer.quantize.Calibration saved with .save('x.calib.json'), relative to the model folder)")
    if precision != "int8" and calibration is not None:
        raise _error(model, "parameters.calibration", f"given, but parameters.precision is {precision}, not int8")
    try:
        num_threads = int(params.pop("num_threads", "0") or 0)
    except ValueError:
        raise _error(model, "parameters.num_threads", "must be an integer") from None
    if num_threads < 0:
        raise _error(model, "parameters.num_threads", "must be >= 0 (0: share the cores between instances)")
    for key in params:
        log.warning("model %r: parameters.%s is not a twinfer parameter (precision, calibration, num_threads); "
                    "ignored", model, key)
    return precision, calibration, num_threads


def _instance_groups(model: str, config: ModelConfig) -> list[InstanceGroup]:
    groups = []
    for i, g in enumerate(config.instance_group):
        where = f"instance_group[{i}]"
        if g.count < 0:
            raise _error(model, f"{where}.count", f"{g.count} is negative")
        kind = mc.ModelInstanceGroup.Kind.Name(g.kind)
        if kind == "KIND_MODEL":
            raise _error(model, f"{where}.kind", "KIND_MODEL is not supported; use KIND_GPU, KIND_CPU or KIND_AUTO")
        if kind == "KIND_CPU" and g.gpus:
            raise _error(model, f"{where}.gpus", "given for a KIND_CPU group")
        if any(d < 0 for d in g.gpus):
            raise _error(model, f"{where}.gpus", f"{list(g.gpus)} has a negative device index")
        groups.append(InstanceGroup({"KIND_GPU": "gpu", "KIND_CPU": "cpu"}.get(kind, "auto"), max(1, g.count),
                                    tuple(g.gpus)))
    return groups or [InstanceGroup("auto", 1, ())]


def _version_policy(model: str, config: ModelConfig) -> tuple:
    which = config.version_policy.WhichOneof("policy_choice") if config.HasField("version_policy") else None
    if which == "all":
        return ("all",)
    if which == "specific":
        versions = tuple(int(v) for v in config.version_policy.specific.versions)
        if not versions:
            raise _error(model, "version_policy.specific.versions", "empty")
        return ("specific", versions)
    if which == "latest":
        n = config.version_policy.latest.num_versions
        return ("latest", max(1, n))
    return ("latest", 1)


def settings_from_config(config: ModelConfig, model_dir: Path) -> ModelSettings:
    """Check ``config`` (of the model in ``model_dir``) and take what twinfer serves."""
    model = model_dir.name
    if config.name and config.name != model:
        raise _error(model, "name", f"{config.name!r} differs from the model's folder name {model!r}")
    platform, backend = config.platform, config.backend
    if platform and platform not in (ONNX_PLATFORM, ENGINE_PLATFORM):
        raise _error(model, "platform", f"{platform!r} is not served by twinfer: it serves ONNX models "
                     f"(platform {ONNX_PLATFORM!r}, or backend 'onnxruntime' / 'twinfer') and saved twinfer "
                     f"engines (platform {ENGINE_PLATFORM!r} or backend 'twinfer')")
    if backend and backend not in BACKENDS:
        raise _error(model, "backend", f"{backend!r} is not served by twinfer; use 'twinfer' (or 'onnxruntime' "
                     "for an ONNX model)")
    for name, what in _REFUSED.items():
        present = config.HasField(name) if name in ("sequence_batching", "ensemble_scheduling") else \
            len(getattr(config, name)) > 0
        if present:
            raise _error(model, name, f"{what} are not supported by twinfer")
    if config.HasField("model_transaction_policy") and config.model_transaction_policy.decoupled:
        raise _error(model, "model_transaction_policy.decoupled", "decoupled models are not supported by twinfer")
    not_applied = [name for name in _NOT_APPLIED if _is_set(config, name)]
    if config.max_batch_size < 0:
        raise _error(model, "max_batch_size", f"{config.max_batch_size} is negative")
    mbs = int(config.max_batch_size)

    dynamic = config.HasField("dynamic_batching")
    db = config.dynamic_batching
    if dynamic and mbs == 0:
        raise _error(model, "dynamic_batching", "needs max_batch_size > 0 (the first dim of every input is "
                     "the batch dim that requests are merged along)")
    preferred = tuple(int(s) for s in db.preferred_batch_size)
    bad = [s for s in preferred if not 1 <= s <= mbs]
    if bad:
        raise _error(model, "dynamic_batching.preferred_batch_size", f"{bad} outside 1..max_batch_size ({mbs})")
    if db.priority_levels > 0 or len(db.priority_queue_policy) > 0:
        raise _error(model, "dynamic_batching.priority_levels", "request priorities are not supported by twinfer")
    policy = db.default_queue_policy
    if policy.timeout_action == mc.ModelQueuePolicy.DELAY:
        raise _error(model, "dynamic_batching.default_queue_policy.timeout_action",
                     "DELAY is not supported by twinfer (timed-out requests are rejected)")

    precision, calibration, num_threads = _parameters(model, config, model_dir)
    return ModelSettings(
        name=model, platform=platform, backend=backend, model_filename=config.default_model_filename,
        max_batch_size=mbs,
        inputs=_tensor_configs(model, "input", config.input),
        outputs=_tensor_configs(model, "output", config.output),
        dynamic_batching=dynamic, preferred_batch_sizes=preferred,
        max_queue_delay_us=int(db.max_queue_delay_microseconds),
        default_timeout_us=int(policy.default_timeout_microseconds),
        allow_timeout_override=bool(policy.allow_timeout_override) or not policy.default_timeout_microseconds,
        max_queue_size=int(policy.max_queue_size),
        instance_groups=_instance_groups(model, config), version_policy=_version_policy(model, config),
        precision=precision, calibration=calibration, num_threads=num_threads, not_applied=not_applied)


def _is_set(config: ModelConfig, name: str) -> bool:
    fd = config.DESCRIPTOR.fields_by_name[name]
    value = getattr(config, name)
    if fd.is_repeated:
        return len(value) > 0
    if fd.message_type is not None:
        return config.HasField(name)
    return bool(value)


def model_file(settings: ModelSettings, version_dir: Path) -> Path:
    """The file of one version: default_model_filename, else model.onnx, else model.twinfer."""
    model = settings.name
    if settings.model_filename:
        path = version_dir / settings.model_filename
        if not path.is_file():
            raise _error(model, "default_model_filename", f"no file {path}")
        return path
    for name in (ONNX_FILE, ENGINE_FILE):
        if (version_dir / name).is_file():
            return version_dir / name
    raise ModelLoadError(f"model {model!r}: version {version_dir.name}: no {ONNX_FILE} or {ENGINE_FILE} in "
                         f"{version_dir} (or name the file with default_model_filename)")


def _dims_of(shape: tuple, batched: bool) -> tuple[int, ...]:
    dims = shape[1:] if batched else shape
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims)


def complete_io(settings: ModelSettings, config: ModelConfig, engine) -> None:
    """Check the configured inputs/outputs against the loaded model, and fill
    in the ones the configuration leaves out (in ``settings`` and ``config``),
    as Triton's auto-complete does."""
    model = settings.name
    batched = settings.max_batch_size > 0
    if batched:
        for spec in engine.inputs:
            if not spec.shape or isinstance(spec.shape[0], int):
                raise _error(model, "max_batch_size", f"{settings.max_batch_size}, but the model's input "
                             f"{spec.name!r} has no batch dim (shape {list(spec.shape)}); set max_batch_size: 0")
    for what, specs, configured, proto in (("input", engine.inputs, settings.inputs, config.input),
                                           ("output", engine.outputs, settings.outputs, config.output)):
        by_name = {s.name: s for s in specs}
        for t in configured:
            spec = by_name.get(t.name)
            if spec is None:
                raise _error(model, f"{what} {t.name!r}", f"the model has no {what} of that name; its {what}s are "
                             f"{list(by_name)}")
            if t.dtype != spec.dtype:
                raise _error(model, f"{what} {t.name!r}.data_type", f"{config_type_of(t.dtype)}, but the model's "
                             f"{what} is {spec.dtype} ({_config_type_or_name(spec.dtype)})")
            model_dims = spec.shape[1:] if batched else spec.shape
            if spec.name in engine._rank_unknown:
                continue  # declared without a shape: the configured dims decide
            if len(t.dims) != len(model_dims) or any(isinstance(m, int) and m >= 0 and c not in (-1, m)
                                                     for c, m in zip(t.dims, model_dims)):
                batch_note = " (without the batch dim, as max_batch_size > 0)" if batched else ""
                raise _error(model, f"{what} {t.name!r}.dims", f"{list(t.dims)} does not fit the model's shape "
                             f"{list(spec.shape)}{batch_note}")
        if what == "input" and configured:
            missing = [n for n in by_name if n not in {t.name for t in configured}]
            if missing:
                raise _error(model, "input", f"the model's input(s) {missing} are not in the configuration")
        if not configured:
            for spec in specs:
                if what == "input" and spec.name in engine._rank_unknown:
                    raise _error(model, what, f"{spec.name!r} is declared without a shape in the model, so its "
                                 f"dims cannot be completed: give the inputs and their dims in config.pbtxt")
                try:
                    type_name = config_type_of(spec.dtype)
                except ValueError as e:
                    raise _error(model, what, f"{spec.name!r}: {e}") from None
                t = TensorConfig(spec.name, spec.dtype, _dims_of(spec.shape, batched))
                configured.append(t)
                proto.add(name=t.name, data_type=mc.DataType.Value(type_name), dims=list(t.dims))


def _config_type_or_name(dtype: str) -> str:
    try:
        return config_type_of(dtype)
    except ValueError:
        return "no config type"


def fill_defaults(config: ModelConfig, settings: ModelSettings, groups: list[tuple[str, int, list[int]]],
                  platform: str) -> None:
    """What the served model runs with, written into ``config`` so that the
    model-configuration API shows it (as Triton shows its completed config)."""
    config.name = settings.name
    if not config.platform and not config.backend:
        config.platform = platform
        config.backend = "twinfer"
    elif not config.backend:
        config.backend = "twinfer"
    del config.instance_group[:]
    for kind, count, gpus in groups:
        g = config.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_GPU if kind == "gpu"
                                      else mc.ModelInstanceGroup.KIND_CPU)
        g.gpus.extend(gpus)
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
