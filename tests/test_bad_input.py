"""Bad input, as a user meets it: each case gets a twinfer error naming what is
wrong, or a defined answer, and never crashes the interpreter. The list, with
the behaviour, is docs/robustness.md; the reader's own corrupt-file cases are
in tests/test_onnx_reader.py and tests/test_saved_engine.py, external data
outside the model's folder (symlinks included) in
test_onnx_reader.py::test_external_data_escapes_refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import twinfer

vi = helper.make_tensor_value_info


def model_bytes(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    g = helper.make_graph(nodes, "bad_input", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def add_weights_model(rows=256, cols=1024) -> onnx.ModelProto:
    """y = x + w with a weight big enough to span many pages of its file,
    its raw_data 64-byte aligned in the serialized bytes, so the reader
    borrows it in place instead of copying it (what the tests of files
    changing after load need: a copied weight never looked at the file)."""
    wv = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) % 97
    w = numpy_helper.from_array(wv, "w")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [vi("x", T.FLOAT, [rows, cols])], [vi("y", T.FLOAT, [rows, cols])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for pad in range(64):
        m.doc_string = "." * pad
        if m.SerializeToString().find(wv.tobytes()) % 64 == 0:
            return m
    raise AssertionError("no padding aligns the weight")


# --------------------------------------------------------------------------
# corrupt or truncated files, through the public API


def test_truncated_model_file_names_the_field(tmp_path):
    data = add_weights_model(4, 4).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(twinfer.ModelFormatError, match="runs past the end|truncated"):
        twinfer.load(str(path))


def test_not_an_onnx_file(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("these are not the weights you are looking for\n")
    with pytest.raises(twinfer.ModelFormatError):
        twinfer.load(str(path))


def test_empty_model_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(twinfer.ModelFormatError, match="no graph"):
        twinfer.load(str(path))


# --------------------------------------------------------------------------
# wrong dtypes and shapes at run time


@pytest.fixture(scope="module")
def relu_engine():
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, ["n", 3])], [vi("y", T.FLOAT, ["n", 3])])
    return twinfer.load(m)


@pytest.mark.parametrize("feed, error, words", [
    (np.zeros((2, 3)), twinfer.DTypeError, ["input 'x'", "float32", "float64"]),
    (np.zeros((2, 3), np.int32), twinfer.DTypeError, ["input 'x'", "int32"]),
    (np.zeros((2, 3, 1), np.float32), twinfer.ShapeError, ["input 'x'", "rank 2"]),
    (np.zeros((2, 4), np.float32), twinfer.ShapeError, ["input 'x'", "dim 1"]),
    (np.float32(1), twinfer.ShapeError, ["input 'x'", "rank 2"]),
    # Object and str arrays are string tensors (twinfer has them): the wrong type for x.
    (np.array([[None] * 3] * 2), twinfer.DTypeError, ["input 'x'", "str or bytes", "NoneType"]),
    (np.array([["a"] * 3] * 2), twinfer.DTypeError, ["input 'x'", "float32", "string"]),
    # Dates have no tensor type: this raised DLPack's BufferError, naming neither input nor dtype.
    (np.zeros((2, 3), "datetime64[D]"), twinfer.DTypeError, ["input 'x'", "dtype datetime64[D]"]),
    (None, twinfer.InvalidArgumentError, ["NoneType"]),
])
def test_wrong_input_gets_a_named_error(relu_engine, feed, error, words):
    with pytest.raises(error) as e:
        relu_engine.run({"x": feed})
    for w in words:
        assert w in str(e.value), str(e.value)


def test_ml_dtypes_arrays_are_still_tensors():
    # The check that refuses object/string/void arrays must not catch
    # ml_dtypes' bfloat16 and float8 (NumPy kind "V" too): the sanitizer run
    # found bfloat16 feeds refused as "cannot be a tensor".
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.BFLOAT16, [4])], [vi("y", T.BFLOAT16, [4])])
    x = np.array([-1, 2, -3, 4], ml_dtypes.bfloat16)
    y = twinfer.load(m).run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(y.astype(np.float32), [0, 2, 0, 4])


def test_missing_and_unknown_inputs(relu_engine):
    with pytest.raises(twinfer.InvalidArgumentError, match=r"missing input\(s\) \['x'\]"):
        relu_engine.run({})
    with pytest.raises(twinfer.InvalidArgumentError, match=r"unknown input name\(s\) \['z'\]"):
        relu_engine.run({"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)})


def test_engine_still_right_after_bad_calls(relu_engine):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    for bad in (np.zeros((2, 4), np.float32), np.array([["a"] * 3] * 2)):
        with pytest.raises(twinfer.Error):
            relu_engine.run({"x": bad})
    np.testing.assert_array_equal(relu_engine.run({"x": x})["y"].numpy(), np.maximum(x, 0))


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_feeds_that_are_not_a_dict_say_what_run_takes(device):
    # onnxruntime's run and twinfer.backend's take a list: run([x]) raised
    # "list indices must be integers", run(x) NumPy's IndexError.
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, ["n", 3])], [vi("y", T.FLOAT, ["n", 3])])
    e = twinfer.load(m, device=device)
    x = np.zeros((2, 3), np.float32)
    for feeds in ([x], (x,), x):
        with pytest.raises(twinfer.InvalidArgumentError) as info:
            e.run(feeds)
        for words in ("feeds must be a dict {input name: array}", type(feeds).__name__, "'x'", "engine(x)"):
            assert words in str(info.value), str(info.value)


def _int64_and_float_model(device):
    """y = a + float(b): a float32 input and an int64 one, both [N]."""
    m = model_bytes([helper.make_node("Cast", ["b"], ["bf"], to=T.FLOAT), helper.make_node("Add", ["a", "bf"], ["y"])],
                    [vi("a", T.FLOAT, ["N"]), vi("b", T.INT64, ["N"])], [vi("y", T.FLOAT, ["N"])])
    return twinfer.load(m, device=device)


@pytest.mark.parametrize("device", ["cpu", "sim"])
@pytest.mark.parametrize("name, value, error, words", [
    # NumPy's and DLPack's own errors, which named no input before.
    ("a", [[1.0], [2.0, 3.0]], twinfer.InvalidArgumentError, ["inhomogeneous"]),  # ValueError
    ("b", [2**70], twinfer.InvalidArgumentError, ["int64", "too large"]),  # OverflowError
    ("b", [1, None], twinfer.DTypeError, ["int64", "NoneType"]),  # TypeError
    ("a", "torch sparse", twinfer.InvalidArgumentError, ["layout"]),  # BufferError
])
def test_values_that_cannot_be_converted_name_the_input(device, name, value, error, words):
    if value == "torch sparse":
        torch = pytest.importorskip("torch")
        value = torch.ones(2).to_sparse()
    feeds = {"a": np.ones(1, np.float32), "b": np.ones(1, np.int64), name: value}
    with pytest.raises(error) as info:
        _int64_and_float_model(device).run(feeds)
    for w in [f"input {name!r}", *words]:
        assert w in str(info.value), str(info.value)


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_big_endian_array_is_read_in_native_order(device):
    # An array read from a file written on another machine ('>f4'): DLPack
    # carries native byte order only, and its BufferError named no input.
    a = np.array([1.5, -2.0, 3.25], ">f4")
    b = np.array([1, 2, 3], ">i8")
    y = _int64_and_float_model(device).run({"a": a, "b": b})["y"].numpy()
    np.testing.assert_array_equal(y, [2.5, 0.0, 6.25])


@pytest.mark.parametrize("options, words", [
    # Not strings: the core's binding answered with a dump of its signature.
    ({"device": None}, ["device must be a string", "'cpu'", "None"]),
    ({"device": 0}, ["device must be a string"]),
    ({"precision": 16}, ["precision must be a string", "'fp16'", "16"]),
    # Taken without a word: -1 as "all cores", 2.7 as 2, "2" parsed.
    ({"num_threads": -1}, ["num_threads must be an int >= 0", "-1"]),
    ({"num_threads": 2.7}, ["num_threads must be an int >= 0", "2.7"]),
    ({"num_threads": "2"}, ["num_threads must be an int >= 0", "'2'"]),
    # Python's own TypeError / ValueError / AttributeError from inside load.
    ({"stream_priority": "high"}, ["stream_priority must be an int"]),
    ({"max_cached_plans": 2.5}, ["max_cached_plans must be an int"]),
    ({"max_cached_plans": 0}, ["max_cached_plans must be at least 1"]),
    ({"extra_outputs": 5}, ["extra_outputs must be a list of names"]),
    ({"keep_float": 5}, ["keep_float must be a list of names"]),
    ({"override_initializers": 5}, ["override_initializers must be True or a list"]),
    ({"base_dir": 5}, ["base_dir must be a folder's path"]),
    ({"shape_ranges": [((1, 3), (8, 3))]}, ["shape_ranges must be a dict", "list"]),
])
def test_load_options_of_the_wrong_type_are_named(relu_engine, tmp_path, options, words):
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, ["n", 3])], [vi("y", T.FLOAT, ["n", 3])])
    saved = tmp_path / "relu.twinfer"
    relu_engine.save(saved)
    sources = [m]
    if set(options) <= {"device", "num_threads", "stream_priority", "max_cached_plans"}:
        sources.append(saved)  # options a saved engine takes too, checked alike
    for source in sources:
        with pytest.raises(twinfer.InvalidArgumentError) as info:
            twinfer.load(source, **{"device": "cpu", **options})
        for w in words:
            assert w in str(info.value), str(info.value)
    assert twinfer.load(m, device="cpu", num_threads=np.int64(1)).num_threads == 1  # NumPy ints are ints


def test_context_arguments_of_the_wrong_type_are_named(relu_engine):
    # A string or a float for num_threads crashed the interpreter in the
    # core's binding (exit 139); a string sm_share was pybind11's cast error.
    for bad in (-1, "2", 2.7, None):
        with pytest.raises(twinfer.InvalidArgumentError, match="num_threads must be an int >= 0"):
            relu_engine.create_context(bad)
    with pytest.raises(twinfer.InvalidArgumentError, match="sm_share must be None or a number"):
        relu_engine.create_context(sm_share="half")
    assert relu_engine.create_context(1) is not None
    # The binding itself, under the wrapper, refuses them too (it segfaulted).
    for bad in ("2", 2.7, None, [1]):
        with pytest.raises(twinfer.InvalidArgumentError, match="num_threads must be a whole number"):
            relu_engine._core.create_context(bad)


def test_report_shapes_naming_an_unknown_input_say_which(relu_engine):
    # A misspelt name said only that the right one was missing.
    for report in (relu_engine.memory_report, relu_engine.kernel_report):
        with pytest.raises(twinfer.InvalidArgumentError, match=r"unknown input\(s\) \['z'\]; inputs are \['x'\]"):
            report({"z": (2, 3)})


# --------------------------------------------------------------------------
# NaN and infinity


def test_nan_and_inf_propagate_through_arithmetic():
    # IEEE semantics, as onnxruntime and NumPy: no error, the values flow.
    m = model_bytes([helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Exp", ["s"], ["y"])],
                    [vi("x", T.FLOAT, [4])], [vi("y", T.FLOAT, [4])])
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    got = twinfer.load(m).run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, np.exp(x + x), rtol=1e-6)  # NaN where NumPy has NaN


@pytest.mark.parametrize("start, limit, delta, words", [
    (0.0, np.nan, 1.0, ["finite", "nan"]),
    (0.0, np.inf, 1.0, ["finite", "inf"]),
    (-np.inf, 1.0, 1.0, ["finite", "-inf"]),
    (0.0, 1.0, np.nan, ["finite", "nan"]),
    (0.0, 1e30, 1e-30, ["1e+60 elements"]),
])
def test_range_of_non_finite_or_huge_bounds(start, limit, delta, words):
    # Range's length is ceil((limit - start) / delta): with a NaN or an
    # infinity that is a float-to-int cast C++ leaves undefined, which gave
    # an empty tensor here (and anything on another compiler).
    m = model_bytes([helper.make_node("Range", ["a", "b", "c"], ["y"], name="range")],
                    [vi(n, T.FLOAT, []) for n in "abc"], [vi("y", T.FLOAT, None)])
    feeds = {"a": np.float32(start), "b": np.float32(limit), "c": np.float32(delta)}
    with pytest.raises(twinfer.InvalidArgumentError) as e:
        twinfer.load(m).run(feeds)
    assert "node 'range' (Range)" in str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_range_of_int64_extremes_is_refused_not_wrapped():
    m = model_bytes([helper.make_node("Range", ["a", "b", "c"], ["y"], name="range")],
                    [vi(n, T.INT64, []) for n in "abc"], [vi("y", T.INT64, None)])
    e = twinfer.load(m)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    with pytest.raises(twinfer.InvalidArgumentError, match="more elements than a tensor can hold"):
        e.run({"a": np.int64(lo), "b": np.int64(hi), "c": np.int64(1)})
    # and near the edge, exact:
    got = e.run({"a": np.int64(hi - 7), "b": np.int64(hi), "c": np.int64(3)})["y"].numpy()
    np.testing.assert_array_equal(got, np.array([hi - 7, hi - 4, hi - 1], np.int64))


def test_nan_scales_and_counts_are_named():
    resize = model_bytes([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", name="rs")],
                         [vi("x", T.FLOAT, [1, 1, 4, 4]), vi("s", T.FLOAT, [4])], [vi("y", T.FLOAT, None)])
    e = twinfer.load(resize)
    for s in ([1, 1, np.nan, 2], [1, 1, np.inf, 2]):
        with pytest.raises(twinfer.InvalidArgumentError, match="scales must be positive"):
            e.run({"x": np.ones((1, 1, 4, 4), np.float32), "s": np.array(s, np.float32)})


def test_nan_in_sorting_ops_does_not_crash():
    # std::sort with a comparator that NaN makes inconsistent may read out of
    # bounds; TopK and ArgMax must give an answer of the right shape.
    x = np.random.default_rng(0).random(257).astype(np.float32)
    x[::3] = np.nan
    topk = model_bytes([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0)],
                       [vi("x", T.FLOAT, [257]), vi("k", T.INT64, [1])],
                       [vi("v", T.FLOAT, None), vi("i", T.INT64, None)])
    out = twinfer.load(topk).run({"x": x, "k": np.array([40])})
    idx = out["i"].numpy()
    assert idx.shape == (40,) and ((idx >= 0) & (idx < 257)).all()
    argmax = model_bytes([helper.make_node("ArgMax", ["x"], ["y"], axis=0, keepdims=0)],
                         [vi("x", T.FLOAT, [257])], [vi("y", T.INT64, None)])
    assert 0 <= int(twinfer.load(argmax).run({"x": x})["y"].numpy()) < 257


def test_cast_of_nan_and_inf_to_int_is_defined():
    m = model_bytes([helper.make_node("Cast", ["x"], ["y"], to=T.INT32)], [vi("x", T.FLOAT, [4])],
                    [vi("y", T.INT32, [4])])
    got = twinfer.load(m).run({"x": np.array([np.nan, np.inf, -np.inf, 3e10], np.float32)})["y"].numpy()
    i32 = np.iinfo(np.int32)
    np.testing.assert_array_equal(got, [0, i32.max, i32.min, i32.max])


# --------------------------------------------------------------------------
# huge dims


@pytest.mark.parametrize("shape", [[1 << 20] * 3, [1 << 30] * 3, [1 << 62, 4]])
def test_huge_static_input_is_refused_at_load(shape):
    # The element count overflowed int64 while the plan was sized (1<<62 * 4
    # wraps to 0): the model loaded, with an arena of the wrong size.
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, shape)], [vi("y", T.FLOAT, shape)])
    with pytest.raises(twinfer.ShapeError, match=r"input 'x' of shape .* more elements than a tensor can hold"):
        twinfer.load(m)


def test_huge_folded_shape_names_the_node():
    shape = numpy_helper.from_array(np.array([1 << 40, 1 << 40], np.int64), "shape")
    m = model_bytes([helper.make_node("Expand", ["x", "shape"], ["y"], name="blow_up")],
                    [vi("x", T.FLOAT, [1])], [vi("y", T.FLOAT, None)], [shape])
    with pytest.raises(twinfer.ShapeError) as e:
        twinfer.load(m)
    assert "blow_up" in str(e.value) and "2^47" in str(e.value), str(e.value)


def test_huge_runtime_shapes():
    cos = model_bytes([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [vi("s", T.INT64, [3])],
                      [vi("y", T.FLOAT, None)])
    e = twinfer.load(cos)
    with pytest.raises(twinfer.ShapeError, match="too large"):
        e.run({"s": np.array([1 << 40] * 3)})
    with pytest.raises(twinfer.ShapeError, match="negative"):
        e.run({"s": np.array([-1, 2, 3])})
    relu = twinfer.load(model_bytes([helper.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, ["n", 3])],
                                    [vi("y", T.FLOAT, ["n", 3])]))
    # A zero-stride view of 24 GiB: the output cannot be allocated.
    with pytest.raises(twinfer.OutOfMemoryError, match="bytes"):
        relu.run({"x": np.broadcast_to(np.float32(0), (1 << 31, 3))})


# --------------------------------------------------------------------------
# files that change after (or while) twinfer reads them


_TRUNCATE_AFTER_LOAD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import twinfer
    path, kind = sys.argv[1], sys.argv[2]
    e = twinfer.load(path)
    x = np.ones((256, 1024), np.float32)
    before = e.run({"x": x})["y"].numpy().copy()
    if kind == "truncate":
        os.truncate(path, 100)
    else:  # re-exported to the same path: open(path, "wb") then new bytes
        with open(path, "wb") as f:
            f.write(b"\\x00" * (2 << 20))
    after = e.run({"x": x})["y"].numpy()
    print("same" if np.array_equal(before, after) else "changed")
""")


