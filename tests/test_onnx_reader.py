"""The ONNX reader (csrc/onnx/): what it reads must match what the onnx package
reports for the same file; malformed or hostile files must raise twinfer.Error
(never crash the interpreter); external data must stay inside the model's folder."""

from __future__ import annotations

import os
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
import twinfer.backend
from twinfer import _core

from onnx_helpers import assert_close, run_ort

# --------------------------------------------------------------------------
# helpers


def info_of(model_or_bytes, tmp_path=None, as_path=False, **kw):
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else model_or_bytes.SerializeToString()
    if as_path:
        p = tmp_path / "m.onnx"
        p.write_bytes(data)
        return _core.read_model_info(str(p), True)
    return _core.read_model_info(data, False, **kw)


def onnx_dtype_name(elem_type: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def onnx_shape(type_proto):
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
            for d in t.shape.dim]


def reference_info(model: onnx.ModelProto) -> dict:
    """What the onnx package itself says about the model (the independent reference)."""
    g = model.graph
    inits = {t.name for t in g.initializer}

    def io(vis):
        return [{"name": v.name, "dtype": onnx_dtype_name(v.type.tensor_type.elem_type), "shape": onnx_shape(v.type)}
                for v in vis]

    return {
        "ir_version": model.ir_version,
        "producer_name": model.producer_name,
        "opsets": {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import},
        "inputs": io([i for i in g.input if i.name not in inits]),
        "outputs": io(g.output),
        "initializers": len(g.initializer),
        "weight_bytes": sum(numpy_helper.to_array(t).nbytes for t in g.initializer),
        "nodes": [(n.name, n.op_type, "" if n.domain == "ai.onnx" else n.domain) for n in g.node],
    }


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, inits=(), opsets=(("", 17),), **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits), **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], producer_name="tests")
    m.ir_version = 10
    return m


def expect_error(data: bytes, cls=twinfer.Error, match=None, **kw):
    with pytest.raises(cls, match=match):
        _core.read_model_info(data, False, **kw)


# A tiny protobuf encoder for hand-crafted (malformed) bytes.
def varint(v: int) -> bytes:
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def f_varint(field: int, v: int) -> bytes:
    return tag(field, 0) + varint(v)


