"""Turning what users pass (NumPy, PyTorch, CuPy, JAX arrays, anything with
``__dlpack__`` or the array protocol, Python scalars and lists) into core
tensors — without copying whenever the memory layout allows."""

from __future__ import annotations

import numpy as np

from . import _core
from .errors import InvalidArgumentError

Tensor = _core.Tensor

_NUMPY_NAMES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
}


def numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _NUMPY_NAMES[name]


def _capsule(x):
    # Ask for a versioned capsule first (DLPack >= 1.0), fall back to legacy.
    try:
        return x.__dlpack__(max_version=(1, 0))
    except TypeError:
        return x.__dlpack__()


def from_dlpack(x) -> Tensor:
    """A twinfer.Tensor sharing ``x``'s memory (``x`` must implement ``__dlpack__``)."""
    if isinstance(x, Tensor):
        return x
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgumentError(f"{type(x).__name__} does not implement __dlpack__")
    if getattr(x, "requires_grad", False):  # torch refuses to export tensors that track gradients
        x = x.detach()
    return Tensor._from_capsule(_capsule(x))


def as_tensor(x, dtype_hint: str | None = None) -> Tensor:
    """Any array-like as a Tensor; zero-copy for compact arrays with __dlpack__."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (int, float, bool, list, tuple)):
        # Plain Python values carry no dtype: take the model's.
        dt = numpy_dtype(dtype_hint) if dtype_hint else None
        return Tensor._from_capsule(_capsule(np.asarray(x, dtype=dt, order="C")))
    if hasattr(x, "__dlpack__"):
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            # Older NumPy refuses to export read-only arrays; we only read inputs.
            try:
                return Tensor._from_capsule(_capsule(x))
            except (BufferError, TypeError):
                x = np.array(x)
        return from_dlpack(x)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        return Tensor._from_capsule(_capsule(np.asarray(x, order="C")))
    raise InvalidArgumentError(f"cannot use a {type(x).__name__} as a tensor")