def _run_child(tmp_path, path, kind):
    script = tmp_path / "child.py"
    script.write_text(_TRUNCATE_AFTER_LOAD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, str(script), str(path), kind], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("kind", ["truncate", "rewrite"])
def test_model_file_changed_after_load(tmp_path, kind):
    # The file was memory-mapped: truncating it killed the process with
    # SIGBUS at the next run (exit -7), and rewriting it made the engine
    # compute with the new bytes. Now the engine keeps its own copy.
    path = tmp_path / "m.onnx"
    onnx.save(add_weights_model(), str(path))
    assert twinfer._core.read_model_info(str(path), True)["weight_bytes_mapped"] == 256 * 1024 * 4
    r = _run_child(tmp_path, path, kind)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "same"


@pytest.mark.parametrize("kind", ["truncate", "rewrite"])
def test_saved_engine_changed_after_load(tmp_path, kind):
    path = tmp_path / "m.twinfer"
    twinfer.load(add_weights_model().SerializeToString()).save(path)
    r = _run_child(tmp_path, path, kind)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "same"


def test_external_data_changed_after_load(tmp_path):
    model = add_weights_model()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    e = twinfer.load(str(path))
    x = np.ones((256, 1024), np.float32)
    before = e.run({"x": x})["y"].numpy().copy()
    os.truncate(tmp_path / "weights.bin", 0)  # a SIGBUS for a mapping; this process would die
    with open(tmp_path / "weights.bin", "wb") as f:
        f.write(b"\xff" * (1 << 20))
    np.testing.assert_array_equal(e.run({"x": x})["y"].numpy(), before)


