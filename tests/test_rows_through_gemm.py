"""Row transposes moved across the GEMMs beside a fused attention, and the
cases where they must not be (graph/passes/rows_through_gemm.cc, called by
graph/passes/attention_views.cc in device plans).

ViT's attention runs sequence-first: x [B, S, E] is transposed to [S, B, E]
before the in-projection, and the out-projection's [S*B, E] rows are
reshaped to [S, B, E] and transposed back. A Transpose that keeps the last
axis last ("rows only") commutes with a GEMM, so the pass moves it to the
attention's side, where the attention reads / writes it as a strided view
and no copy is left. Checked here, on a hand-built block of that shape:

- where the move is allowed (a Gemm whose C is [N], [1, N] or absent, a
  MatMul + bias, the output transpose's value read elsewhere) every
  Transpose leaves the plan (and they are there with the pass off);
- where it must be refused (C with rows of its own, transA=1, a Transpose
  that moves the last axis, a transposed value read elsewhere or a graph
  output, a com.twinfer::MatMul carrying a residual) the attention is still
  fused, exactly that Transpose stays, and every output equals
  onnxruntime's.

Why each refusal matters is said per test. Where the move before the
out-projection would still type-check, the test also makes that move by
hand in the ONNX model (_as_if_moved, which reproduces the allowed cases
exactly) and checks onnxruntime's answer for it is off by more than 0.1:
a refusal lifted in error would fail the comparison. Where the moved graph
would not type-check, the whole attention_views pass is undone: the other
copies (the heads' transposes, the other row transpose) come back, which
the exact lists of Transposes asserted here catch.

Odd sizes: 5 heads of 8, 7 positions, batch 3 (S != B, so rows really
permute); fresh random weights and inputs each run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA

ort = pytest.importorskip("onnxruntime")

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
B, S, H, D = 3, 7, 5, 8
TOL = 1e-4


def _block(rng, b=B, s=S, h=H, d=D, *, c="n", trans_a=False, in_perm=(1, 0, 2), out_perm=(1, 0, 2),
           graph_outputs=(), second_readers=(), residual_in=False, out_matmul=False, residual_out=False):
    """A ViT attention block, sequence-first inside: x -Transpose(in_perm)-> xt [S, B, E] -MatMul+bias-> qkv
    -> heads -> attention a [B, H, S, D] -> a2 [S*B, E] -Gemm-> y -Reshape-> y3 [S, B, E] -Transpose(out_perm)-> o.
    Every node is named after its output. c: the Gemm's C ("n": [E], "1n": [1, E], "mn": [S*B, E],
    "m1": [S*B, 1], None: none). trans_a: a2 transposed to a2t [E, S*B] and read with transA=1.
    graph_outputs / second_readers: values also made graph outputs / also read by a Sigmoid.
    residual_in: qkv + r_in [S, B, 3E]; out_matmul: the out-projection as MatMul + Add(bias [E]) (C unused),
    with residual_out: + r_out [S*B, E]. Returns (model, feeds)."""
    e, m = h * d, s * b
    sbe = [s, b, e]
    x_shape = [0] * 3
    for k, p in enumerate(in_perm):
        x_shape[p] = sbe[k]
    w = {"w_in": rng.standard_normal((e, 3 * e)) / e**0.5, "b_in": rng.standard_normal(3 * e),
         "w_out": rng.standard_normal((e, e)) / e**0.5, "scale": np.array(d**-0.5)}
    idx = {"iq": np.array(0), "ik": np.array(1), "iv": np.array(2), "s5": np.array([s, b, 3, h, d]),
           "s2": np.array([m, e]), "s3": np.array(sbe)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=list(in_perm)),
             helper.make_node("MatMul", ["xt", "w_in"], ["p"]),
             helper.make_node("Add", ["p", "b_in"], ["qkv0" if residual_in else "qkv"])]
    if residual_in:
        w["r_in"] = rng.standard_normal((s, b, 3 * e))
        nodes.append(helper.make_node("Add", ["qkv0", "r_in"], ["qkv"]))
    nodes += [helper.make_node("Reshape", ["qkv", "s5"], ["qkv5"]),
              helper.make_node("Transpose", ["qkv5"], ["heads"], perm=[2, 1, 3, 0, 4]),  # [3, B, H, S, D]
              *(helper.make_node("Gather", ["heads", "i" + n], [n + "h"], axis=0) for n in "qkv"),
              helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qh", "kt"], ["sc"]),
              helper.make_node("Mul", ["sc", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["pr"], axis=-1),
              helper.make_node("MatMul", ["pr", "vh"], ["a"]),
              helper.make_node("Transpose", ["a"], ["a_sbhd"], perm=[2, 0, 1, 3]),
              helper.make_node("Reshape", ["a_sbhd", "s2"], ["a2"])]
    a = "a2"
    if trans_a:
        nodes.append(helper.make_node("Transpose", ["a2"], ["a2t"], perm=[1, 0]))
        a = "a2t"
    if out_matmul:
        w["w_out_t"] = w.pop("w_out").T.copy()
        w["c"] = rng.standard_normal(e)
        nodes += [helper.make_node("MatMul", [a, "w_out_t"], ["ym"]),
                  helper.make_node("Add", ["ym", "c"], ["y0" if residual_out else "y"])]
        if residual_out:
            w["r_out"] = rng.standard_normal((m, e))
            nodes.append(helper.make_node("Add", ["y0", "r_out"], ["y"]))
    else:
        ins = [a, "w_out"]
        if c is not None:
            w["c"] = rng.standard_normal({"n": (e,), "1n": (1, e), "mn": (m, e), "m1": (m, 1)}[c])
            ins.append("c")
        nodes.append(helper.make_node("Gemm", ins, ["y"], transA=int(trans_a), transB=1))
    nodes += [helper.make_node("Reshape", ["y", "s3"], ["y3"]),
              helper.make_node("Transpose", ["y3"], ["o"], perm=list(out_perm))]
    outputs = ["o", *graph_outputs]
    for v in second_readers:
        nodes.append(helper.make_node("Sigmoid", [v], [v + "_read"]))
        outputs.append(v + "_read")
    for n in nodes:
        n.name = n.output[0]
    w = {k: v.astype(np.float32) for k, v in w.items()}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    inits += [numpy_helper.from_array(v.astype(np.int64), k) for k, v in idx.items()]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "rows_through_gemm", [helper.make_tensor_value_info("x", f, x_shape)],
                          [helper.make_tensor_value_info(o, f, None) for o in outputs], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def _ort(model, feeds, names=None):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(names, feeds)


def _transposes(model, feeds, device):
    """Loads `model` for the device, checks every output against onnxruntime and that the attention was
    fused; returns (names of the Transpose nodes left in the plan, ops of the plan)."""
    e = twinfer.load(model, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = e.kernel_report({n: a.shape for n, a in feeds.items()})
    assert all(r.backend in (e.device.split(":")[0], "sim") for r in rows), rows
    ops = [r.op for r in rows]
    assert ops.count("com.twinfer::Attention") == 1, ops
    got = e.run(feeds)
    for out, want in zip(model.graph.output, _ort(model, feeds)):
        np.testing.assert_allclose(got[out.name].numpy(), want, rtol=TOL, atol=TOL, err_msg=out.name)
    return [r.node for r in rows if r.op == "Transpose"], ops


def _as_if_moved(model, b=B, s=S, e=H * D):
    """`model` rewritten by hand as transpose_rows_before_gemm rewrites it, refusals lifted: the
    projection's input A (a2, or a2t with transA) -Reshape-> [S, B, A's columns] -Transpose(o's perm)->
    -Reshape-> A's shape -> the projection -> Reshape to o's shape, in place of y3 and o's Transpose."""
    nodes = {n.output[0]: n for n in model.graph.node}
    perm = list(helper.get_attribute_value(nodes["o"].attribute[0]))
    a = "a2t" if "a2t" in nodes else "a2"
    a_shape = [e, s * b] if a == "a2t" else [s * b, e]
    ys = [s, b, e]
    shapes = {"rows_in": ys[:-1] + [a_shape[1]], "a_shape": a_shape, "o_shape": [ys[p] for p in perm]}
    rewritten = []
    for n in model.graph.node:
        if n.output[0] in ("y3", "o"):
            continue
        n = helper.make_node(n.op_type, list(n.input), list(n.output), name=n.name, domain=n.domain,
                             **{at.name: helper.get_attribute_value(at) for at in n.attribute})
        if n.output[0] in ("y", "ym") and n.input[0] == a:
            n.input[0] = "gemm_in"
        rewritten.append(n)
        if n.output[0] == a:
            rewritten += [helper.make_node("Reshape", [a, "rows_in"], ["split"]),
                          helper.make_node("Transpose", ["split"], ["moved"], perm=perm),
                          helper.make_node("Reshape", ["moved", "a_shape"], ["gemm_in"])]
    rewritten.append(helper.make_node("Reshape", ["y", "o_shape"], ["o"]))
    inits = list(model.graph.initializer) + [numpy_helper.from_array(np.array(v, np.int64), k)
                                             for k, v in shapes.items()]
    g = helper.make_graph(rewritten, "moved", list(model.graph.input), [model.graph.output[0]], inits)
    moved = helper.make_model(g, opset_imports=list(model.opset_import))
    moved.ir_version = model.ir_version
    return moved


def _move_error(model, feeds, **sizes):
    """How far o would be off had the output transpose been moved before the projection."""
    (right,) = _ort(model, feeds, ["o"])
    (moved,) = _ort(_as_if_moved(model, **sizes), feeds, ["o"])
    return float(np.abs(moved - right).max())


# Allowed: the positive controls.

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["c_vector", "c_one_row", "no_c", "matmul_bias", "output_read_twice"])
def test_row_transposes_move_and_leave_the_plan(device, case, rng, monkeypatch):
    # A C of [N] / [1, N] (or none, or a MatMul's [N] bias) is the same for
    # every row, so the rows may be permuted before the GEMM instead of
    # after: the hand-made move gives o exactly. The input's Transpose moves
    # after the in-projection likewise. o, the output transpose's value, may
    # have more readers: the Reshape that replaces the Transpose writes o
    # itself. Both transposes (and the heads' copies) then become the
    # attention's views: none is left.
    kw = {"c_vector": {}, "c_one_row": {"c": "1n"}, "no_c": {"c": None}, "matmul_bias": {"out_matmul": True},
          "output_read_twice": {"second_readers": ("o",)}}[case]
    model, feeds = _block(rng, **kw)
    assert _move_error(model, feeds) <= TOL  # the hand-made move is the pass's, where it is allowed
    monkeypatch.setenv("TWINFER_ATTENTION_VIEWS", "0")
    off, _ = _transposes(model, feeds, device)
    assert "xt" in off and "o" in off, off  # the row transposes, there with the pass off
    monkeypatch.setenv("TWINFER_ATTENTION_VIEWS", "1")
    on, _ = _transposes(model, feeds, device)
    assert on == [], on