def f_len(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


OPSET17 = f_len(8, f_varint(2, 17))  # ModelProto.opset_import {version: 17}


# --------------------------------------------------------------------------
# well-formed models: compare with onnx's own view


def _model_mixed():
    w = numpy_helper.from_array(np.arange(15, dtype=np.float32).reshape(3, 5), "w")
    b16 = numpy_helper.from_array(np.ones((7,), np.float16), "b16")
    return model_of(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu"),
         helper.make_node("Cast", ["i"], ["ci"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Identity", ["b16"], ["z"], name="")],
        [vi("x", TensorProto.FLOAT, ["batch", 3]), vi("i", TensorProto.INT64, [None, 2, "k"]),
         vi("flag", TensorProto.BOOL, []), vi("u", TensorProto.UINT8, None), vi("bf", TensorProto.BFLOAT16, [4])],
        [vi("y", TensorProto.FLOAT, ["batch", 5]), vi("ci", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT16, [7])],
        [w, b16],
        opsets=(("", 17), ("com.microsoft", 1)),
    )


def _model_input_is_initializer():
    # "w" is listed as a graph input AND an initializer: a constant, not an input.
    w = numpy_helper.from_array(np.ones((13,), np.float64), "w")
    return model_of([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                    [vi("x", TensorProto.DOUBLE, [13]), vi("w", TensorProto.DOUBLE, [13])],
                    [vi("y", TensorProto.DOUBLE, [13])], [w], opsets=(("ai.onnx", 13),))


def _model_no_initializers():
    return model_of([helper.make_node("Relu", ["x"], ["t"], name="r"), helper.make_node("Neg", ["t"], ["y"], name="n")],
                    [vi("x", TensorProto.INT32, [1, 17])], [vi("y", TensorProto.INT32, [1, 17])], opsets=(("", 21),))


@pytest.mark.parametrize("make", [_model_mixed, _model_input_is_initializer, _model_no_initializers])
@pytest.mark.parametrize("as_path", [False, True])
def test_info_matches_onnx(make, as_path, tmp_path):
    model = make()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    ref = reference_info(onnx.load(str(path)))
    got = _core.read_model_info(str(path), True) if as_path else _core.read_model_info(path.read_bytes(), False)
    for key, want in ref.items():
        got_v = got[key]
        if key == "nodes":
            got_v = [tuple(n) for n in got_v]
        assert got_v == want, key
    assert got["weight_bytes_mapped"] + got["weight_bytes_copied"] == ref["weight_bytes"]


def test_mapped_weights_in_file(tmp_path):
    # raw_data in a mapped file is borrowed when aligned; big tensors are
    # padded to alignment by onnx's external-data writer (tested below), but an
    # inline tensor lands wherever the protobuf puts it: mapped or copied, the
    # bytes must add up.
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"w{n}") for n in (3, 17, 101)]
    model = model_of([helper.make_node("Concat", ["w3", "w17", "w101"], ["y"], axis=0, name="c")], [],
                     [vi("y", TensorProto.FLOAT, [121])], inits)
    got = info_of(model)
    assert got["weight_bytes"] == 121 * 4
    assert got["weight_bytes_mapped"] + got["weight_bytes_copied"] == 121 * 4


def test_borrowed_bytes_outlive_the_callers_reference(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", TensorProto.FLOAT, [2, 5])],
                     [vi("y", TensorProto.FLOAT, [2, 3])], [numpy_helper.from_array(w, "w")])
    x = rng.standard_normal((2, 5)).astype(np.float32)
    (want,) = run_ort(model, {"x": x})
    data = model.SerializeToString()
    eng = twinfer.load(data, device="cpu")
    del data
    assert_close(eng.run({"x": x})["y"].numpy(), want, rtol=1e-5, atol=1e-5)


TYPED = [
    (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
    (TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8), (TensorProto.INT16, np.int16),
    (TensorProto.UINT16, np.uint16), (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64),
    (TensorProto.UINT32, np.uint32), (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_),
]


@pytest.mark.parametrize("elem,npt", TYPED, ids=[TensorProto.DataType.Name(e) for e, _ in TYPED])
@pytest.mark.parametrize("raw", [False, True])
def test_initializer_values(elem, npt, raw, rng):
    """Typed fields (float_data, int32_data, ...) and raw_data decode to the values
    onnx's numpy_helper reads from the same TensorProto."""
    if npt == np.bool_:
        vals = rng.integers(0, 2, size=(3, 5)).astype(np.bool_)
    elif np.issubdtype(npt, np.integer):
        info = np.iinfo(npt)
        vals = rng.integers(max(info.min, -1000), min(info.max, 1000), size=(3, 5), endpoint=True).astype(npt)
    else:
        vals = rng.standard_normal((3, 5)).astype(npt)
    w = helper.make_tensor("w", elem, [3, 5], vals.tobytes() if raw else vals.flatten().tolist(), raw=raw)
    model = model_of([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", elem, [3, 5])], [w])
    expected = numpy_helper.to_array(w)
    got = info_of(model)
    assert got["weight_bytes"] == expected.nbytes
    if not raw and elem not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        assert got["weight_bytes_copied"] == expected.nbytes  # varints are always decoded
    y = twinfer.load(model, device="cpu").run({})["y"].numpy()
    assert_close(y, expected, rtol=0, atol=0)


def _unpacked_float_tensor(name: str, vals: np.ndarray) -> bytes:
    # TensorProto with dims packed and float_data unpacked (one field per value):
    # both encodings are legal and the onnx package writes neither this way.
    body = f_len(1, b"".join(varint(d) for d in vals.shape)) + f_varint(2, TensorProto.FLOAT)
    body += b"".join(tag(4, 5) + struct.pack("<f", v) for v in vals.flatten())
    return body + f_len(8, name.encode())


def test_unpacked_repeated_fields(rng):
    vals = rng.standard_normal((3, 7)).astype(np.float32)
    model = model_of([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", TensorProto.FLOAT, [3, 7])])
    t = TensorProto()
    t.ParseFromString(_unpacked_float_tensor("w", vals))  # onnx agrees it is a valid tensor
    np.testing.assert_array_equal(numpy_helper.to_array(t), vals)
    data = model.SerializeToString()
    # Append the initializer to the graph (field 7 of ModelProto, field 5 of GraphProto).
    graph = model.graph.SerializeToString() + f_len(5, _unpacked_float_tensor("w", vals))
    m2 = onnx.ModelProto()
    m2.ParseFromString(data)
    m2.ClearField("graph")
    data = m2.SerializeToString() + f_len(7, graph)
    assert onnx.ModelProto.FromString(data).graph.initializer[0].name == "w"
    y = twinfer.load(data, device="cpu").run({})["y"].numpy()
    assert_close(y, vals, rtol=0, atol=0)


def test_subgraph_if(tmp_path):
    # Both branches read "x" from the outer scope.
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [vi("t", TensorProto.FLOAT, [5])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"], name="else_neg"),
                                helper.make_node("Abs", ["e0"], ["e"], name="else_abs")], "else", [],
                               [vi("e", TensorProto.FLOAT, [5])])
    model = model_of([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")],
                     [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [5])], [vi("y", TensorProto.FLOAT, [5])])
    got = info_of(model)
    ref = reference_info(model)
    assert [tuple(n) for n in got["nodes"]] == ref["nodes"] == [("if", "If", "")]
    assert got["inputs"] == ref["inputs"]


def test_if_inside_loop_body_nested():
    inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o"], name="deep")], "inner", [],
                              [vi("o", TensorProto.FLOAT, [2])])
    mid = helper.make_graph([helper.make_node("If", ["c"], ["m"], then_branch=inner, else_branch=inner, name="mid_if")],
                            "mid", [], [vi("m", TensorProto.FLOAT, [2])])
    model = model_of([helper.make_node("If", ["c"], ["y"], then_branch=mid, else_branch=mid, name="top_if")],
                     [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])])
    assert [tuple(n) for n in info_of(model)["nodes"]] == [("top_if", "If", "")]


# --------------------------------------------------------------------------
# external data


def _external_model(tmp_path, rng, folder="model"):
    d = tmp_path / folder
    d.mkdir()
    w = rng.standard_normal((7, 13)).astype(np.float32)
    b = rng.standard_normal((13,)).astype(np.float32)
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                      helper.make_node("Add", ["h", "b"], ["y"], name="add")],
                     [vi("x", TensorProto.FLOAT, ["n", 7])], [vi("y", TensorProto.FLOAT, ["n", 13])],
                     [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = d / "model.onnx"
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(model)  # save_model rewrites its argument to point at the external file
    onnx.save_model(on_disk, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    return path, model


def test_external_data_mapped_and_runs(tmp_path, rng):
    path, model = _external_model(tmp_path, rng)
    on_disk = onnx.load(str(path), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in on_disk.graph.initializer)
    got = _core.read_model_info(str(path), True)
    assert got["weight_bytes"] == (7 * 13 + 13) * 4
    assert got["weight_bytes_mapped"] > 0
    assert got["weight_bytes_mapped"] + got["weight_bytes_copied"] == got["weight_bytes"]
    # bytes + base_dir reads the same; bytes alone refuse (no folder to look in).
    data = path.read_bytes()
    assert _core.read_model_info(data, False, base_dir=str(path.parent))["weight_bytes"] == got["weight_bytes"]
    expect_error(data, twinfer.ModelFormatError, match="base_dir")

    x = rng.standard_normal((3, 7)).astype(np.float32)
    (want,) = run_ort(model, {"x": x})
    engines = [twinfer.load(str(path), device="cpu"), twinfer.load(data, device="cpu", base_dir=str(path.parent))]
    # The mappings keep the weights alive after the files are gone.
    del data
    (path.parent / "weights.bin").unlink()
    path.unlink()
    for eng in engines:
        assert_close(eng.run({"x": x})["y"].numpy(), want, rtol=1e-5, atol=1e-5)


def _set_location(path, location):
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    path.write_bytes(m.SerializeToString())


def test_external_data_escapes_refused(tmp_path, rng):
    path, _ = _external_model(tmp_path, rng)
    weights = path.parent / "weights.bin"
    # Every target below exists and holds the right bytes: only the path check can refuse it.
    (tmp_path / "x.bin").write_bytes(weights.read_bytes())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(weights.read_bytes())
    os.symlink(outside / "w.bin", path.parent / "link.bin")
    os.symlink("../outside", path.parent / "sub")  # a directory symlink leaving the folder
    for loc in ["../x.bin", str(tmp_path / "x.bin"), str(weights), "link.bin", "sub/w.bin", "./../x.bin",
                "/etc/passwd"]:
        _set_location(path, loc)
        with pytest.raises(twinfer.ModelFormatError, match="escapes the model's folder"):
            _core.read_model_info(str(path), True)
        with pytest.raises(twinfer.ModelFormatError, match="escapes the model's folder"):
            twinfer.load(str(path), device="cpu")
    # A symlink that stays inside the folder is fine.
    os.symlink("weights.bin", path.parent / "inside.bin")
    _set_location(path, "inside.bin")
    assert _core.read_model_info(str(path), True)["weight_bytes_mapped"] > 0


def test_external_data_bad_ranges(tmp_path, rng):
    path, _ = _external_model(tmp_path, rng)
    m = onnx.load(str(path), load_external_data=False)
    size = (path.parent / "weights.bin").stat().st_size
    for key, value, match in [("offset", str(size), "beyond the end"), ("length", "5", "length"),
                              ("offset", "-4", "not a valid"), ("location", "missing.bin", "not found")]:
        m2 = onnx.ModelProto()
        m2.CopyFrom(m)
        for e in m2.graph.initializer[0].external_data:
            if e.key == key:
                e.value = value
        if key == "length" and not any(e.key == "length" for e in m2.graph.initializer[0].external_data):
            m2.graph.initializer[0].external_data.add(key="length", value=value)
        path.write_bytes(m2.SerializeToString())
        with pytest.raises(twinfer.ModelFormatError, match=match):
            _core.read_model_info(str(path), True)


# --------------------------------------------------------------------------
# malformed models: errors, never crashes


def _rich_model_bytes() -> bytes:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="r")], "then", [], [vi("t", TensorProto.FLOAT, [3])])
    w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    i64 = helper.make_tensor("k", TensorProto.INT64, [2], [5, -7])
    model = model_of([helper.make_node("Add", ["x", "w"], ["a"], name="add"),
                      helper.make_node("If", ["c"], ["b"], then_branch=then_g, else_branch=then_g, name="if"),
                      helper.make_node("Transpose", ["a"], ["y"], perm=[0], name="tr")],
                     [vi("x", TensorProto.FLOAT, ["n"]), vi("c", TensorProto.BOOL, [])],
                     [vi("y", TensorProto.FLOAT, [3]), vi("b", TensorProto.FLOAT, [3])], [w, i64])
    return model.SerializeToString()


def _parses_in_onnx(data: bytes) -> bool:
    try:
        onnx.ModelProto.FromString(data)
        return True
    except Exception:
        return False


def test_truncated_files(tmp_path):
    data = _rich_model_bytes()
    assert _core.read_model_info(data, False)["initializers"] == 2
    for cut in range(len(data)):
        piece = data[:cut]
        try:
            _core.read_model_info(piece, False)
        except twinfer.Error:
            continue
        # A cut at a field boundary can leave a valid (smaller) message.
        assert _parses_in_onnx(piece), f"accepted bytes protobuf rejects (cut at {cut})"
    # ... and through the mmap path, a few cut points.
    p = tmp_path / "cut.onnx"
    for cut in (0, 1, 7, len(data) // 2, len(data) - 1):
        p.write_bytes(data[:cut])
        with pytest.raises(twinfer.Error):
            _core.read_model_info(str(p), True)


def test_random_and_corrupted_bytes(rng):
    for _ in range(300):
        junk = rng.integers(0, 256, size=int(rng.integers(0, 400)), dtype=np.uint8).tobytes()
        try:
            _core.read_model_info(junk, False)
        except twinfer.Error:
            continue
        assert _parses_in_onnx(junk)
    data = bytearray(_rich_model_bytes())
    for _ in range(300):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 4))):
            bad[pos] = int(rng.integers(0, 256))
        try:
            _core.read_model_info(bytes(bad), False)
        except twinfer.Error:
            pass