def test_file_replaced_after_load_keeps_the_loaded_model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(add_weights_model(4, 4), str(path))
    e = twinfer.load(str(path))
    x = np.ones((4, 4), np.float32)
    before = e.run({"x": x})["y"].numpy().copy()
    os.remove(path)
    path.write_bytes(b"not a model")
    np.testing.assert_array_equal(e.run({"x": x})["y"].numpy(), before)
    with pytest.raises(twinfer.ModelFormatError):
        twinfer.load(str(path))


# --------------------------------------------------------------------------
# files that change while they are being read


def test_file_shorter_than_its_size_is_a_change_while_reading():
    # The reader reads a file's stat size, then compares the file's state
    # before and after; a read that ends before that size means the file
    # shrank meanwhile. A sysfs attribute file says 4096 bytes and holds a
    # few: the same path, made deterministic (a writer cannot be timed to
    # land inside the read).
    for path in ("/sys/devices/system/cpu/online", "/sys/kernel/mm/transparent_hugepage/enabled"):
        try:
            if os.path.isfile(path) and os.stat(path).st_size > len(open(path, "rb").read()):
                break
        except OSError:
            pass
    else:
        pytest.skip("no sysfs file whose size is larger than its contents")
    with pytest.raises(twinfer.ModelFormatError, match="changed while twinfer was reading it"):
        twinfer.load(path)


