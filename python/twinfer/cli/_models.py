"""MODEL arguments of the command line: an ONNX file, or ``torchvision:NAME``
(a torchvision architecture with random weights, exported once and cached)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._cache import cache_dir
from .._progress import Steps
from ..errors import InvalidArgumentError

TORCHVISION_PREFIX = "torchvision:"
TORCHVISION_INPUT = "input"

MODEL_HELP = (
    "an ONNX file, a saved twinfer engine (Engine.save), or torchvision:NAME (e.g. torchvision:resnet18): that torchvision architecture with "
    "random weights (seed 0), exported to ONNX with a dynamic batch dim and cached; its input is named "
    "'input' and is 3x224x224 unless --shapes input:NxCxHxW says otherwise"
)


@dataclass
class ResolvedModel:
    label: str
    path: Path
    module: Any = None  # the torch module, for torchvision:NAME models
    default_shapes: dict[str, list[int]] | None = None


def _torchvision(name: str, shapes: dict[str, list[int]], batch: int, progress: bool) -> ResolvedModel:
    try:
        import torch
        import torchvision
    except ImportError as e:
        raise InvalidArgumentError("torchvision:NAME models need torch and torchvision installed") from e
    from ..torch._export import export_onnx, export_to_cache_dir

    if name not in torchvision.models.list_models():
        raise InvalidArgumentError(
            f"torchvision has no model '{name}'; some it has: {', '.join(sorted(torchvision.models.list_models())[:12])}, ..."
        )
    shape = list(shapes.get(TORCHVISION_INPUT, [batch, 3, 224, 224]))
    if len(shape) != 4:
        raise InvalidArgumentError(f"torchvision models take NxCxHxW input, got {'x'.join(map(str, shape))}")
    torch.manual_seed(0)
    module = torchvision.models.get_model(name, weights=None).eval()
    tag = hashlib.sha256(f"{name}|{shape[1:]}|{torch.__version__}|{torchvision.__version__}|seed0".encode()).hexdigest()[:16]
    folder = cache_dir("torchvision")
    stem = f"{name}-{shape[2]}x{shape[3]}-{tag}"
    path = folder / f"{stem}.onnx"
    if not path.exists():
        example = torch.randn(*shape)
        dyn = {TORCHVISION_INPUT: {0: "batch"}, "output": {0: "batch"}}
        with Steps(1, f"exporting torchvision {name}", enabled=progress) as s:
            s.step("torch.onnx.export")
            path = export_to_cache_dir(
                folder, stem, lambda p: export_onnx(module, (example,), p, [TORCHVISION_INPUT], ["output"], dyn)
            )
    return ResolvedModel(f"torchvision:{name} (random weights)", path, module, {TORCHVISION_INPUT: shape})


def resolve(model: str, shapes: dict[str, list[int]] | None = None, batch: int = 1, progress: bool = True) -> ResolvedModel:
    shapes = shapes or {}
    if model.startswith(TORCHVISION_PREFIX):
        return _torchvision(model[len(TORCHVISION_PREFIX):], shapes, batch, progress)
    if not os.path.exists(model):
        raise InvalidArgumentError(f"model file not found: {model} (or use torchvision:NAME)")
    return ResolvedModel(model, Path(model))


def check_precision(precision: str | None, path, command: str) -> None:
    """--precision int8 / fp8 build a calibrated engine, which needs sample
    inputs the command line cannot take: say how to get one instead of the
    Python API's "needs calibration=" that a command-line user cannot act on.
    A saved engine built with that precision is fine (it keeps its own)."""
    if precision not in ("int8", "fp8"):
        return
    from .. import _core

    if os.path.isfile(path) and _core.is_engine_file(os.fspath(path)):
        return
    raise InvalidArgumentError(
        f"--precision {precision} needs calibration data, which the command line does not take: build the engine in "
        f"Python, twinfer.load(MODEL, precision={precision!r}, calibration=samples).save('model.twinfer'), and give "
        f"`twinfer {command}` the saved file")
