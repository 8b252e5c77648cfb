"""twinfer: fast neural-network inference with a C++/CUDA core.

    import twinfer
    engine = twinfer.load("model.onnx")          # GPU when present, else CPU
    outputs = engine.run({"input": array})        # {name: twinfer.Tensor}
"""

from __future__ import annotations

from ._version import __version__

from . import _libs

_libs.preload()

from . import _core  # noqa: E402


def _check_memory_limit() -> None:
    """TWINFER_HOST_MEMORY_LIMIT_MB that is not a whole number of MB is no
    limit at all (core/host_memory.cc): said here, once, rather than silently."""
    import os
    import warnings

    value = os.environ.get("TWINFER_HOST_MEMORY_LIMIT_MB")
    if value is not None and value.strip() and not (value.strip().isascii() and value.strip().isdecimal()):
        warnings.warn(f"TWINFER_HOST_MEMORY_LIMIT_MB={value!r} is not a whole number of MB: no host memory limit "
                      "is set", RuntimeWarning, stacklevel=3)


_check_memory_limit()

_libs.register_cuda_libraries(_core)
from ._convert import Tensor, as_tensor, from_dlpack  # noqa: E402
from .engine import Engine, TensorSpec, load  # noqa: E402
from .concurrency import Parallel, Pipeline  # noqa: E402
from .serve.batcher import Batcher  # noqa: E402
from . import quantize  # noqa: E402
from .errors import (  # noqa: E402
    DeviceError,
    DTypeError,
    Error,
    InvalidArgumentError,
    ModelFormatError,
    OutOfMemoryError,
    ShapeError,
    UnsupportedOpError,
)


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a GPU is visible."""
    return bool(_core.cuda_available())


def stream_priority_range(device: str = "cuda") -> tuple[int, int]:
    """(least, greatest) stream priority on ``device``; numerically lower is more
    urgent, as in CUDA (``load(..., stream_priority=)``, ``create_context(priority=)``)."""
    return tuple(_core.stream_priority_range(device))


def create_stream(device: str = "cuda", priority: int = 0) -> "_core.Stream":
    """A new non-blocking stream on ``device``, for ``Engine.run(..., stream=)``."""
    return _core.create_stream(device, priority)


def build_info() -> dict:
    """What this build contains: CUDA compiled in, cuBLAS/cuDNN versions, the CPU BLAS, ops."""
    info = dict(_core.build_info())
    info["version"] = __version__
    info["openmp_spin"] = dict(_libs.openmp_spin)  # GOMP_SPINCOUNT as twinfer found or chose it
    return info


__all__ = [
    "__version__",
    "load",
    "Engine",
    "TensorSpec",
    "Parallel",
    "Pipeline",
    "Batcher",
    "Tensor",
    "as_tensor",
    "from_dlpack",
    "cuda_available",
    "build_info",
    "stream_priority_range",
    "create_stream",
    "Error",
    "ModelFormatError",
    "UnsupportedOpError",
    "ShapeError",
    "DTypeError",
    "DeviceError",
    "OutOfMemoryError",
    "InvalidArgumentError",
]