_REWRITER = textwrap.dedent("""
    import os, random, sys, time
    path, stop, blobs = sys.argv[1], sys.argv[2], [open(p, "rb").read() for p in sys.argv[3:]]
    r = random.Random(0)
    while not os.path.exists(stop):
        for blob in blobs:
            # Truncated, then written (as a re-export does), or written in
            # place and then cut to size: the file is never empty.
            with open(path, "wb" if r.random() < 0.3 else "r+b") as f:
                f.write(blob)
                f.truncate(len(blob))
            time.sleep(r.uniform(0, 0.002))
""")


def test_file_rewritten_while_loading_never_crashes(tmp_path):
    # Another process re-exports two models of different sizes to one path,
    # over and over, while this one loads it: each load is one of the two
    # models, complete, or a ModelFormatError (cut short, empty, or changed
    # while read); never a crash and never a mix of the two. (A process, not
    # a thread: the load holds the GIL, so a thread could not write during it.)
    blobs = []
    for k, rows in enumerate((64, 128)):
        blobs.append(tmp_path / f"{k}.onnx")
        blobs[-1].write_bytes(add_weights_model(rows, 1024).SerializeToString())
    path, stop = tmp_path / "m.onnx", tmp_path / "stop"
    path.write_bytes(blobs[0].read_bytes())
    (tmp_path / "rewriter.py").write_text(_REWRITER)
    child = subprocess.Popen([sys.executable, str(tmp_path / "rewriter.py"), str(path), str(stop), *map(str, blobs)])
    loaded, refused = 0, []
    try:
        for _ in range(300):
            try:
                e = twinfer.load(str(path))
            except twinfer.ModelFormatError as err:
                refused.append(str(err))
                continue
            rows = e.inputs[0].shape[0]
            want = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024) % 97
            np.testing.assert_array_equal(e.run({"x": np.zeros((rows, 1024), np.float32)})["y"].numpy(), want)
            loaded += 1
    finally:
        stop.touch()
        child.wait(timeout=30)
    assert loaded + len(refused) == 300


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_kernel_error_of_an_unnamed_node_names_it_once(device):
    # Before: "node '' (Gather): node '' (Gather): index 30 is out of range".
    g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [10, 3]),
                           helper.make_tensor_value_info("i", T.INT64, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    e = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), device=device)
    with pytest.raises(twinfer.Error) as info:
        e.run({"x": np.zeros((10, 3), np.float32), "i": np.array([1, 30], np.int64)})["y"].numpy()
    assert str(info.value).count("(Gather)") == 1 and "out of range" in str(info.value), str(info.value)


