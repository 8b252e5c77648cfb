"""Engine behaviour: IO description, plan cache across shapes, threads,
and clear errors for bad feeds and unsupported ops."""

import threading

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import twinfer
from onnx_helpers import run_ort


def _attention_like(rng, hidden=24):
    """x[batch, seq, hidden] -> softmax(x W x^T) x : MatMul, Transpose, Softmax, Add."""
    w = rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.2
    b = rng.standard_normal(hidden).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["q"]),
        helper.make_node("Add", ["q", "b"], ["qb"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["qb", "xt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "attn",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", "seq", hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def model(rng):
    return _attention_like(rng)


def test_io_specs_keep_symbolic_dims(model):
    e = twinfer.load(model, device="cpu")
    assert e.inputs == [twinfer.TensorSpec("x", "float32", ("batch", "seq", 24))]
    assert e.outputs[0].name == "y" and e.outputs[0].dtype == "float32"
    assert e.outputs[0].shape == ("batch", "seq", 24)


def test_shape_changes_reuse_cached_plans(model, rng):
    e = twinfer.load(model, device="cpu")
    for batch, seq in [(1, 16), (7, 16), (1, 16), (1, 129), (7, 16)]:
        x = rng.standard_normal((batch, seq, 24)).astype(np.float32)
        (expected,) = run_ort(model, {"x": x})
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-5)
    s = e.stats()
    assert s["plan_misses"] == 3  # (1,16), (7,16), (1,129)
    assert s["plan_hits"] == 2


def test_shape_ranges_build_plans_at_load_and_bound_runs(model, rng):
    e = twinfer.load(model, device="cpu", shape_ranges={"x": [(1, 8, 24), (8, 160, 24)]})
    assert e.stats()["plan_misses"] == 2  # min and max planned at load
    x = rng.standard_normal((8, 160, 24)).astype(np.float32)
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert e.stats()["plan_hits"] == 1
    with pytest.raises(twinfer.ShapeError, match="outside the declared range"):
        e.run({"x": rng.standard_normal((9, 16, 24)).astype(np.float32)})
    with pytest.raises(twinfer.ShapeError, match="outside the declared range"):
        e(rng.standard_normal((1, 4, 24)).astype(np.float32))
    with pytest.raises(twinfer.InvalidArgumentError, match="does not fit"):
        twinfer.load(model, device="cpu", shape_ranges={"x": [(1, 8, 24), (8, 160, 25)]})
    with pytest.raises(twinfer.InvalidArgumentError, match="unknown input"):
        twinfer.load(model, device="cpu", shape_ranges={"nope": [(1,), (2,)]})


def test_profile_ops_times_every_step(model, rng):
    e = twinfer.load(model, device="cpu")
    x = rng.standard_normal((3, 17, 24)).astype(np.float32)
    prof = e.profile_ops({"x": x}, iterations=4, warmup=1)
    kernels = e.kernel_report([[3, 17, 24]])
    assert [s.node for s in prof.steps] == [k[0] or "<unnamed>" for k in kernels]
    assert all(s.ms_per_run > 0 for s in prof.steps) and not prof.eager
    assert sum(n for _, n in prof.by_op_type().values()) == len(prof.steps)
    assert "ms/run" in str(prof) and "<table" in prof._repr_html_()


def test_one_engine_eight_threads(model, rng):
    e = twinfer.load(model, device="cpu", num_threads=1)
    inputs = [rng.standard_normal((1 + i % 3, 5 + i, 24)).astype(np.float32) for i in range(16)]
    expected = [e.run({"x": x})["y"].numpy().copy() for x in inputs]  # single-threaded reference
    results = [None] * len(inputs)
    errors = []

    def worker(k):
        try:
            for rep in range(5):
                for i in range(k, len(inputs), 8):
                    results[i] = e.run({"x": inputs[i]})["y"].numpy()
                    np.testing.assert_array_equal(results[i], expected[i])
        except Exception as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, x in enumerate(inputs):
        (ref,) = run_ort(model, {"x": x})
        np.testing.assert_allclose(results[i], ref, rtol=1e-4, atol=1e-5)


def test_explicit_context(model, rng):
    e = twinfer.load(model, device="cpu")
    ctx = e.create_context(num_threads=1)
    x = rng.standard_normal((2, 9, 24)).astype(np.float32)
    (expected,) = run_ort(model, {"x": x})
    np.testing.assert_allclose(e.run({"x": x}, context=ctx)["y"].numpy(), expected, rtol=1e-4, atol=1e-5)
    assert ctx.arena_bytes > 0 and ctx.num_threads == 1


def test_bad_feeds_raise_clear_errors(model, rng):
    e = twinfer.load(model, device="cpu")
    x = rng.standard_normal((2, 9, 24)).astype(np.float32)
    with pytest.raises(twinfer.InvalidArgumentError, match="missing input"):
        e.run({})
    with pytest.raises(twinfer.InvalidArgumentError, match="unknown input"):
        e.run({"x": x, "nope": x})
    with pytest.raises(twinfer.DTypeError, match="'x' expects float32, got float64"):
        e.run({"x": x.astype(np.float64)})
    with pytest.raises(twinfer.ShapeError, match="rank 3"):
        e.run({"x": x[0]})
    with pytest.raises(twinfer.ShapeError, match="dim 2"):
        e.run({"x": x[:, :, :5].copy()})
    with pytest.raises(twinfer.InvalidArgumentError):
        e(x, x)
    # The engine is still fine after failed calls.
    (expected,) = run_ort(model, {"x": x})
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_every_unsupported_op_is_listed_at_load():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NoSuchOp", ["a"], ["b"], name="first_bad"),
        helper.make_node("AnotherMissingOp", ["b"], ["c"], name="second_bad"),
        helper.make_node("NoSuchOp", ["c"], ["y"], name="third_bad"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(twinfer.UnsupportedOpError) as info:
        twinfer.load(model, device="cpu")
    msg = str(info.value)
    for name in ("NoSuchOp", "AnotherMissingOp", "first_bad", "second_bad", "third_bad"):
        assert name in msg


def test_unsupported_opset_is_refused():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    with pytest.raises(twinfer.UnsupportedOpError, match="opset 99"):
        twinfer.load(model, device="cpu")


def test_loading_options_and_sources(model, tmp_path, rng):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = rng.standard_normal((1, 4, 24)).astype(np.float32)
    (expected,) = run_ort(model, {"x": x})
    for source in (str(path), path, path.read_bytes(), model):
        out = twinfer.load(source, device="cpu").run({"x": x})["y"].numpy()
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    unoptimized = twinfer.load(model, device="cpu", optimize=False)
    np.testing.assert_allclose(unoptimized.run({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(twinfer.InvalidArgumentError, match="unknown option"):
        twinfer.load(model, device="cpu", bogus=1)
    with pytest.raises(twinfer.InvalidArgumentError, match="unknown device"):
        twinfer.load(model, device="tpu")
    with pytest.raises(twinfer.InvalidArgumentError, match="precision"):
        twinfer.load(model, device="cpu", precision="fp8")
    with pytest.raises(twinfer.InvalidArgumentError, match="not found"):
        twinfer.load(tmp_path / "missing.onnx")


def test_max_cached_plans_bounds_the_plan_cache(model, tmp_path, rng):
    # Five sequence lengths with room for three plans: the least recently
    # used go, a kept one is a hit, a dropped one is planned again; the
    # answers are onnxruntime's throughout. A saved engine takes the option.
    # (The lengths come in no progression: none is planned ahead.)
    e = twinfer.load(model, device="cpu", max_cached_plans=3)
    assert e._core.options["max_cached_plans"] == 3
    xs = {s: rng.standard_normal((1, s, 24)).astype(np.float32) for s in (3, 5, 4, 7, 6)}
    for s, x in xs.items():
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    st = e.stats()
    assert (st["plans_cached"], st["plan_misses"], st["plan_hits"]) == (3, 5, 0), st
    e.run({"x": xs[6]})  # kept
    e.run({"x": xs[3]})  # dropped: planned again
    st = e.stats()
    assert (st["plans_cached"], st["plan_misses"], st["plan_hits"]) == (3, 6, 1), st
    path = tmp_path / "m.twinfer"
    e.save(path)
    assert twinfer.load(path, device="cpu", max_cached_plans=2)._core.options["max_cached_plans"] == 2
    with pytest.raises(twinfer.InvalidArgumentError, match="max_cached_plans"):
        twinfer.load(model, device="cpu", max_cached_plans=0)


def _views_model(nodes):
    """x [2, 6] -> nodes -> y [2, 6], with the shapes s34 = [3, 4] and s26 = [2, 6]."""
    i64 = onnx.TensorProto.INT64
    g = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 6])],
                          [helper.make_tensor("s34", i64, [2], [3, 4]), helper.make_tensor("s26", i64, [2], [2, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_reshapes_share_their_input_block(rng, device):
    # a = Relu(x); b = Reshape(a) is a view of a's block, kept while a is read
    # last (by the final Add); c = Neg(b) must land elsewhere. y = c' * a + a with
    # c' = Reshape(c) is -a^2 + a: an overlap of c with a would change it.
    m = _views_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "s34"], ["b"]),
                      helper.make_node("Neg", ["b"], ["c"]), helper.make_node("Reshape", ["c", "s26"], ["d"]),
                      helper.make_node("Mul", ["d", "a"], ["e"]), helper.make_node("Add", ["e", "a"], ["y"])])
    e = twinfer.load(m, device=device)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    a = np.maximum(x, 0)
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), -a * a + a, rtol=1e-6)
    np.testing.assert_allclose(run_ort(m, {"x": x})[0], -a * a + a, rtol=1e-6)
    # A chain of views of a, read again at the end: one block in the arena,
    # where a, b and c were alive at once without views (three).
    m = _views_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "s34"], ["b"]),
                      helper.make_node("Reshape", ["b", "s26"], ["c"]), helper.make_node("Reshape", ["c", "s34"], ["d"]),
                      helper.make_node("Reshape", ["d", "s26"], ["f"]), helper.make_node("Add", ["f", "a"], ["y"])])
    e = twinfer.load(m, device=device)
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), 2 * a, rtol=1e-6)
    report = e.memory_report()
    if device == "sim":  # the device arena also holds the input's and the output's slot
        assert report["device_arena_bytes"] == (1 + 2) * 256, report
    else:
        assert report["arena_bytes"] == 64, report


