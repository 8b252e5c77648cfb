"""Turning what users pass (NumPy, PyTorch, CuPy, JAX arrays, anything with
``__dlpack__`` or the array protocol, Python scalars and lists) into core
tensors — without copying whenever the memory layout allows."""

from __future__ import annotations

import sys

import numpy as np

from . import _core
from .errors import DTypeError, InvalidArgumentError

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


# Types NumPy knows only through ml_dtypes (named as ml_dtypes names them,
# which are also twinfer's dtype names). DLPack cannot carry them from NumPy,
# so such arrays come in through a same-width unsigned view (see _from_numpy).
_ML_DTYPES = {
    "bfloat16": np.uint16,
    "float8_e4m3fn": np.uint8,
    "float8_e4m3fnuz": np.uint8,
    "float8_e5m2": np.uint8,
    "float8_e5m2fnuz": np.uint8,
    "float8_e8m0fnu": np.uint8,
    # 4-bit and 2-bit types: ml_dtypes holds them unpacked, one per byte (the
    # value's bits low, zeros above), exactly as twinfer does.
    "int4": np.uint8,
    "uint4": np.uint8,
    "float4_e2m1fn": np.uint8,
    "int2": np.uint8,
    "uint2": np.uint8,
}


def numpy_dtype(name: str):
    if name in _ML_DTYPES:
        import ml_dtypes

        return getattr(ml_dtypes, name)
    return _NUMPY_NAMES[name]


def _ml_dtype_name(a: np.ndarray) -> str | None:
    """The ml_dtypes name of ``a``'s dtype when DLPack cannot carry it."""
    name = a.dtype.name
    return name if name in _ML_DTYPES and a.dtype.itemsize == np.dtype(_ML_DTYPES[name]).itemsize else None


def _check_numeric(a: np.ndarray) -> None:
    # Objects, strings, bytes, records and dates have no tensor element type:
    # say so, instead of DLPack's BufferError.
    if a.dtype.kind in "OUSVMm":
        raise DTypeError(f"a NumPy array of dtype {a.dtype} cannot be a tensor (twinfer takes numbers and bools)")


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order: DLPack carries no other, and a
    big-endian array (read from a file written elsewhere, ``>f4``) holds the
    same numbers, so it is copied into native order rather than refused."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _from_numpy(a: np.ndarray) -> Tensor:
    """A NumPy array as a Tensor: zero-copy through DLPack when it is compact,
    ml_dtypes types (bfloat16, float8_*, int4, float4_e2m1fn ...) through a
    uint8/uint16 view."""
    name = _ml_dtype_name(a)
    if name is None:
        _check_numeric(a)  # after the ml_dtypes check: bfloat16 and float8 are kind "V" too
        return Tensor._from_capsule(_capsule(a))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    u = a.view(_ML_DTYPES[name])
    try:
        t = Tensor._from_capsule(_capsule(u))
    except (BufferError, TypeError):
        if u.flags.writeable:
            raise
        t = Tensor._from_capsule(_capsule(np.array(u)))  # older NumPy: no read-only export
    return t._view_as(name)


def _capsule(x, stream: int | None = None):
    # Ask for a versioned capsule first (DLPack >= 1.0), fall back to legacy.
    # ``stream`` (device arrays only): the consumer's stream, which the
    # producer makes wait until the data is ready (DLPack's stream protocol).
    kw = {} if stream is None else {"stream": stream}
    try:
        return x.__dlpack__(max_version=(1, 0), **kw)
    except TypeError:
        return x.__dlpack__(**kw)