def test_closed_groups_and_bad_context_priorities_say_what_is_wrong():
    from device_models import chain_model

    e = twinfer.load(chain_model(), device="sim")
    par = twinfer.Parallel([e])
    par.close()
    with pytest.raises(twinfer.InvalidArgumentError, match="is closed"):
        par.run([{"x": np.ones((2, 33), np.float32)}])
    least, greatest = twinfer.stream_priority_range("sim")
    assert e.create_context(priority="high").stream.priority == greatest
    assert e.create_context(priority="low").stream.priority == least
    with pytest.raises(twinfer.InvalidArgumentError, match="priority must be"):
        e.create_context(priority="urgent")


# -- found by a fuzzing pass (stop 31): each crashed, hung or answered wrong --------
def _one_node(node, inputs, outputs, inits=(), opsets=(("", 17),)):
    g = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]).SerializeToString()


def test_depth_to_space_with_a_block_whose_square_wraps_is_refused():
    m = _one_node(helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2**32),
                  [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 2, 2])],
                  [helper.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(twinfer.ShapeError, match="blocksize must be in"):  # was SIGFPE
        twinfer.load(m, device="cpu")


def test_roi_align_with_absurd_rois_or_sampling_is_refused():
    vi = helper.make_tensor_value_info
    bi = numpy_helper.from_array(np.array([0], np.int64), "bi")
    m = _one_node(helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"]),
                  [vi("x", T.FLOAT, [1, 2, 4, 4]), vi("rois", T.FLOAT, [1, 4])], [vi("y", T.FLOAT, None)], [bi])
    e = twinfer.load(m, device="cpu")
    x = np.ones((1, 2, 4, 4), np.float32)
    huge = np.array([[0, 0, 2**32, 2**32]], np.float32)
    assert np.isfinite(e.run({"x": x, "rois": huge})["y"].numpy()).all()  # was SIGSEGV (samples per bin capped)
    np.testing.assert_allclose(e.run({"x": x, "rois": np.array([[0, 0, 3, 3]], np.float32)})["y"].numpy(), 1.0)
    m = _one_node(helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=16, output_width=16),
                  [vi("x", T.FLOAT, [1, 2, 4, 4]), vi("rois", T.FLOAT, [1, 4])], [vi("y", T.FLOAT, None)], [bi])
    with pytest.raises(twinfer.InvalidArgumentError, match="samples in each of"):
        twinfer.load(m, device="cpu").run({"x": x, "rois": huge})
    m = _one_node(helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], sampling_ratio=2**40),
                  [vi("x", T.FLOAT, [1, 2, 4, 4]), vi("rois", T.FLOAT, [1, 4])], [vi("y", T.FLOAT, None)], [bi])
    with pytest.raises(twinfer.InvalidArgumentError, match="sampling_ratio"):
        twinfer.load(m, device="cpu").run({"x": x, "rois": np.array([[0, 0, 3, 3]], np.float32)})


