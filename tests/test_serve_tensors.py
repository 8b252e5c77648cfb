"""Tensors as the KServe v2 protocol carries them: every datatype from raw
bytes and from JSON lists, back to the same NumPy values, and clear errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from twinfer.serve.errors import InvalidRequest
from twinfer.serve.tensors import datatype_of, dtype_of, from_bytes, from_json, to_bytes, to_json

NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
         "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
         "FP32": np.float32, "FP64": np.float64, "BF16": ml_dtypes.bfloat16}


@pytest.mark.parametrize("datatype", sorted(NUMPY))
def test_round_trips(datatype, rng):
    dtype = np.dtype(NUMPY[datatype])
    if dtype.kind == "b":
        a = rng.integers(0, 2, (3, 5)).astype(dtype)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (3, 5), dtype=dtype, endpoint=True)
    else:
        a = rng.standard_normal((3, 5)).astype(dtype)
    assert datatype_of(dtype_of(datatype)) == datatype
    b = from_bytes("t", datatype, [3, 5], to_bytes(a))
    assert b.dtype == dtype and np.array_equal(b, a)
    j = from_json("t", datatype, [3, 5], to_json(a))
    assert j.dtype == dtype and np.array_equal(j, a)


def test_errors_name_the_tensor():
    with pytest.raises(InvalidRequest, match="input 'x': 12 bytes of data, but shape \\[2, 2\\] of FP32 needs 16"):
        from_bytes("x", "FP32", [2, 2], b"\0" * 12)
    with pytest.raises(InvalidRequest, match="BYTES \\(string\\) tensors are not supported"):
        from_json("x", "BYTES", [1], ["a"])
    with pytest.raises(InvalidRequest, match="unknown datatype 'FP8'"):
        from_json("x", "FP8", [1], [1.0])
    with pytest.raises(InvalidRequest, match="negative dim"):
        from_json("x", "FP32", [-1, 2], [1.0, 2.0])
    with pytest.raises(InvalidRequest, match="input 'x': data is not a list of INT32 values"):
        from_json("x", "INT32", [2], ["a", "b"])