def test_wrong_wire_type():
    # ModelProto.graph (field 7) written as a varint.
    expect_error(f_varint(7, 1) + OPSET17, twinfer.ModelFormatError, match="ModelProto.graph: wrong wire type")
    # GraphProto.node written as fixed32; TensorProto.raw_data written as a varint.
    expect_error(f_len(7, tag(1, 5) + b"\0\0\0\0") + OPSET17, twinfer.ModelFormatError, match="GraphProto.node")
    tensor = f_len(8, b"w") + f_varint(2, 1) + f_varint(9, 3)
    expect_error(f_len(7, f_len(5, tensor)) + OPSET17, twinfer.ModelFormatError, match="TensorProto.raw_data")


def test_varint_overflow_and_bad_tags():
    expect_error(tag(1, 0) + b"\xff" * 10 + b"\x01", twinfer.ModelFormatError, match="overflow")
    expect_error(tag(1, 0) + b"\xff\xff", twinfer.ModelFormatError, match="truncated varint")
    expect_error(b"\x0f", twinfer.ModelFormatError, match="invalid wire type 7")
    expect_error(b"\x02", twinfer.ModelFormatError, match="invalid field number 0")
    expect_error(tag(9, 4), twinfer.ModelFormatError, match="end-group")
    expect_error(tag(7, 2) + varint(1000), twinfer.ModelFormatError, match="past the end")


