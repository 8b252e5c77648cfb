"""DLPack both ways with NumPy and PyTorch: zero copies where the layout
allows, proven by data pointers; values and dtypes survive round trips."""

import gc

import numpy as np
import pytest
import torch

import twinfer

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


def _random(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_in_and_out_share_memory(rng, dtype):
    a = _random(rng, (3, 5, 7), dtype)
    t = twinfer.from_dlpack(a)
    assert t.data_ptr == a.ctypes.data
    assert t.shape == (3, 5, 7) and t.dtype == dtype and t.device == "cpu"
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    assert t.numpy().ctypes.data == a.ctypes.data


@pytest.mark.parametrize("dtype", DTYPES + ["bfloat16"])
def test_torch_in_and_out_share_memory(rng, dtype):
    x = torch.from_numpy(_random(rng, (4, 9), "float32" if dtype == "bfloat16" else dtype))
    if dtype == "bfloat16":
        x = x.to(torch.bfloat16)
    t = twinfer.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    assert t.dtype == dtype
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(y, x)


def test_imported_tensor_keeps_its_source_alive(rng):
    a = rng.standard_normal((257,)).astype(np.float32)
    expected = a.copy()
    t = twinfer.from_dlpack(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), expected)


def test_exported_capsule_outlives_the_tensor(rng):
    a = rng.standard_normal((6, 11)).astype(np.float32)
    t = twinfer.as_tensor(a.copy())
    b = np.from_dlpack(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(b, a)


def test_non_contiguous_input_is_copied_correctly(rng):
    a = rng.standard_normal((6, 10)).astype(np.float32)
    view = a[:, ::3]
    t = twinfer.as_tensor(view)
    np.testing.assert_array_equal(t.numpy(), view)
    xt = torch.from_numpy(a).t()  # transposed: strides (1, 10)
    np.testing.assert_array_equal(twinfer.from_dlpack(xt).numpy(), a.T)


def test_versioned_and_legacy_capsules(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = twinfer.as_tensor(a)
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 0))
    import ctypes

    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    assert get_name(legacy) == b"dltensor"
    assert get_name(versioned) == b"dltensor_versioned"
    np.testing.assert_array_equal(twinfer.Tensor._from_capsule(versioned).numpy(), a)
    with pytest.raises(twinfer.Error):
        twinfer.Tensor._from_capsule(versioned)  # a capsule is consumed once


def test_dlpack_device_and_array_protocol(rng):
    a = rng.standard_normal((3,)).astype(np.float32)
    t = twinfer.as_tensor(a)
    assert t.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_scalars_and_lists_take_the_requested_dtype():
    t = twinfer.as_tensor([[1, 2], [3, 4]], "float32")
    assert t.dtype == "float32" and t.shape == (2, 2)
    assert twinfer.as_tensor(3, "int64").dtype == "int64"


def test_read_only_memory_comes_in_as_a_copy(tmp_path, rng):
    # A NumPy array mapped read-only exports a read-only capsule: twinfer's
    # tensor (writable, and so its NumPy view) must not alias it. Before,
    # writing to the view wrote through to read-only pages: a crash.
    a = rng.standard_normal((4, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    ro = np.load(tmp_path / "a.npy", mmap_mode="r")
    for src in (ro, np.frombuffer(a.tobytes(), np.float32).reshape(4, 6)):  # mapped, and a read-only buffer
        assert not src.flags.writeable
        t = twinfer.as_tensor(src)
        assert t.data_ptr != src.ctypes.data
        view = t.numpy()
        view[0, 0] = 123.0
        np.testing.assert_array_equal(np.asarray(src), a)
        assert view[0, 0] == 123.0


def test_a_device_tensor_refuses_bad_stream_values(rng):
    from device_models import chain_model

    y = twinfer.load(chain_model(), device="sim").run({"x": np.ones((2, 33), np.float32)}, outputs="device")["y"]
    with pytest.raises(ValueError, match="-1, 1, 2 or a stream handle"):
        y.__dlpack__(stream=-7)
    with pytest.raises(TypeError, match="must be an int"):
        y.__dlpack__(stream="default")


def test_from_dlpack_of_a_framework_array_waits_for_its_producer(rng):
    # A foreign device array with no stream named: exported for its
    # framework's current stream and marked ready there, so a run reading it
    # waits for the producer's pending writes (the simulated device, with
    # aggressive delays, reports a read before the write as a race).
    from device_models import ForeignArray, chain_model, chain_ref
    from twinfer.testing import sim_options

    with sim_options(max_delay_us=3000):
        producer = twinfer.load(chain_model(2), device="sim")
        e = twinfer.load(chain_model(), device="sim")
        for _ in range(3):
            x = rng.standard_normal((64, 33)).astype(np.float32)
            t = twinfer.from_dlpack(ForeignArray(producer.run({"x": x}, outputs="device")["y"]))
            got = e.run({"x": t})["y"].numpy()
            np.testing.assert_allclose(got, chain_ref(chain_ref(x, 2)), rtol=1e-5, atol=1e-5)


def test_copy_true_copies_device_and_host_tensors_and_says_so(rng):
    # DLPack's copy=True: a copy in the consumer's stream order, flagged
    # IS_COPIED on a versioned capsule; the original is untouched by writes
    # to the copy. On the simulated device (and a GPU), and on the host.
    import ctypes

    from device_models import chain_model, chain_ref

    x = rng.standard_normal((5, 33)).astype(np.float32)
    y = twinfer.load(chain_model(), device="sim").run({"x": x}, outputs="device")["y"]
    host = twinfer.as_tensor(x)
    for t in (y, host):
        for stream in ((None,) if t.device == "cpu" else (None, -1)):
            cap = t.__dlpack__(stream=stream, max_version=(1, 0), copy=True)
            # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags (u64)
            ptr = ctypes.pythonapi.PyCapsule_GetPointer
            ptr.restype, ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
            flags = ctypes.c_uint64.from_address(ptr(cap, b"dltensor_versioned") + 8 + 8 + 8).value
            assert flags & 2, flags  # DLPACK_FLAG_BITMASK_IS_COPIED
            c = twinfer._core.Tensor._from_capsule(cap)
            assert c.data_ptr != t.data_ptr
            want = chain_ref(x) if t is y else x
            np.testing.assert_allclose(c.numpy(), want, rtol=1e-6, atol=1e-6)