# Refused before the out-projection (transpose_rows_before_gemm). Where the
# move would still type-check, _move_error shows how wrong o would be.

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", ["mn", "m1"])
def test_c_with_rows_of_its_own_keeps_the_output_transpose(device, c, rng):
    # C [S*B, E] or [S*B, 1]: C's row r belongs to the GEMM's row r, in
    # [S, B] order. Moved, the GEMM's rows come in [B, S] order: output
    # (b, s) would get C's row b*S + s instead of its own, s*B + b. The
    # input side still moves.
    model, feeds = _block(rng, c=c)
    assert _move_error(model, feeds) > 0.1
    tps, _ = _transposes(model, feeds, device)
    assert tps == ["o"], tps


@pytest.mark.parametrize("device", DEVICES)
def test_trans_a_keeps_the_output_transpose(device, rng):
    # transA=1: A is [K, M] (the attention output transposed, [E, S*B]); the
    # GEMM's rows are A's columns, so splitting A's first axis into [S, B]
    # rows and permuting them permutes the contraction axis instead. Sizes
    # with E == S*B (5 heads of 7, 7 positions, batch 5) make that move
    # shape-valid: wrong numbers, not a type error. The attention output
    # keeps its own copy here (a_sbhd: the view through a2t has a strided
    # head dim), which is not this pass's doing.
    sizes = {"b": 5, "s": 7, "e": 35}
    model, feeds = _block(rng, b=5, s=7, h=5, d=7, trans_a=True)
    assert _move_error(model, feeds, **sizes) > 0.1
    tps, _ = _transposes(model, feeds, device)
    assert [t for t in tps if t != "a_sbhd"] == ["a2t", "o"], tps


