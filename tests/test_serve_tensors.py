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
    with pytest.raises(InvalidRequest, match="input 'x': data holds string values, not INT32"):
        from_json("x", "INT32", [2], ["a", "b"])


def test_json_data_of_the_wrong_kind_is_refused_not_coerced():
    # np.asarray(data, dtype) took null as NaN, truncated 1.7 to 1 for an
    # integer type, parsed "1.5" as a float and made [true, 2, -3] all true.
    cases = [("FP32", [1], None, "data must be a list of FP32 values, got NoneType"),
             ("INT64", [1], [1.7], "data holds float values, not INT64"),
             ("FP32", [1], ["1.5"], "data holds string values, not FP32"),
             ("BOOL", [3], [True, 2, -3], "data holds integer values, not BOOL"),
             ("INT8", [2], [1, 300], r"outside the range of INT8 \(-128..127\)"),
             ("UINT8", [1], [-1], "outside the range of UINT8"),
             ("FP32", [2], [1.0, None], "null or mixed"),
             ("UINT64", [2], [2**64, 1], "outside the range of UINT64"),
             ("FP16", [2], [1.0, 1e6], "outside the range of FP16"),
             ("UINT64", [2], [2**64 - 1, 1.5], "non-integer values, not UINT64")]
    for datatype, shape, data, message in cases:
        with pytest.raises(InvalidRequest, match=message):
            from_json("x", datatype, shape, data)
    # What each kind does take: integers for floats, nested lists, bools for BOOL.
    np.testing.assert_array_equal(from_json("x", "FP32", [2, 2], [[1, 2.5], [3, 4]]),
                                  np.array([[1, 2.5], [3, 4]], np.float32))
    np.testing.assert_array_equal(from_json("x", "BOOL", [2], [True, False]), np.array([True, False]))
    np.testing.assert_array_equal(from_json("x", "BF16", [2], [1, 0.5]).astype(np.float32), [1, 0.5])
    assert from_json("x", "INT32", [0, 4], []).shape == (0, 4)


def test_shapes_must_be_integers_and_fit_a_tensor():
    for shape, message in [([1.9], "shape must be a list of integers"), ([True, 4], "shape must be a list"),
                           (["2"], "shape must be a list"), ([2**62, 4], "more elements than a tensor can hold"),
                           ([2**70, 1], "more elements than a tensor can hold"), ([2, -1], "negative dim")]:
        with pytest.raises(InvalidRequest, match=message):
            from_json("x", "FP32", shape, [])
        with pytest.raises(InvalidRequest, match=message):
            from_bytes("x", "FP32", shape, b"")
    assert from_bytes("x", "FP32", np.array([2, 1], np.int64), b"\0" * 8).shape == (2, 1)