def test_deep_nesting_is_refused():
    # Unknown groups nested 100000 deep, and subgraphs nested 40 deep: no stack overflow.
    expect_error(tag(99, 3) * 100000 + tag(99, 4) * 100000 + OPSET17, twinfer.ModelFormatError, match="deeper")
    g = b""
    for _ in range(40):
        attr = f_len(1, b"then_branch") + f_varint(20, 5) + f_len(6, g)
        g = f_len(1, f_len(4, b"If") + f_len(5, attr))  # GraphProto { node { op_type, attribute } }
    expect_error(f_len(7, g) + OPSET17, twinfer.ModelFormatError, match="deeper")


def _with_initializer(t: TensorProto) -> bytes:
    return model_of([helper.make_node("Identity", [t.name], ["y"], name="id")], [],
                    [vi("y", TensorProto.FLOAT, None)], [t]).SerializeToString()


def test_absurd_dims():
    t = TensorProto(name="huge", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
    with pytest.raises((twinfer.ModelFormatError, twinfer.ShapeError), match="huge"):
        _core.read_model_info(_with_initializer(t), False)
    t = TensorProto(name="neg", data_type=TensorProto.FLOAT, dims=[3, -2])
    with pytest.raises((twinfer.ModelFormatError, twinfer.ShapeError), match="neg"):
        _core.read_model_info(_with_initializer(t), False)


@pytest.mark.parametrize("nbytes", [0, 59, 61])
def test_raw_data_length_mismatch(nbytes):
    t = TensorProto(name="w_bad", data_type=TensorProto.FLOAT, dims=[3, 5], raw_data=b"\0" * nbytes)
    expect_error(_with_initializer(t), twinfer.ModelFormatError, match="w_bad.*raw_data has %d bytes" % nbytes)


def test_typed_data_count_mismatch():
    t = TensorProto(name="w_few", data_type=TensorProto.INT64, dims=[4], int64_data=[1, 2, 3])
    expect_error(_with_initializer(t), twinfer.ModelFormatError, match="w_few.*int64_data has 3 values")
    t = TensorProto(name="w_wrong", data_type=TensorProto.INT64, dims=[2], float_data=[1, 2])
    expect_error(_with_initializer(t), twinfer.ModelFormatError, match="w_wrong.*float_data")


@pytest.mark.parametrize("code", [TensorProto.COMPLEX128, TensorProto.COMPLEX64, 99])
def test_unknown_data_type(code):
    t = TensorProto(name="w_odd", data_type=code, dims=[2], raw_data=b"\0" * 16)
    expect_error(_with_initializer(t), twinfer.DTypeError, match="w_odd")


def test_string_tensor_malformed():
    # Strings live in string_data, one per element; a string tensor with too
    # few of them, or one claiming raw_data, is refused naming it.
    t = TensorProto(name="w_few", data_type=TensorProto.STRING, dims=[3], string_data=[b"a", b"b"])
    expect_error(_with_initializer(t), twinfer.ModelFormatError, match="w_few.*2 strings")
    t = TensorProto(name="w_raw", data_type=TensorProto.STRING, dims=[2], raw_data=b"ab")
    expect_error(_with_initializer(t), twinfer.ModelFormatError, match="w_raw.*string_data")


def test_string_initializer_runs():
    # Any bytes, not only UTF-8, come back unchanged (as surrogate escapes).
    t = helper.make_tensor("w_str", TensorProto.STRING, [2, 2], [b"a", b"", "\u00e9".encode(), b"\xff"])
    model = model_of([helper.make_node("Identity", ["w_str"], ["y"], name="id")], [],
                     [vi("y", TensorProto.STRING, [2, 2])], [t])
    (y,) = twinfer.backend.prepare(model).run([])
    assert y.dtype == object and y.shape == (2, 2)
    assert [s.encode("utf-8", "surrogateescape") for s in y.ravel()] == [b"a", b"", "\u00e9".encode(), b"\xff"]


def test_cycle():
    model = model_of([helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")],
                     [], [vi("a", TensorProto.FLOAT, [1])])
    expect_error(model.SerializeToString(), twinfer.ModelFormatError, match="cycle")


def test_dangling_input_in_main_graph():
    model = model_of([helper.make_node("Relu", ["nowhere"], ["y"], name="lost")], [], [vi("y", TensorProto.FLOAT, [1])])
    expect_error(model.SerializeToString(), twinfer.ModelFormatError, match="lost.*nowhere")


def test_value_produced_twice():
    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")],
                     [vi("x", TensorProto.FLOAT, [1])], [vi("y", TensorProto.FLOAT, [1])])
    expect_error(model.SerializeToString(), twinfer.ModelFormatError, match="produced twice")


def test_sparse_initializer_refused():
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp")
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "sp_idx")
    model = model_of([helper.make_node("Identity", ["sp"], ["y"], name="id")], [], [vi("y", TensorProto.FLOAT, [4])],
                     sparse_initializer=[helper.make_sparse_tensor(values, indices, [4])])
    expect_error(model.SerializeToString(), twinfer.UnsupportedOpError, match="sparse initializer 'sp'")