def _torch_host_tensor(x):
    """``x`` when it is a strided CPU torch tensor, else None. torch's own
    ``__dlpack__`` and ``__dlpack_device__`` are Python wrappers that cost
    about 2 µs each (benchmarks/call_overhead.py); for host memory their only
    work beyond torch's exporter is the stream protocol, which host memory
    has no use for. twinfer never imports torch: a torch tensor exists only
    once the user has."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return None
    # Sparse layouts, the conjugate bit and subclasses with their own
    # __torch_function__ go through __dlpack__, which says what is wrong.
    if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.layout is not torch.strided or x.is_conj():
        return None
    try:
        on_cpu = x.is_cpu  # a tenth of x.device.type's cost
    except AttributeError:  # a torch without is_cpu
        on_cpu = x.device.type == "cpu"
    return x if on_cpu else None


def _from_torch_host(x) -> Tensor:
    """A CPU torch tensor (see _torch_host_tensor) as a Tensor sharing its memory."""
    if x.requires_grad:  # torch refuses to export tensors that track gradients
        x = x.detach()
    return Tensor._from_capsule(sys.modules["torch"].utils.dlpack.to_dlpack(x))


def from_dlpack(x, stream: int | None = None) -> Tensor:
    """A twinfer.Tensor sharing ``x``'s memory (``x`` must implement ``__dlpack__``).
    For a device array, ``stream`` is the stream twinfer will read it on (the
    producer orders it after its pending writes)."""
    if isinstance(x, Tensor):
        return x
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgumentError(f"{type(x).__name__} does not implement __dlpack__")
    if _torch_host_tensor(x) is not None:
        return _from_torch_host(x)
    if getattr(x, "requires_grad", False):  # torch refuses to export tensors that track gradients
        x = x.detach()
    if isinstance(x, np.ndarray) and _ml_dtype_name(x) is not None:
        return _from_numpy(x)
    if stream is not None and not is_device_array(x):
        stream = None  # host memory needs no stream (NumPy refuses one)
    if stream is None and is_foreign_device_array(x):
        # No stream named: exported for the producer's current stream, and
        # ready once that stream gets there, so a run that reads it later
        # waits for the producer's pending writes (with no stream, DLPack
        # orders nothing).
        from ._streams import producer_stream

        h = producer_stream(x)
        t = Tensor._from_capsule(_capsule(x, h))
        t._mark_ready_on(h)
        return t
    return Tensor._from_capsule(_capsule(x, stream))


def is_foreign_device_array(x) -> bool:
    """A framework's (torch, CuPy, JAX...) device array, not a twinfer Tensor:
    one whose readiness only DLPack's stream protocol can tell."""
    return not isinstance(x, Tensor) and is_device_array(x)


def is_device_array(x) -> bool:
    """True for an array in GPU (or simulated device) memory that exports DLPack."""
    if isinstance(x, Tensor):
        return x.device != "cpu"
    if _torch_host_tensor(x) is not None:
        return False
    get = getattr(x, "__dlpack_device__", None)
    if get is None or isinstance(x, np.ndarray):
        return False
    try:
        return int(get()[0]) in (2, 12)  # kDLCUDA, kDLExtDev (the simulated device)
    except Exception:  # noqa: BLE001 - a foreign object's failure means "not ours to read"
        return False


# NumPy scalar types DLPack carries as they are (ml_dtypes types go through a view).
_DLPACK_NUMPY = frozenset({np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8,
                           np.uint16, np.uint32, np.uint64, np.bool_})


def _strings(a: np.ndarray) -> Tensor:
    """A NumPy array of str/bytes/objects as a string tensor (copied: twinfer
    holds strings as its own objects)."""
    if a.dtype.kind not in "USO":
        raise InvalidArgumentError(f"a string input takes an array of str, not {a.dtype}")
    return Tensor._from_strings(a.ravel().tolist(), list(a.shape))


def as_tensor(x, dtype_hint: str | None = None, stream: int | None = None) -> Tensor:
    """Any array-like as a Tensor; zero-copy for compact arrays with __dlpack__.
    ``stream``: for device arrays, the stream twinfer will read them on."""
    if type(x) is np.ndarray and x.dtype.type in _DLPACK_NUMPY and x.flags.writeable and x.dtype.isnative:
        # The common case first, with no further inspection (per-call cost).
        try:
            return Tensor._from_capsule(x.__dlpack__(max_version=(1, 0)))
        except TypeError:  # NumPy < 2.1: no max_version
            return Tensor._from_capsule(x.__dlpack__())
    if isinstance(x, np.ndarray) and not x.dtype.isnative:
        x = _native(x)
    if isinstance(x, Tensor):
        return x
    if _torch_host_tensor(x) is not None:
        return _from_torch_host(x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        return _strings(x)
    if dtype_hint == "string" and isinstance(x, (str, bytes, list, tuple)):
        return _strings(np.asarray(x, dtype=object))
    if isinstance(x, (int, float, bool, list, tuple)):
        # Plain Python values carry no dtype: take the model's.
        dt = numpy_dtype(dtype_hint) if dtype_hint else None
        return _from_numpy(np.asarray(x, dtype=dt, order="C"))
    if isinstance(x, np.ndarray) and _ml_dtype_name(x) is not None:
        return _from_numpy(x)
    if isinstance(x, np.ndarray):
        _check_numeric(x)
    if hasattr(x, "__dlpack__"):
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            # Older NumPy refuses to export read-only arrays; we only read inputs.
            try:
                return Tensor._from_capsule(_capsule(x))
            except (BufferError, TypeError):
                x = np.array(x)
        return from_dlpack(x, stream)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        return _from_numpy(_native(np.asarray(x, order="C")))
    raise InvalidArgumentError(f"cannot use a {type(x).__name__} as a tensor")
