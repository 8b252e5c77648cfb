"""If, Loop and Scan with subgraphs (including reads of outer-scope values and
nesting) against onnxruntime, on fresh random data with odd sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import assert_close, run_ort, run_twinfer

import twinfer


@pytest.fixture(autouse=True, params=["unrolled", "loop_kernel"])
def _loops(request, monkeypatch):
    """Every case twice: counted loops unrolled into the plan
    (graph/passes/unroll_loops.h) and run by the loop kernels, whose bodies
    keep their kernels across iterations (runtime/eval_kernels.h)."""
    if request.param == "loop_kernel":
        monkeypatch.setenv("TWINFER_UNROLL_LOOPS", "0")

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "cf", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def if_model(same_shapes: bool):
    # then: x * w (outer initializer) ; else: same shape (x + y) or a reduced shape (ReduceSum)
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [vi("t", F, None)])
    if same_shapes:
        else_nodes = [helper.make_node("Add", ["x", "y"], ["e"])]
    else:
        else_nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["e"], keepdims=1)]
    else_g = helper.make_graph(else_nodes, "else", [], [vi("e", F, None)])
    nodes = [
        helper.make_node("ReduceMean", ["y"], ["m"], keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["out"], ["z"]),
    ]
    inits = [numpy_helper.from_array(np.float32(0.0), "zero"), numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.linspace(-1, 1, 13, dtype=np.float32), "w")]
    return model(nodes, [vi("x", F, ["N", 13]), vi("y", F, ["N", 13])], [vi("z", F, None)], inits)


@pytest.mark.parametrize("same_shapes", [True, False])
def test_if_matches_onnxruntime(rng, same_shapes, device):
    m = if_model(same_shapes)
    engine = twinfer.load(m.SerializeToString(), device=device)
    for n, sign in [(3, 1), (3, -1), (7, 1), (1, -1)]:  # both branches, several batch sizes
        x = rng.standard_normal((n, 13)).astype(np.float32)
        y = (sign * np.abs(rng.standard_normal((n, 13)))).astype(np.float32)
        got = engine.run({"x": x, "y": y})["z"].numpy()
        assert_close(got, run_ort(m, {"x": x, "y": y})[0], what=f"If n={n} sign={sign}")


def loop_model():
    # carried: acc (N, 5) ; scan output: the running sum of each step ; body reads outer 'scale'
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["fi", "scale"], ["step"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["part"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F, None)],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, None), vi("part", F, None)],
    )
    nodes = [helper.make_node("Loop", ["M", "cond", "x"], ["acc", "parts"], body=body)]
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, 5, dtype=np.float32), "scale")]
    return model(nodes, [vi("M", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("x", F, ["N", 5]),
                         vi("limit", F, [])], [vi("acc", F, None), vi("parts", F, None)], inits)


def test_loop_matches_onnxruntime(rng, device):
    m = loop_model()
    engine = twinfer.load(m.SerializeToString(), device=device)
    for n, trips, limit in [(3, 7, 1e9), (3, 7, 10.0), (2, 0, 1e9), (5, 11, 40.0)]:
        feeds = {"M": np.array(trips, np.int64), "cond": np.array(True), "x": rng.standard_normal((n, 5)).astype(np.float32),
                 "limit": np.array(limit, np.float32)}
        got = [t.numpy() for t in engine.run(feeds).values()]
        want = run_ort(m, feeds)
        if trips == 0:
            # No parts: onnxruntime cannot tell their rank (the body declares
            # "part" without a shape) and gives (0,); twinfer's plan knows
            # each part would be x's shape, (0, n, 5). Empty either way.
            assert got[1].size == want[1].size == 0 and got[1].shape == (0, n, 5)
            got, want = got[:1], want[:1]
        for g, w in zip(got, want):
            assert_close(g, w, what=f"Loop trips={trips} limit={limit}")


@pytest.mark.parametrize("direction,axis", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_scan_matches_onnxruntime(rng, direction, axis):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["y_t"])],
        "body", [vi("s_in", F, [7]), vi("x_t", F, [7])], [vi("s_out", F, [7]), vi("y_t", F, [7])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[axis], scan_input_directions=[direction],
                              scan_output_axes=[axis], scan_output_directions=[direction])]
    xs_shape = [11, 7] if axis == 0 else [7, 11]
    m = model(nodes, [vi("s0", F, [7]), vi("xs", F, xs_shape)], [vi("s", F, None), vi("ys", F, None)])
    feeds = {"s0": rng.standard_normal(7).astype(np.float32), "xs": rng.standard_normal(xs_shape).astype(np.float32)}
    got = run_twinfer(m, feeds)
    for g, w in zip(got, run_ort(m, feeds)):
        assert_close(g, w, what="Scan")


@pytest.mark.parametrize("direction", [0, 1])
@pytest.mark.parametrize("with_lens", [False, True])
def test_scan8_batched_with_sequence_lens_matches_onnxruntime(rng, direction, with_lens):
    # Scan-8: states [batch, ...], scan inputs [batch, seq, ...], one scan per
    # batch item over its own length (here 6, 2 and 1 of 6).
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["y_t"])],
        "body", [vi("s_in", F, [5]), vi("x_t", F, [5])], [vi("s_out", F, [5]), vi("y_t", F, [5])])
    lens = np.array([6, 2, 1], np.int64)
    nodes = [helper.make_node("Scan", ["lens" if with_lens else "", "s0", "xs"], ["s", "ys"], body=body,
                              num_scan_inputs=1, directions=[direction])]
    inputs = [vi("s0", F, [3, 5]), vi("xs", F, [3, 6, 5])] + ([vi("lens", TensorProto.INT64, [3])] if with_lens else [])
    m = model(nodes, inputs, [vi("s", F, None), vi("ys", F, None)], opset=8)
    m.ir_version = 4
    feeds = {"s0": rng.standard_normal((3, 5)).astype(np.float32),
             "xs": rng.standard_normal((3, 6, 5)).astype(np.float32)}
    if with_lens:
        feeds["lens"] = lens
    got, want = run_twinfer(m, feeds), run_ort(m, feeds)
    assert_close(got[0], want[0], what="Scan-8 final states")
    assert got[1].shape == want[1].shape == (3, 6, 5)
    n = lens if with_lens else [6, 6, 6]
    for b in range(3):  # past an item's length the spec leaves values undefined; ours are zeros
        assert_close(got[1][b, :n[b]], want[1][b, :n[b]], what=f"Scan-8 outputs of item {b}")
        assert not got[1][b, n[b]:].any()
    if with_lens:
        bad = dict(feeds, lens=np.array([6, 7, 1], np.int64))
        with pytest.raises(twinfer.InvalidArgumentError, match=r"sequence_lens\[1\] is 7, outside 0..6"):
            run_twinfer(m, bad)


def test_if_nested_in_loop_reads_outer_values(rng):
    inner_then = helper.make_graph([helper.make_node("Add", ["v", "bias"], ["r"])], "t", [], [vi("r", F, None)])
    inner_else = helper.make_graph([helper.make_node("Sub", ["v", "bias"], ["r2"])], "e", [], [vi("r2", F, None)])
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["par"]),
            helper.make_node("Equal", ["par", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["v_out"], then_branch=inner_then, else_branch=inner_else),
        ],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", F, None)],
        [vi("c", TensorProto.BOOL, []), vi("v_out", F, None)])
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)]
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(0, np.int64), "zero")]
    m = model(nodes, [vi("M", TensorProto.INT64, []), vi("x", F, [3, 4]), vi("bias", F, [4])], [vi("y", F, None)], inits)
    feeds = {"M": np.array(5, np.int64), "x": rng.standard_normal((3, 4)).astype(np.float32),
             "bias": rng.standard_normal(4).astype(np.float32)}
    assert_close(run_twinfer(m, feeds)[0], run_ort(m, feeds)[0], what="nested If in Loop")


def test_subgraph_reading_an_undefined_name_is_a_model_error():
    then_g = helper.make_graph([helper.make_node("Identity", ["nowhere"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    m = model([helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TensorProto.BOOL, []), vi("x", F, [2])], [vi("z", F, None)])
    with pytest.raises(twinfer.ModelFormatError, match="nowhere"):
        twinfer.load(m.SerializeToString(), device="cpu")


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_loop_of_zero_trips_keeps_its_scan_outputs_rank(device):
    # The body's part is x * i, declared ["N", "K"] (symbolic): zero trips
    # stacked to a rank-1 [0], and a Transpose of the rank-3 output failed.
    # onnxruntime gives (0, 0, 0); the parts would have had x's shape, which
    # the plan knows, so twinfer gives (0, N, K) -- empty either way, rank 3.
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "fi"], ["y"]),
         helper.make_node("Identity", ["c"], ["c2"])], "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, [])],
        [vi("c2", TensorProto.BOOL, []), vi("y", TensorProto.FLOAT, ["N", "K"])])
    g = helper.make_graph([helper.make_node("Loop", ["M", ""], ["ys"], body=body),
                           helper.make_node("Transpose", ["ys"], ["z"], perm=[1, 0, 2])], "g",
                          [vi("M", TensorProto.INT64, []), vi("x", TensorProto.FLOAT, ["N", "K"])],
                          [vi("ys", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    engine = twinfer.load(m, device=device)
    x = np.random.default_rng(5).standard_normal((2, 5)).astype(np.float32)
    for trips in (0, 3):
        feeds = {"M": np.array(trips, np.int64), "x": x}
        want_ys, want_z = run_ort(m, feeds)
        out = engine.run(feeds)
        ys, z = out["ys"].numpy(), out["z"].numpy()
        if trips:
            np.testing.assert_allclose(ys, want_ys, rtol=1e-6)
            np.testing.assert_allclose(z, want_z, rtol=1e-6)
        else:
            assert want_ys.ndim == ys.ndim == 3 and ys.size == want_ys.size == 0
            assert ys.shape == (0, 2, 5) and z.shape == (2, 0, 5)


@pytest.mark.parametrize("declared", [None, ["K"], [3]])
def test_a_scan_over_length_zero_keeps_its_outputs_shape(declared):
    # The body's part declared without a shape or symbolically: the run
    # stacked zero parts to [0] and then failed against the planned [0, 3].
    # (onnxruntime and the reference evaluator refuse a length-0 Scan; each
    # part would be [3], the state's shape, so ys is (0, 3) and s is s0.)
    vi = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Tanh", ["s_out"], ["y_t"])], "body",
                             [vi("s_in", TensorProto.FLOAT, [3]), vi("x_t", TensorProto.FLOAT, declared)],
                             [vi("s_out", TensorProto.FLOAT, [3]), vi("y_t", TensorProto.FLOAT, declared)])
    g = helper.make_graph([helper.make_node("Scan", ["s0", "X"], ["s", "ys"], body=body, num_scan_inputs=1,
                                            scan_output_axes=[-1])], "g",
                          [vi("s0", TensorProto.FLOAT, [3]), vi("X", TensorProto.FLOAT, ["L", 3])],
                          [vi("s", TensorProto.FLOAT, None), vi("ys", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    m.ir_version = 8
    engine = twinfer.load(m, device="cpu")
    s0 = np.random.default_rng(2).standard_normal(3).astype(np.float32)
    out = engine.run({"s0": s0, "X": np.zeros((0, 3), np.float32)})
    np.testing.assert_array_equal(out["s"].numpy(), s0)
    assert out["ys"].numpy().shape == (3, 0)  # scan_output_axes=-1: the length last
    # A non-empty run on the same engine still matches onnxruntime.
    X = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    want = run_ort(m, {"s0": s0, "X": X})
    got = engine.run({"s0": s0, "X": X})
    np.testing.assert_allclose(got["s"].numpy(), want[0], rtol=1e-5)
    np.testing.assert_allclose(got["ys"].numpy(), want[1], rtol=1e-5)