def test_sparse_input_refused():
    # Tensors, sequences, optionals and maps are supported (tests/test_sequences.py,
    # tests/test_ops_ml.py); sparse tensors are not.
    m = helper.make_value_info("m", helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2]))
    model = model_of([helper.make_node("Identity", ["m"], ["y"], name="id")], [m],
                     [vi("y", TensorProto.FLOAT, [2])])
    expect_error(model.SerializeToString(), twinfer.UnsupportedOpError, match="'m' is a sparse tensor")


def test_ref_attr_name_outside_function():
    node = helper.make_node("Transpose", ["x"], ["y"], name="tr")
    a = node.attribute.add()
    a.name, a.type, a.ref_attr_name = "perm", onnx.AttributeProto.INTS, "p"
    model = model_of([node], [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [3, 2])])
    expect_error(model.SerializeToString(), twinfer.ModelFormatError, match="tr.*ref_attr_name")


def test_opsets():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    io = ([vi("x", TensorProto.FLOAT, [1])], [vi("y", TensorProto.FLOAT, [1])])
    # A model may import only other domains (ai.onnx.ml alone, say), but then
    # none of its nodes may be a default-domain one.
    no_default = model_of(nodes, *io, opsets=(("com.x", 1),))
    _core.read_model_info(no_default.SerializeToString(), False)
    with pytest.raises(twinfer.UnsupportedOpError, match="imports no default-domain.*opset"):
        twinfer.backend.prepare(no_default)
    expect_error(model_of(nodes, *io, opsets=(("", 99),)).SerializeToString(), twinfer.UnsupportedOpError,
                 match="opset 99")
    expect_error(b"", twinfer.ModelFormatError, match="no graph")


def test_invalid_utf8_name():
    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="NAME")], [vi("x", TensorProto.FLOAT, [1])],
                     [vi("y", TensorProto.FLOAT, [1])])
    data = model.SerializeToString().replace(b"NAME", b"N\xc3\x28E")  # a broken 2-byte sequence
    expect_error(data, twinfer.ModelFormatError, match="NodeProto.name: string is not valid UTF-8")
