"""Tensor types and bytes as the KServe v2 protocol carries them.

Three names meet here for one element type: the protocol's datatype ("FP32"),
the model configuration's DataType enum (TYPE_FP32) and twinfer's dtype name
("float32", which also names the NumPy dtype). BYTES (strings) has no twinfer
dtype, so it is refused with a clear message rather than half-supported.
"""

from __future__ import annotations

import numpy as np

from .._convert import numpy_dtype
from .errors import InvalidRequest

# protocol datatype -> twinfer dtype name
_DATATYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BF16": "bfloat16",
}
_DTYPES = {v: k for k, v in _DATATYPES.items()}


def datatype_of(dtype: str) -> str:
    """"FP32" for twinfer's "float32"; ValueError for a type the protocol has no name for."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"twinfer dtype {dtype!r} has no KServe v2 datatype") from None


def dtype_of(datatype: str) -> str:
    """"float32" for "FP32"; InvalidRequest for an unknown or unsupported datatype."""
    if datatype == "BYTES":
        raise InvalidRequest("BYTES (string) tensors are not supported by twinfer")
    try:
        return _DATATYPES[datatype]
    except KeyError:
        raise InvalidRequest(f"unknown datatype {datatype!r}; expected one of {sorted(_DATATYPES)}") from None


def config_type_of(dtype: str) -> str:
    """"TYPE_FP32" (the model configuration's DataType name) for "float32"."""
    return "TYPE_" + datatype_of(dtype)


def dtype_of_config_type(config_type: str) -> str:
    """"float32" for "TYPE_FP32"; ValueError for TYPE_STRING, TYPE_INVALID or an unknown name."""
    name = config_type[len("TYPE_"):] if config_type.startswith("TYPE_") else config_type
    if name not in _DATATYPES:
        raise ValueError(f"{config_type} is not a tensor type twinfer can serve")
    return _DATATYPES[name]


def _checked_shape(shape) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise InvalidRequest(f"shape must be a list of integers, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise InvalidRequest(f"shape {list(dims)} has a negative dim")
    return dims


def from_bytes(name: str, datatype: str, shape, data: bytes) -> np.ndarray:
    """The tensor ``name`` from its raw little-endian bytes (binary extension, gRPC raw contents)."""
    dtype = np.dtype(numpy_dtype(dtype_of(datatype)))
    dims = _checked_shape(shape)
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise InvalidRequest(f"input {name!r}: {len(data)} bytes of data, but shape {list(dims)} of {datatype} "
                             f"needs {expected}")
    return np.frombuffer(data, dtype=dtype).reshape(dims)


def from_json(name: str, datatype: str, shape, data) -> np.ndarray:
    """The tensor ``name`` from the JSON "data" field (flat or nested, row-major)."""
    dtype = np.dtype(numpy_dtype(dtype_of(datatype)))
    dims = _checked_shape(shape)
    try:
        array = np.asarray(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidRequest(f"input {name!r}: data is not a list of {datatype} values ({e})") from None
    expected = int(np.prod(dims, dtype=np.int64))
    if array.size != expected:
        raise InvalidRequest(f"input {name!r}: {array.size} values of data, but shape {list(dims)} needs {expected}")
    return array.astype(dtype, copy=False).reshape(dims)


def to_bytes(array: np.ndarray) -> bytes:
    """Raw little-endian bytes of ``array`` in row-major order."""
    return np.ascontiguousarray(array).tobytes()


def to_json(array: np.ndarray) -> list:
    """The flat list the JSON "data" field carries (bfloat16 as float)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.name == "bfloat16":
        flat = flat.astype(np.float32)
    return flat.tolist()