def test_plans_for_new_shapes_reuse_the_kernels_that_did_not_change(rng):
    # A plan per input shape: the Gemm on the fixed-size input is the same
    # kernel in every plan (runtime/kernel_cache.h), the MatMul on the
    # growing one is built for each shape. Answers against NumPy each time.
    w = rng.standard_normal((8, 16)).astype(np.float32)
    g_w = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"], name="grows"),
         helper.make_node("Gemm", ["z", "gw"], ["b"], name="fixed", transB=1),
         helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, "n", 8]),
              helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("ya", onnx.TensorProto.FLOAT, None),
         helper.make_tensor_value_info("yb", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(g_w, "gw")])
    e = twinfer.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
    for n in (3, 5, 7, 5):
        x = rng.standard_normal((1, n, 8)).astype(np.float32)
        z = rng.standard_normal((2, 8)).astype(np.float32)
        out = e.run({"x": x, "z": z})
        np.testing.assert_allclose(out["ya"].numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["yb"].numpy(), np.maximum(z @ g_w.T, 0), rtol=1e-5, atol=1e-5)
    s = e.stats()
    # Three plans; the second and third reuse the Gemm (fused with its Relu).
    assert s["plan_misses"] == 3 and s["kernels_reused"] >= 2, s


def _decoder_attention(heads=3, head=8):
    """q[b, h, 1, d] against a growing past k, v[b, h, p, d]: softmax(q k^T) v,
    plus a runtime B without batch (x[b, s, d] @ k2[d, n]) whose rows and
    columns both change, and a broadcast batch (q[1, h, 1, d] @ kt[b, h, d, p])."""
    f = onnx.TensorProto.FLOAT
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="mix"),
        helper.make_node("MatMul", ["x", "k2"], ["z"], name="flat"),
        helper.make_node("MatMul", ["q1", "kt"], ["w"], name="broadcast"),
    ]
    graph = helper.make_graph(
        nodes, "dec",
        [helper.make_tensor_value_info("q", f, [2, heads, 1, head]),
         helper.make_tensor_value_info("k", f, [2, heads, "past", head]),
         helper.make_tensor_value_info("v", f, [2, heads, "past", head]),
         helper.make_tensor_value_info("x", f, [2, "s", head]),
         helper.make_tensor_value_info("k2", f, [head, "n"]),
         helper.make_tensor_value_info("q1", f, [1, heads, 1, head])],
        [helper.make_tensor_value_info(n, f, None) for n in ("y", "z", "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_matmuls_whose_sizes_grow_share_one_kernel_for_any_size(rng, device):
    # A decoder's attention products change size with the past every step:
    # from a node's second size on, its plans share one kernel that takes any
    # matrix sizes (oneDNN matmul with runtime dims, runtime/kernel_cache.h).
    # Every step's answer against NumPy, past lengths up and down, odd sizes.
    e = twinfer.load(_decoder_attention(), device=device, plan_ahead=False)
    for past, s, n in ((1, 1, 1), (5, 3, 7), (6, 2, 9), (17, 5, 4), (2, 1, 13), (33, 7, 1)):
        q = rng.standard_normal((2, 3, 1, 8)).astype(np.float32)
        k = rng.standard_normal((2, 3, past, 8)).astype(np.float32)
        v = rng.standard_normal((2, 3, past, 8)).astype(np.float32)
        x = rng.standard_normal((2, s, 8)).astype(np.float32)
        k2 = rng.standard_normal((8, n)).astype(np.float32)
        q1 = rng.standard_normal((1, 3, 1, 8)).astype(np.float32)
        out = e.run({"q": q, "k": k, "v": v, "x": x, "k2": k2, "q1": q1})
        sc = q.astype(np.float64) @ k.transpose(0, 1, 3, 2)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(out["y"].numpy(), p @ v, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["z"].numpy(), x.astype(np.float64) @ k2, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["w"].numpy(), q1.astype(np.float64) @ k.transpose(0, 1, 3, 2),
                                   rtol=1e-5, atol=1e-5)
    s = e.stats()
    # One each for scores, mix, flat and broadcast, built at their second size.
    assert s["kernels_any_size"] == 4, s


def test_any_size_kernels_can_be_switched_off(rng, monkeypatch):
    monkeypatch.setenv("TWINFER_ANY_SIZE_KERNELS", "0")
    e = twinfer.load(_decoder_attention(), device="cpu", plan_ahead=False)
    for past in (3, 4, 5):
        feeds = {"q": rng.standard_normal((2, 3, 1, 8)).astype(np.float32),
                 "k": rng.standard_normal((2, 3, past, 8)).astype(np.float32),
                 "v": rng.standard_normal((2, 3, past, 8)).astype(np.float32),
                 "x": rng.standard_normal((2, 2, 8)).astype(np.float32),
                 "k2": rng.standard_normal((8, 5)).astype(np.float32),
                 "q1": rng.standard_normal((1, 3, 1, 8)).astype(np.float32)}
        out = e.run(feeds)
        np.testing.assert_allclose(out["z"].numpy(), feeds["x"] @ feeds["k2"], rtol=1e-5, atol=1e-5)
    assert e.stats()["kernels_any_size"] == 0
