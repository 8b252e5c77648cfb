"""Elementwise chains as one op in device plans (csrc/graph/passes/fuse_elementwise.cc,
com.twinfer::FusedElementwise in csrc/ops/elementwise/fused_chain.*, the CUDA
kernel in csrc/backends/cuda/fused_chain.cu).

Each model runs on the simulated device (placing nodes as the CPU would, and as
CUDA would where the build has the CUDA backend) and on a GPU where there is one,
against onnxruntime (or NumPy) on fresh random data at odd sizes and broadcasts.
The kernel report says what was fused, so a pass that silently did nothing, or
fused across a value someone else reads, fails."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA, rel_err
from onnx_helpers import make_model, run_ort

FUSED = "com.twinfer::FusedElementwise"
DEVICES = [
    pytest.param(("sim", "all"), id="sim"),
    pytest.param(("sim", "cuda"), marks=pytest.mark.cuda_build, id="sim-as-cuda"),
    pytest.param(("cuda", None), marks=pytest.mark.cuda, id="cuda"),
]


def _load(model, where, **kw):
    device, coverage = where
    if coverage:
        kw["sim_coverage"] = coverage
    return twinfer.load(model, device=device, allow_cpu_fallback=False, **kw)


def _fused_rows(engine, feeds):
    return [r for r in engine.kernel_report({k: v.shape for k, v in feeds.items()}) if r.op == FUSED]


def _check(model, feeds, where, precision="fp32", chains=None):
    """Runs the model, compares every output with onnxruntime, returns the fused rows."""
    e = _load(model, where, precision=precision)
    out = e.run(feeds)
    want = run_ort(model, feeds)
    tol = 1e-5 if precision == "fp32" else 3e-3
    for o, w in zip(model.graph.output, want):
        got = out[o.name].numpy()
        assert got.dtype == w.dtype and got.shape == w.shape, o.name
        assert rel_err(got, w) < tol, (o.name, rel_err(got, w))
    rows = _fused_rows(e, feeds)
    if chains is not None:
        assert sorted(r.kernel.split("(", 1)[1].rstrip(")") for r in rows) == sorted(chains), rows
    for r in rows:
        assert r.backend == where[0], r
        if where[0] == "cuda":
            assert r.kernel.startswith("cuda fused elementwise ("), r
    return rows


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


# ---- a detector head's box decoding: one chain, three broadcasts -------------


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_box_decoding_is_one_kernel(where, precision, rng):
    # xy = (sigmoid(t) * 2 - 0.5 + grid) * stride, as YOLO-style heads decode.
    n, a, h, w = 2, 3, 7, 9
    nodes = [
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("Mul", ["s", "two"], ["s2"]),
        helper.make_node("Sub", ["s2", "half"], ["c"]),
        helper.make_node("Add", ["c", "grid"], ["g"]),
        helper.make_node("Mul", ["g", "stride"], ["xy"]),
    ]
    inits = [_const("two", 2.0), _const("half", 0.5),
             _const("grid", rng.integers(0, 9, (1, 1, h, w))), _const("stride", [[[8.0]], [[16.0]], [[32.0]]])]
    m = make_model(nodes, [("t", np.float32, [n, a, h, w])], [("xy", np.float32, [n, a, h, w])], inits)
    feeds = {"t": rng.standard_normal((n, a, h, w)).astype(np.float32)}
    _check(m, feeds, where, precision, chains=["Sigmoid, Mul, Sub, Add, Mul"])


# ---- LayerNorm as older exporters write it: the tail after the reductions ----


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_decomposed_layernorm_tail_is_one_kernel(where, precision, rng):
    b, s, d = 3, 5, 37
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["dev"]),  # read by Pow and Div: stays on its own
        helper.make_node("Pow", ["dev", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["dev", "std"], ["norm"]),
        helper.make_node("Mul", ["norm", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    inits = [_const("two", 2.0), _const("eps", 1e-5), _const("gamma", rng.uniform(0.5, 1.5, d)),
             _const("beta", rng.standard_normal(d))]
    m = make_model(nodes, [("x", np.float32, [b, s, d])], [("y", np.float32, [b, s, d])], inits)
    feeds = {"x": (rng.standard_normal((b, s, d)) * 2 + 0.3).astype(np.float32)}
    _check(m, feeds, where, precision, chains=["Add, Sqrt, Div, Mul, Add"])


# ---- activations with attributes and the two-operand ops ----------------------


@pytest.mark.parametrize("where", DEVICES)
def test_activations_with_attributes(where, rng):
    cols = 33
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a1"], alpha=0.2),
        helper.make_node("Clip", ["a1", "lo", "hi"], ["a2"]),
        helper.make_node("Mul", ["a2", "x2"], ["a3"]),
        helper.make_node("HardSigmoid", ["a3"], ["a4"], alpha=0.3, beta=0.4),
        helper.make_node("Selu", ["a4"], ["a5"], alpha=1.5, gamma=1.1),
        helper.make_node("Elu", ["a5"], ["a6"], alpha=0.7),
        helper.make_node("Sub", ["a6", "x2"], ["a7"]),
        helper.make_node("PRelu", ["a7", "slope"], ["a8"]),
        helper.make_node("Celu", ["a8"], ["a9"], alpha=0.9),
        helper.make_node("ThresholdedRelu", ["a9"], ["a10"], alpha=-0.2),
        helper.make_node("Max", ["a10", "x3"], ["a11"]),
        helper.make_node("Min", ["a11", "x2"], ["a12"]),
        helper.make_node("HardSwish", ["a12"], ["a13"]),
        helper.make_node("Mish", ["a13"], ["y"]),
    ]
    inits = [_const("lo", -1.5), _const("hi", 2.0), _const("slope", rng.uniform(0.05, 0.3, cols))]
    m = make_model(nodes, [("x", np.float32, [4, cols]), ("x2", np.float32, [4, 1]), ("x3", np.float32, [cols])],
                   [("y", np.float32, [4, cols])], inits, opset=18)
    feeds = {"x": (rng.standard_normal((4, cols)) * 2).astype(np.float32),
             "x2": rng.standard_normal((4, 1)).astype(np.float32),
             "x3": rng.standard_normal(cols).astype(np.float32)}
    _check(m, feeds, where, chains=["LeakyRelu, Clip, Mul, HardSigmoid, Selu, Elu, Sub, PRelu, Celu, "
                                    "ThresholdedRelu, Max, Min, HardSwish, Mish"])


@pytest.mark.parametrize("where", DEVICES)
def test_math_ops(where, rng):
    nodes = [
        helper.make_node("Abs", ["x"], ["b1"]),
        helper.make_node("Add", ["b1", "one"], ["b2"]),
        helper.make_node("Log", ["b2"], ["b3"]),
        helper.make_node("Sqrt", ["b3"], ["b4"]),
        helper.make_node("Reciprocal", ["b2"], ["b5"]),  # b2 read twice, both inside
        helper.make_node("Pow", ["b4", "b5"], ["b6"]),
        helper.make_node("Exp", ["b6"], ["b7"]),
        helper.make_node("Neg", ["b7"], ["b8"]),
        helper.make_node("Tanh", ["b8"], ["b9"]),
        helper.make_node("Erf", ["b9"], ["b10"]),
        helper.make_node("Softplus", ["b10"], ["b11"]),
        helper.make_node("Softsign", ["b11"], ["b12"]),
        helper.make_node("Sin", ["b12"], ["b13"]),
        helper.make_node("Cos", ["b13"], ["b14"]),
        helper.make_node("Mul", ["b14", "x"], ["b15"]),
        helper.make_node("Floor", ["b15"], ["y"]),
    ]
    m = make_model(nodes, [("x", np.float32, [5, 1, 23])], [("y", np.float32, [5, 1, 23])], [_const("one", 1.0)])
    # Floor: values kept away from integers so float rounding cannot flip it.
    feeds = {"x": (rng.integers(-40, 40, (5, 1, 23)) + rng.uniform(0.3, 0.7, (5, 1, 23))).astype(np.float32)}
    rows = _check(m, feeds, where)
    assert len(rows) == 1 and rows[0].kernel.count(",") == 15, rows  # all 16 ops


# ---- where groups end ----------------------------------------------------------


@pytest.mark.parametrize("where", DEVICES)
def test_a_value_read_outside_ends_the_chain(where, rng):
    # y1 is a graph output and z reads it: {Add, Relu} and {Mul, Sigmoid} are
    # two chains; t feeds both Exp chains and an output of its own.
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y1"]),
        helper.make_node("Mul", ["y1", "three"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["z"]),
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Exp", ["t"], ["e"]),
        helper.make_node("Add", ["e", "t"], ["w"]),
    ]
    m = make_model(nodes, [("x", np.float32, [6, 10]), ("b", np.float32, [10])],
                   [("y1", np.float32, [6, 10]), ("z", np.float32, [6, 10]), ("w", np.float32, [6, 10]),
                    ("t", np.float32, [6, 10])], [_const("three", 3.0)])
    feeds = {"x": rng.standard_normal((6, 10)).astype(np.float32), "b": rng.standard_normal(10).astype(np.float32)}
    _check(m, feeds, where, chains=["Add, Relu", "Mul, Sigmoid", "Exp, Add"])


@pytest.mark.parametrize("where", DEVICES)
def test_long_and_wide_chains_are_split(where, rng):
    # 20 ops (more than one kernel's 16 steps) and an Add of 11 inputs (more
    # than its 8): several fused nodes, the same answer.
    nodes, prev = [], "x"
    for k in range(10):
        nodes.append(helper.make_node("Tanh", [prev], [f"t{k}"]))
        nodes.append(helper.make_node("Mul", [f"t{k}", "k"], [f"m{k}"]))
        prev = f"m{k}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    for k in range(10):
        nodes.append(helper.make_node("Add", ["s%d" % (k - 1) if k else "i0", f"i{k + 1}"], [f"s{k}"]))
    ins = [("x", np.float32, [3, 17])] + [(f"i{k}", np.float32, [3, 17] if k % 2 else [17]) for k in range(11)]
    m = make_model(nodes, ins, [("y", np.float32, [3, 17]), ("s9", np.float32, [3, 17])], [_const("k", 1.7)])
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, _, shape in ins}
    rows = _check(m, feeds, where)
    steps = sorted(r.kernel.count(",") + 1 for r in rows)
    assert sum(steps) == 30 and max(steps) <= 16 and len(rows) >= 3, rows


@pytest.mark.parametrize("where", DEVICES)
def test_integers_and_mixed_dtypes_stay_unfused(where, rng):
    nodes = [
        helper.make_node("Add", ["i", "j"], ["a"]),
        helper.make_node("Mul", ["a", "j"], ["yi"]),
        helper.make_node("Cast", ["yi"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["c", "x"], ["yf"]),
    ]
    m = make_model(nodes, [("i", np.int32, [4, 5]), ("j", np.int32, [5]), ("x", np.float32, [4, 5])],
                   [("yi", np.int32, [4, 5]), ("yf", np.float32, [4, 5])])
    feeds = {"i": rng.integers(-9, 9, (4, 5)).astype(np.int32), "j": rng.integers(-9, 9, 5).astype(np.int32),
             "x": rng.standard_normal((4, 5)).astype(np.float32)}
    _check(m, feeds, where, chains=[])


def test_the_switch_turns_it_off(monkeypatch, rng):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    m = make_model(nodes, [("x", np.float32, [3, 8])], [("y", np.float32, [3, 8])])
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    assert len(_check(m, feeds, ("sim", "all"), chains=["Sigmoid, Mul"])) == 1
    monkeypatch.setenv("TWINFER_FUSE_ELEMENTWISE", "0")
    assert _check(m, feeds, ("sim", "all")) == []
    # CPU plans never fuse (their single-op kernels are vectorised already).
    monkeypatch.delenv("TWINFER_FUSE_ELEMENTWISE")
    e = twinfer.load(m, device="cpu")
    assert _fused_rows(e, feeds) == []


# ---- the op itself, as a model may carry it ----------------------------------


def _fused_model(ops, args, params, shapes, out_shape, dtype=TensorProto.FLOAT):
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("FusedElementwise", names, ["y"], domain="com.twinfer", name="chain")
    node.attribute.extend([helper.make_attribute("ops", ops, attr_type=onnx.AttributeProto.STRINGS),
                           helper.make_attribute("args", args, attr_type=onnx.AttributeProto.INTS),
                           helper.make_attribute("params", [float(p) for p in params],
                                                 attr_type=onnx.AttributeProto.FLOATS)])
    g = helper.make_graph([node], "f", [helper.make_tensor_value_info(n, dtype, s) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("y", dtype, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.twinfer", 1)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("device", ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_broadcasts_past_eight_dims_against_numpy(device, rng):
    # Alternating broadcasts leave 10 dims that cannot merge: past the device
    # index math's 8, the CPU kernel walks the full shapes (the CUDA kernel
    # refuses it and the node runs on the host).
    a_shape = [2, 1, 3, 1, 2, 1, 3, 1, 2, 1]
    b_shape = [1, 2, 1, 3, 1, 2, 1, 3, 1, 2]
    c_shape = [2, 1, 3, 1, 2]
    out = [2, 2, 3, 3, 2, 2, 3, 3, 2, 2]
    # y = tanh(a * b + c) - a
    m = _fused_model(["Mul", "Add", "Tanh", "Sub"], [0, 1, 3, 2, 4, -1, 5, 0], [0.0] * 8,
                     [a_shape, b_shape, c_shape], out)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in (a_shape, b_shape, c_shape))
    got = twinfer.load(m, device=device).run({"x0": a, "x1": b, "x2": c})["y"].numpy()
    want = np.tanh(a * b + c) - a
    assert got.shape == tuple(out) and rel_err(got, want) < 1e-6


@pytest.mark.parametrize("device", ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_sixteen_bit_inputs_are_computed_in_float(device, dtype, rng):
    # y = sigmoid(x0) * x1 + x0 with [7, 1, 5] against [6, 1]: one rounding at the end.
    m = _fused_model(["Sigmoid", "Mul", "Add"], [0, -1, 2, 1, 3, 0], [0.0] * 6, [[7, 1, 5], [6, 1]], [7, 6, 5], dtype)
    x0 = rng.standard_normal((7, 1, 5)).astype(np.float32)
    x1 = rng.standard_normal((6, 1)).astype(np.float32)
    if dtype == TensorProto.FLOAT16:
        feeds = {"x0": x0.astype(np.float16), "x1": x1.astype(np.float16)}
    else:
        import ml_dtypes

        feeds = {"x0": x0.astype(ml_dtypes.bfloat16), "x1": x1.astype(ml_dtypes.bfloat16)}
    a, b = (v.astype(np.float32) for v in feeds.values())
    want = (1 / (1 + np.exp(-a))) * b + a
    got = np.asarray(twinfer.load(m, device=device).run(feeds)["y"].numpy()).astype(np.float32)
    assert rel_err(got, want) < (1e-3 if dtype == TensorProto.FLOAT16 else 8e-3)


@pytest.mark.parametrize("ops,args,params,what", [
    (["Frobnicate"], [0, -1], [0, 0], "unknown op 'Frobnicate'"),
    (["Add"], [0, -1], [0, 0], "wrong second operand"),
    (["Relu"], [0, 0], [0, 0], "wrong second operand"),
    (["Relu"], [1, -1], [0, 0], "reads register 1"),
    (["Relu", "Exp"], [0, -1, 2, -1], [0, 0, 0, 0], "reads register 2"),
    (["Relu"], [0, -1], [0], "two entries per op"),
    ([], [], [], "1 to 16 ops"),
    (["Relu"] * 17, sum(([k, -1] for k in range(17)), []), [0.0] * 34, "1 to 16 ops"),
])
def test_a_bad_program_is_a_clear_error(ops, args, params, what):
    m = _fused_model(ops, args, params, [[3]], [3])
    with pytest.raises(twinfer.ModelFormatError, match=what) as info:
        twinfer.load(m, device="cpu").run({"x0": np.ones(3, np.float32)})
    assert "chain" in str(info.value)  # names the node


def test_wrong_dtypes_are_a_clear_error():
    m = _fused_model(["Relu"], [0, -1], [0, 0], [[3]], [3], TensorProto.INT32)
    with pytest.raises(twinfer.DTypeError, match="FusedElementwise takes float32"):
        twinfer.load(m, device="cpu").run({"x0": np.ones(3, np.int32)})
