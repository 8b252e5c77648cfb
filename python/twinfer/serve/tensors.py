"""Tensor types and bytes as the KServe v2 protocol carries them.

Three names meet here for one element type: the protocol's datatype ("FP32"),
the model configuration's DataType enum (TYPE_FP32) and twinfer's dtype name
("float32", which also names the NumPy dtype). BYTES (strings) has no twinfer
dtype, so it is refused with a clear message rather than half-supported.
"""

from __future__ import annotations

import math

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


# Most elements one request tensor may have (twinfer's own limit, 2^47).
_MAX_ELEMENTS = 1 << 47


def _checked_shape(shape) -> tuple[int, ...]:
    """The dims, each an integer (1.9 or true is refused, not truncated), and
    their product in Python's unbounded ints (an int64 product wraps: [2^62, 4]
    made 0 and let empty data through)."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise InvalidRequest(f"shape must be a list of integers, got {shape!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in dims):
        raise InvalidRequest(f"shape must be a list of integers, got {list(dims)!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise InvalidRequest(f"shape {list(dims)} has a negative dim")
    if math.prod(dims) > _MAX_ELEMENTS:
        raise InvalidRequest(f"shape {list(dims)} has more elements than a tensor can hold (2^47)")
    return dims


# What the JSON "data" of each kind of datatype may hold, as the kinds NumPy
# infers from the values: bools for BOOL, integers for the integer types,
# numbers for the float types. Anything else (strings, nulls, floats for an
# integer type, a mix of bools and numbers for BOOL) is refused, not coerced.
_JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def from_bytes(name: str, datatype: str, shape, data: bytes) -> np.ndarray:
    """The tensor ``name`` from its raw little-endian bytes (binary extension, gRPC raw contents)."""
    dtype = np.dtype(numpy_dtype(dtype_of(datatype)))
    dims = _checked_shape(shape)
    expected = math.prod(dims) * dtype.itemsize
    if len(data) != expected:
        raise InvalidRequest(f"input {name!r}: {len(data)} bytes of data, but shape {list(dims)} of {datatype} "
                             f"needs {expected}")
    return np.frombuffer(data, dtype=dtype).reshape(dims)


def from_json(name: str, datatype: str, shape, data) -> np.ndarray:
    """The tensor ``name`` from the JSON "data" field (flat or nested, row-major)."""
    dtype = np.dtype(numpy_dtype(dtype_of(datatype)))
    dims = _checked_shape(shape)
    if not isinstance(data, list):
        raise InvalidRequest(f"input {name!r}: data must be a list of {datatype} values, got {type(data).__name__}")
    try:
        values = np.asarray(data)  # the kind the JSON values are, before any conversion
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidRequest(f"input {name!r}: data is not a list of {datatype} values ({e})") from None
    kind = dtype.kind if dtype.name != "bfloat16" else "f"
    if kind == "u" and dtype.itemsize == 8 and values.dtype.kind in "fO":
        values = _uint64_values(name, data)  # NumPy infers float64 for ints past int64's range
    if values.size and values.dtype.kind not in _JSON_KINDS.get(kind, kind):
        raise InvalidRequest(f"input {name!r}: data holds {_kind_name(values.dtype)} values, not {datatype}")
    if kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise InvalidRequest(f"input {name!r}: a value is outside the range of {datatype} "
                                 f"({info.min}..{info.max})")
    try:
        with np.errstate(over="ignore"):
            array = values.astype(dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidRequest(f"input {name!r}: data is not a list of {datatype} values ({e})") from None
    # Finite JSON numbers past a narrow type's range became inf (FP16's 65504).
    if kind == "f" and dtype.itemsize < 8 and values.size and \
            not np.isfinite(array.astype(np.float32, copy=False)).all() and np.isfinite(values).all():
        raise InvalidRequest(f"input {name!r}: a value is outside the range of {datatype}")
    expected = math.prod(dims)
    if array.size != expected:
        raise InvalidRequest(f"input {name!r}: {array.size} values of data, but shape {list(dims)} needs {expected}")
    return array.astype(dtype, copy=False).reshape(dims)


def _uint64_values(name: str, data: list) -> np.ndarray:
    flat = np.asarray(data, dtype=object)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in flat.reshape(-1)):
        raise InvalidRequest(f"input {name!r}: data holds non-integer values, not UINT64")
    try:
        return np.array(flat.tolist(), dtype=np.uint64)
    except OverflowError:
        raise InvalidRequest(f"input {name!r}: a value is outside the range of UINT64 (0..{2**64 - 1})") from None


def _kind_name(dtype: np.dtype) -> str:
    return {"b": "bool", "i": "integer", "u": "integer", "f": "float", "U": "string", "O": "null or mixed"}.get(
        dtype.kind, dtype.name)


def to_bytes(array: np.ndarray) -> bytes:
    """Raw little-endian bytes of ``array`` in row-major order."""
    return np.ascontiguousarray(array).tobytes()


def to_json(array: np.ndarray) -> list:
    """The flat list the JSON "data" field carries (bfloat16 as float)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.name == "bfloat16":
        flat = flat.astype(np.float32)
    return flat.tolist()