@pytest.mark.parametrize("device", DEVICES)
def test_a_transpose_moving_the_last_axis_stays_after_the_projection(device, rng):
    # y3 [S, B, E] -> o [B, E, S] (perm [1, 2, 0]): no row perm. Moved, the
    # perm would be applied to the attention output's [S, B, E] and the
    # result read as the GEMM's [S*B, E] rows: rows mixing the features of
    # different positions.
    model, feeds = _block(rng, out_perm=(1, 2, 0))
    assert _move_error(model, feeds) > 0.1
    tps, _ = _transposes(model, feeds, device)
    assert tps == ["o"], tps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value, how", [("y", "graph_outputs"), ("y", "second_readers"),
                                        ("y3", "graph_outputs"), ("y3", "second_readers")])
def test_projection_outputs_read_elsewhere_keep_the_output_transpose(device, value, how, rng):
    # The move erases the Gemm and the Reshape after it and computes their
    # rows in [B, S] order: y ([S*B, E]) or y3 ([S, B, E]) would be left with
    # no producer for its other reader / as a graph output, or, were it
    # rewired to the moved GEMM, read in the wrong row order. Their values
    # are checked against onnxruntime too.
    model, feeds = _block(rng, **{how: (value,)})
    tps, _ = _transposes(model, feeds, device)
    assert tps == ["o"], tps