def test_a_tree_classifier_with_one_class_label_is_refused():
    node = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "prob"], domain="ai.onnx.ml", nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 0], class_weights=[1.0, 2.0],
        classlabels_int64s=[10])
    m = _one_node(node, [helper.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
                  [helper.make_tensor_value_info("label", T.INT64, None), helper.make_tensor_value_info("prob", T.FLOAT, None)],
                  opsets=(("", 17), ("ai.onnx.ml", 3)))
    with pytest.raises(twinfer.Error, match="single class label"):  # read and wrote past its buffers
        twinfer.load(m, device="cpu").run({"x": np.random.rand(3, 4).astype(np.float32)})


@pytest.mark.parametrize("domain", ["com.twinfer.blocked"])
def test_plan_only_layout_ops_in_a_model_are_refused(domain):
    m = _one_node(helper.make_node("MaxPool", ["x"], ["y"], domain=domain, kernel_shape=[2, 2]),
                  [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", T.FLOAT, None)], opsets=(("", 17), (domain, 1)))
    with pytest.raises(twinfer.UnsupportedOpError, match=domain):  # its kernel trusted the layout: heap corruption
        twinfer.load(m, device="cpu")


@pytest.mark.parametrize("pattern,why", [("(" * 100 + "a" + ")" * 100, "nested deeper"),
                                         ("(a+)+$", "itself repeats"), ("(\\w*)*", "itself repeats"),
                                         ("x" * 2000, "longer than")])
def test_regex_patterns_that_would_crash_or_hang_are_refused(pattern, why):
    m = _one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
                  [helper.make_tensor_value_info("x", T.STRING, [1])], [helper.make_tensor_value_info("y", T.BOOL, None)],
                  opsets=(("", 20),))
    with pytest.raises(twinfer.UnsupportedOpError, match=why):
        twinfer.load(m, device="cpu")


def test_regex_patterns_with_a_delimited_repeat_still_run():
    import re

    for pattern in ("(\\.\\d+)*", "\\d+(,\\d+)*", "([a-z]+)?x", "(ab)+"):
        m = _one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
                      [helper.make_tensor_value_info("x", T.STRING, [4])], [helper.make_tensor_value_info("y", T.BOOL, None)],
                      opsets=(("", 20),))
        words = np.array([".1.22", "1,2,33", "abx", "abab"], object)
        got = twinfer.load(m, device="cpu").run({"x": words})["y"].numpy()
        assert got.tolist() == [re.fullmatch(pattern, w) is not None for w in words], pattern


def test_tfidf_with_an_enormous_skip_count_ends():
    def model(skip):
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2,
                                max_skip_count=skip, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 1, 3])
        return _one_node(node, [helper.make_tensor_value_info("x", T.INT64, [5])],
                         [helper.make_tensor_value_info("y", T.FLOAT, None)])

    x = np.array([1, 2, 3, 1, 3], np.int64)
    got = twinfer.load(model(2**40), device="cpu").run({"x": x})["y"].numpy()  # hung
    import onnxruntime as ort

    want = ort.InferenceSession(model(4), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]  # every skip
    np.testing.assert_array_equal(got, want)


def test_unique_keeps_nan_as_one_value_after_the_numbers():
    vi = helper.make_tensor_value_info
    m = _one_node(helper.make_node("Unique", ["x"], ["u", "i", "inv", "c"]), [vi("x", T.FLOAT, [None])],
                  [vi(o, T.UNDEFINED, None) for o in ("u", "i", "inv", "c")])
    rng = np.random.default_rng(3)
    for x in (np.array([0, np.nan, 1, 0, 2, np.nan], np.float32),
              np.where(rng.random(3000) < 0.3, np.nan, rng.integers(0, 50, 3000)).astype(np.float32)):
        out = twinfer.load(m, device="cpu").run({"x": x})
        u, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True)  # NaNs as one
        np.testing.assert_array_equal(out["u"].numpy(), u)
        np.testing.assert_array_equal(out["i"].numpy(), idx)
        np.testing.assert_array_equal(out["inv"].numpy(), inv.reshape(-1))
        np.testing.assert_array_equal(out["c"].numpy(), cnt)


