"""Engine.run's per-call fast path: exact NumPy arrays and twinfer Tensors are
converted in the core (_core.Engine._run_feeds), every other value by
twinfer._convert in Python. The two must agree on answers, on where outputs
live and on errors; these tests feed the same values both ways. (What each
path costs: benchmarks/call_overhead.py.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from onnx import helper

import twinfer
from onnx_helpers import make_model

F32 = np.float32


@pytest.fixture(scope="module")
def add_model():
    return make_model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", F32, ["n", 3]), ("b", F32, ["n", 3])],
                      [("y", F32, ["n", 3])])


def _fast(e, feeds):
    """The core's fast path itself: a dict of outputs, or None when it declines."""
    return e._core._run_feeds(feeds, e._input_names, e._output_names)


def test_numpy_arrays_and_tensors_take_the_core_path(add_model, rng, device):
    e = twinfer.load(add_model, device=device)
    a, b = (rng.standard_normal((2, 3)).astype(F32) for _ in range(2))
    out = _fast(e, {"a": a, "b": b})
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"].numpy(), a + b)
    out = _fast(e, {"a": twinfer.as_tensor(a), "b": b})
    np.testing.assert_array_equal(out["y"].numpy(), a + b)
    # Positional (Engine.__call__): a list of outputs.
    got = e._core._run_feeds({"a": a, "b": b}, e._input_names, None)
    np.testing.assert_array_equal(got[0].numpy(), a + b)


@pytest.mark.parametrize("declined", ["list", "torch", "strided", "big-endian", "subclass", "datetime", "scalar"])
def test_values_only_python_converts_are_declined(add_model, rng, declined):
    e = twinfer.load(add_model)
    a = rng.standard_normal((2, 3)).astype(F32)
    x = {"list": lambda: a.tolist(), "torch": lambda: torch.from_numpy(a),
         "strided": lambda: np.repeat(a, 2, axis=1)[:, ::2], "big-endian": lambda: a.astype(">f4"),
         "subclass": lambda: a.view(np.recarray), "datetime": lambda: np.zeros((2, 3), "datetime64[D]"),
         "scalar": lambda: F32(1)}[declined]()
    assert _fast(e, {"a": x, "b": a}) is None


def test_missing_unknown_names_and_bad_options_are_declined(add_model, rng):
    e = twinfer.load(add_model, device="sim")
    a = rng.standard_normal((2, 3)).astype(F32)
    assert _fast(e, {"a": a}) is None
    assert _fast(e, {"a": a, "c": a}) is None
    assert _fast(e, {"a": a, "b": a, "c": a}) is None
    assert e._core._run_feeds({"a": a, "b": a}, e._input_names, e._output_names, None, "everywhere") is None
    assert e._core._run_feeds({"a": a, "b": a}, e._input_names, e._output_names, 5) is None


@pytest.mark.parametrize("kind", ["contiguous", "read-only", "fortran", "strided", "torch", "torch-grad",
                                  "torch-transposed", "list", "empty"])
def test_every_kind_of_feed_gives_the_same_answer(add_model, rng, device, kind):
    e = twinfer.load(add_model, device=device)
    n = 0 if kind == "empty" else 4
    a = rng.standard_normal((n, 3)).astype(F32)
    b = rng.standard_normal((n, 3)).astype(F32)
    ro = a.copy()
    ro.flags.writeable = False
    x = {"contiguous": a, "read-only": ro, "fortran": np.asfortranarray(a), "strided": np.repeat(a, 2, axis=0)[::2],
         "torch": torch.from_numpy(a), "torch-grad": torch.nn.Parameter(torch.from_numpy(a.copy())),
         "torch-transposed": torch.from_numpy(a.T.copy()).T,
         "list": a.tolist(), "empty": a}[kind]
    out = e.run({"a": x, "b": b})
    assert list(out) == ["y"] and out["y"].device == "cpu"
    np.testing.assert_allclose(out["y"].numpy(), a + b, rtol=1e-6)
    y = e(x, b)  # positional
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)


@pytest.mark.parametrize("bad, error", [
    (np.zeros((2, 3)), twinfer.DTypeError),
    (np.zeros((2, 3), np.int64), twinfer.DTypeError),
    (np.zeros((2, 4), F32), twinfer.ShapeError),
    (np.zeros((2, 3, 1), F32), twinfer.ShapeError),
])
def test_errors_read_the_same_on_both_paths(add_model, bad, error, device):
    e = twinfer.load(add_model, device=device)
    good = np.zeros((2, 3), F32)
    with pytest.raises(error) as fast:
        e.run({"a": bad, "b": good})
    with pytest.raises(error) as general:
        e.run({"a": torch.from_numpy(bad), "b": good})  # torch tensors: converted in Python
    assert str(fast.value) == str(general.value)
    assert "input 'a'" in str(fast.value)


def test_outputs_option_on_a_device_engine(add_model, rng):
    e = twinfer.load(add_model, device="sim")
    a, b = (rng.standard_normal((2, 3)).astype(F32) for _ in range(2))
    assert e.run({"a": a, "b": b})["y"].device == "cpu"  # NumPy in, NumPy out
    d = e.run({"a": a, "b": b}, outputs="device")["y"]
    assert d.device.startswith("sim")
    assert e.run({"a": d, "b": d})["y"].device == d.device  # device in: device out
    y = e.run({"a": d, "b": b}, outputs="host")["y"]  # d = a + b
    assert y.device == "cpu"
    np.testing.assert_allclose(y.numpy(), a + 2 * b, rtol=1e-6)
    with pytest.raises(twinfer.InvalidArgumentError, match="outputs must be"):
        e.run({"a": a, "b": b}, outputs="everywhere")
    ctx = e.create_context()
    np.testing.assert_allclose(e.run({"a": a, "b": b}, context=ctx)["y"].numpy(), a + b, rtol=1e-6)


def test_feeds_replaced_by_another_thread_mid_run(add_model):
    # The run holds its own references to the arrays while the GIL is
    # released: another thread putting new arrays in the dict cannot free the
    # ones being read. (A run reading freed arrays would most likely see the
    # NaN junk that takes their place; under tools/sanitize.sh it is a
    # use-after-free.)
    e = twinfer.load(add_model)
    n = 1 << 16
    stop = threading.Event()
    feeds = {"a": np.ones((n, 3), F32), "b": np.ones((n, 3), F32)}

    def churn():
        while not stop.is_set():
            for k in ("a", "b"):
                feeds[k] = np.ones((n, 3), F32)  # the old array goes unless a run holds it
                junk = np.full((n, 3), np.nan, F32)  # noqa: F841 - likely in the bytes just freed

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(300):
            assert (e.run(feeds)["y"].numpy() == 2).all()
    finally:
        stop.set()
        t.join()