@pytest.mark.parametrize("device", DEVICES)
def test_a_residual_in_the_projection_keeps_the_output_transpose(device, rng):
    # Out-projection MatMul + bias + r_out [S*B, E]: fuse_residual makes it
    # one com.twinfer::MatMul with 4 inputs (no Add is left). r_out's rows
    # are in [S, B] order, like C's above: moved, output (b, s) would get
    # r_out's row b*S + s.
    model, feeds = _block(rng, out_matmul=True, residual_out=True)
    assert _move_error(model, feeds) > 0.1
    tps, ops = _transposes(model, feeds, device)
    assert "Add" not in ops, ops  # the residual is in the MatMul: the 4-input refusal is the one met
    assert tps == ["o"], tps


# Refused after the in-projection (transpose_rows_after_gemm).

@pytest.mark.parametrize("device", DEVICES)
def test_a_transpose_moving_the_last_axis_stays_before_the_projection(device, rng):
    # x [B, E, S] -> xt [S, B, E] (perm [2, 0, 1]): the MatMul contracts xt's
    # last axis, E; moved, it would contract x's, S (7 against the weight's
    # 40 rows: the moved graph would not type-check, the pass would be
    # undone and the heads' copies would come back).
    model, feeds = _block(rng, in_perm=(2, 0, 1))
    tps, _ = _transposes(model, feeds, device)
    assert tps == ["xt"], tps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["graph_outputs", "second_readers"])
def test_an_input_transpose_read_elsewhere_stays(device, how, rng):
    # The move erases the Transpose: xt, a graph output or read by another
    # node, would be left with no producer (or, read from the moved side,
    # in [B, S] order). xt's own value is checked against onnxruntime.
    model, feeds = _block(rng, **{how: ("xt",)})
    tps, _ = _transposes(model, feeds, device)
    assert tps == ["xt"], tps


@pytest.mark.parametrize("device", DEVICES)
def test_a_residual_in_the_in_projection_keeps_the_input_transpose(device, rng):
    # In-projection MatMul + bias + r_in [S, B, 3E]: one com.twinfer::MatMul
    # with 4 inputs. Moved, the MatMul would read x in [B, S] order and add
    # r_in, in [S, B] order, to it: the wrong rows (here not even the same
    # shape, 3 x 7 against 7 x 3).
    model, feeds = _block(rng, residual_in=True)
    tps, ops = _transposes(model, feeds, device)
    assert "Add" not in ops, ops
    assert tps == ["xt"], tps