def test_an_error_inside_a_parallel_loop_is_raised_not_fatal():
    # A kernel error thrown by one thread of an OpenMP region ended the
    # process (std::terminate); parallel_for now rethrows it on the caller.
    # In a child process, so the old behaviour fails this test alone.
    code = textwrap.dedent(
        """
        import numpy as np, twinfer
        from onnx import helper, numpy_helper, TensorProto as T
        vi = helper.make_tensor_value_info
        bi = numpy_helper.from_array(np.zeros(64, np.int64), "bi")
        node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=16, output_width=16)
        g = helper.make_graph([node], "g", [vi("x", T.FLOAT, [1, 2, 4, 4]), vi("rois", T.FLOAT, [64, 4])],
                              [vi("y", T.FLOAT, None)], [bi])
        e = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu",
                         num_threads=2)
        rois = np.tile(np.array([[0, 0, 3, 3]], np.float32), (64, 1))
        rois[50] = [0, 0, 2**32, 2**32]
        try:
            e.run({"x": np.ones((1, 2, 4, 4), np.float32), "rois": rois})
        except twinfer.InvalidArgumentError as ex:
            print("raised:", "roi 50" in str(ex))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert r.returncode == 0 and "raised: True" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_overflowing_window_and_scalar_arithmetic_names_the_attribute():
    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    m = _one_node(helper.make_node("Conv", ["x", "w"], ["y"], dilations=[2**62, 1]),
                  [vi("x", T.FLOAT, [1, 1, 8, 8])], [vi("y", T.FLOAT, None)], [w])
    with pytest.raises(twinfer.ShapeError, match="with dilation 4611686018427387904 spans more than"):
        twinfer.load(m, device="cpu")  # was "kernel of size -9223372036854775807"
    depth = numpy_helper.from_array(np.array(np.nan, np.float32), "depth")
    values = numpy_helper.from_array(np.array([0, 1], np.float32), "v")
    m = _one_node(helper.make_node("OneHot", ["i", "depth", "v"], ["y"]), [vi("i", T.INT64, [3])],
                  [vi("y", T.FLOAT, None)], [depth, values])
    with pytest.raises(twinfer.Error, match="depth: a scalar used as an integer is nan"):
        twinfer.load(m, device="cpu")  # was "depth must be positive, got -9223372036854775808"


def _run_python_child(code, env_extra=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


_DOUBLING_LOOP = """
    import numpy as np, twinfer
    from onnx import helper, TensorProto as T
    vi = helper.make_tensor_value_info
    # Each iteration concatenates the state with itself: 4 KiB doubled N
    # times (20: 4 GiB; 40: 4 PiB, more elements than a tensor may hold).
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Concat", ["s", "s"], ["s_out"], axis=0)],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("s", T.FLOAT, None)],
        [vi("c_out", T.BOOL, []), vi("s_out", T.FLOAT, None)])
    loop = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)
    g = helper.make_graph([loop], "g", [vi("n", T.INT64, []), vi("x", T.FLOAT, [1024])], [vi("y", T.FLOAT, None)])
    e = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
    x = np.random.rand(1024).astype(np.float32)
    import os
    try:
        e.run({"n": np.array(int(os.environ["TRIPS"]), np.int64), "x": x})
        print("ran")
    except (twinfer.OutOfMemoryError, twinfer.ShapeError) as ex:
        print("refused:", type(ex).__name__, ex)
    # The engine is not damaged: a small trip count still runs.
    y = np.asarray(e.run({"n": np.array(3, np.int64), "x": x})["y"])
    print("after:", np.array_equal(y, np.tile(x, 8)))
"""


@pytest.mark.parametrize("unroll", ["1", "0"])
@pytest.mark.parametrize("limit", ["256", " 256\n"])
def test_a_loop_whose_state_doubles_is_refused_at_the_memory_limit(limit, unroll):
    # With TWINFER_HOST_MEMORY_LIMIT_MB the allocator refuses to hold more
    # than the limit: the doubling Loop stops with OutOfMemoryError naming it,
    # unrolled (the plan's arena) or through the loop kernel (its growing
    # state). (Without a limit it stops at what the system has available, the
    # test below; here the limit keeps the test light.)
    r = _run_python_child(_DOUBLING_LOOP, {"TWINFER_HOST_MEMORY_LIMIT_MB": limit, "TRIPS": "20",
                                           "TWINFER_UNROLL_LOOPS": unroll})
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "refused: OutOfMemoryError" in r.stdout and "TWINFER_HOST_MEMORY_LIMIT_MB" in r.stdout, r.stdout
    assert "after: True" in r.stdout, r.stdout


def test_an_unrolled_loop_past_a_tensors_size_is_refused_when_planned():
    # 40 doublings unrolled: the plan's shapes say so before anything is
    # allocated, and the engine still runs a small trip count.
    r = _run_python_child(_DOUBLING_LOOP, {"TRIPS": "40"})
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "refused: ShapeError" in r.stdout and "more elements than a tensor can hold" in r.stdout, r.stdout
    assert "after: True" in r.stdout, r.stdout


def test_a_tensor_larger_than_the_free_host_memory_is_refused_not_killed():
    # Linux overcommits: allocating more than the machine can back succeeds,
    # and filling it gets the process killed by the kernel. A large host
    # allocation is checked against what /proc/meminfo (and the cgroup) says
    # is available, so the Expand below is an OutOfMemoryError. In a child
    # process: without the check the child is the one the kernel kills.
    r = _run_python_child("""
        import numpy as np, twinfer
        from onnx import helper, TensorProto as T
        vi = helper.make_tensor_value_info
        n = (twinfer._core.host_bytes_available() + (1 << 30)) // 4
        g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"])], "g",
                              [vi("x", T.FLOAT, [1]), vi("shape", T.INT64, [1])], [vi("y", T.FLOAT, None)])
        e = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
        try:
            e.run({"x": np.ones(1, np.float32), "shape": np.array([n], np.int64)})
            print("ran")
        except twinfer.OutOfMemoryError as ex:
            print("refused:", ex)
        y = np.asarray(e.run({"x": np.full(1, 2, np.float32), "shape": np.array([5], np.int64)})["y"])
        print("after:", y.tolist() == [2.0] * 5)
        """)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    # The check's message, not malloc's failure (which would also be an
    # OutOfMemoryError where the size is past what overcommit allows at all).
    assert "refused:" in r.stdout and "available (allocating it would get the process killed)" in r.stdout, r.stdout
    assert "after: True" in r.stdout, r.stdout


def _meminfo_bytes():
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024
    return fields


def _cgroup_bytes_left():
    """The least that this process's cgroup v2 and its ancestors leave:
    memory.max - (memory.current - inactive_file); None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            line = next(line for line in f if line.startswith("0::"))
    except (OSError, StopIteration):
        return None
    path, left = line[3:].strip(), None
    while True:
        d = "/sys/fs/cgroup" + ("" if path == "/" else path)
        try:
            with open(d + "/memory.max") as f:
                limit = f.read().strip()
            if limit != "max":
                with open(d + "/memory.current") as f:
                    used = int(f.read())
                with open(d + "/memory.stat") as f:
                    stat = dict(line.split() for line in f if line.strip())
                used -= min(used, int(stat.get("inactive_file", 0)))
                here = max(int(limit) - used, 0)
                left = here if left is None else min(left, here)
        except OSError:
            pass
        if path in ("", "/"):
            return left
        path = path.rsplit("/", 1)[0] or "/"


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="reads Linux's /proc/meminfo")
def test_host_bytes_available_is_what_the_kernel_reports():
    info = _meminfo_bytes()
    expected = info["MemAvailable"] + info.get("SwapFree", 0)
    left = _cgroup_bytes_left()
    if left is not None:
        expected = min(expected, left)
    got = twinfer._core.host_bytes_available()
    # Both are read moments apart while other processes run.
    assert abs(got - expected) < (256 << 20), (got, expected)


@pytest.mark.parametrize("pads_are_input", [False, True])
def test_pads_too_large_to_hold_are_named(pads_are_input):
    # 2^62 + 2^62 wrapped to a negative size ("shape of output 'y' is not
    # known"); a 2^40 pad built an index map of 8 TiB ("out of host memory").
    vi = helper.make_tensor_value_info
    inputs, inits = [vi("x", T.FLOAT, [3])], []
    cases = [([2**62, 2**62], twinfer.ShapeError, "grow axis 0"), ([0, 2**62], twinfer.ShapeError, "grow axis 0"),
             ([-(2**63), -1], twinfer.ShapeError, "crop more than axis 0"),
             ([0, 2**40], twinfer.OutOfMemoryError, "Pad's index maps needs")]
    for pads, error, words in cases:
        if pads_are_input:
            graph_inputs, inits = inputs + [vi("pads", T.INT64, [2])], []
        else:
            graph_inputs, inits = inputs, [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
        g = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"])], "g", graph_inputs,
                              [vi("y", T.FLOAT, None)], inits)
        feeds = {"x": np.ones(3, np.float32)}
        if pads_are_input:
            feeds["pads"] = np.array(pads, np.int64)
        with pytest.raises(error, match=words):
            twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).run(feeds)
    # Ordinary pads on the same shapes still give NumPy's answer.
    x = np.random.rand(3).astype(np.float32)
    g = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"])], "g",
                          [vi("x", T.FLOAT, [3]), vi("pads", T.INT64, [2])], [vi("y", T.FLOAT, None)])
    y = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).run(
        {"x": x, "pads": np.array([2, -1], np.int64)})["y"]
    np.testing.assert_array_equal(np.asarray(y), np.pad(x[:2], (2, 0)))


def test_the_host_memory_limit_holds_for_threads_allocating_at_once():
    # The cap was checked, the lock let go to read /proc, and the block
    # counted after: threads passing the check together all got their block
    # (3 x 80 MiB held under a 100 MiB cap). Each thread keeps its output.
    r = _run_python_child("""
        import threading, numpy as np, twinfer
        from onnx import helper, TensorProto as T
        vi = helper.make_tensor_value_info
        g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"])], "g",
                              [vi("x", T.FLOAT, [1]), vi("shape", T.INT64, [1])], [vi("y", T.FLOAT, None)])
        e = twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
        held, refused, start = [], [], threading.Barrier(8)
        def run():
            start.wait()
            try:
                held.append(e.run({"x": np.ones(1, np.float32), "shape": np.array([20 << 20], np.int64)})["y"])
            except twinfer.OutOfMemoryError:
                refused.append(1)
        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("held", len(held), "refused", len(refused))
        """, {"TWINFER_HOST_MEMORY_LIMIT_MB": "100", "TWINFER_CPU_CACHE_MB": "0"})
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "held 1 refused 7" in r.stdout, r.stdout


@pytest.mark.parametrize("value", ["-5", "256MB", "lots"])
def test_a_memory_limit_that_is_not_a_number_is_said_not_ignored(value):
    # "-5" wrapped to no limit in strtoull; any garbage silently meant none.
    r = _run_python_child("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import twinfer
        print([str(w.message) for w in caught if "TWINFER_HOST_MEMORY_LIMIT_MB" in str(w.message)])
        """, {"TWINFER_HOST_MEMORY_LIMIT_MB": value})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "is not a whole number of MB: no host memory limit is set" in r.stdout, r.stdout
