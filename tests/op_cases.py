"""One-node op checks shared by tests/test_ops_tensor.py and tests/test_ops_reduce.py:
build a model with a single node whose inputs are graph inputs (fed at run time)
or initializers (constants, e.g. a Reshape shape), run it in twinfer and in an
independent reference (onnxruntime; the ONNX reference evaluator where
onnxruntime has no kernel for the dtype), and compare."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_helpers import assert_close, make_model, run_ort, run_reference, run_twinfer

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I32, I64, BOOL = np.dtype(np.int32), np.dtype(np.int64), np.dtype(bool)
# The dtypes data-movement ops are checked on: one per byte width family.
MOVE_DTYPES = [F32, I64, BOOL, F16]

ORT_LACKS_KERNEL = (
    ort.capi.onnxruntime_pybind11_state.NotImplemented,
    ort.capi.onnxruntime_pybind11_state.InvalidGraph,
)

NODE = "the_node"


@dataclass
class Const:
    """An input given as an initializer (a constant the shape rules can read)."""

    value: np.ndarray


def rand(rng, shape, dtype):
    """Fresh random data of any dtype (floats normal, ints in [-50, 50))."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -50
        return rng.integers(lo, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def build(op, inputs, attrs=None, out=None, opset=17, sym_inputs=None):
    """A one-node model. inputs: [(name, array | Const | None)]; out: output
    dtypes (None: one output of the first input's dtype); sym_inputs: {name:
    shape with str dims} to declare symbolic input shapes. Returns model, feeds."""
    attrs = attrs or {}
    names, graph_in, inits, feeds = [], [], [], {}
    for name, a in inputs:
        if a is None:
            names.append("")
        elif isinstance(a, Const):
            inits.append(numpy_helper.from_array(np.asarray(a.value), name))
            names.append(name)
        else:
            a = np.asarray(a)
            shape = (sym_inputs or {}).get(name, list(a.shape))
            graph_in.append((name, a.dtype, shape))
            feeds[name] = a
            names.append(name)
    while names and names[-1] == "":
        names.pop()
    if out is None:
        first = next(a for _, a in inputs if a is not None)
        out = [np.asarray(first.value if isinstance(first, Const) else first).dtype]
    outs = [f"y{k}" for k in range(len(out))]
    node = helper.make_node(op, names, outs, name=NODE, **attrs)
    model = make_model([node], graph_in, [(o, np.dtype(d), None) for o, d in zip(outs, out)], inits, opset=opset)
    return model, feeds


def reference(model, feeds):
    try:
        return run_ort(model, feeds)
    except ORT_LACKS_KERNEL:
        return [np.asarray(o) for o in run_reference(model, feeds)]


def run(model, feeds, **opts):
    # optimize=False: a kernel test; no pass may fold or rewrite the node away
    # (shape inference still reads constant inputs).
    opts.setdefault("optimize", False)
    return run_twinfer(model, feeds, **opts)


def check(op, inputs, attrs=None, out=None, opset=17, rtol=0.0, atol=0.0, **opts):
    """Runs the node in twinfer and the reference and compares every output
    (exactly by default: data movement must not change a bit)."""
    model, feeds = build(op, inputs, attrs, out, opset)
    got = run(model, feeds, **opts)
    exp = reference(model, feeds)
    assert len(got) == len(exp)
    for k, (g, e) in enumerate(zip(got, exp)):
        assert_close(g, np.asarray(e), rtol=rtol, atol=atol, what=f"{op} output {k}")
    return got


def expect_error(model, feeds, *words, kind=None):
    """twinfer raises a twinfer.Error (of `kind`) naming the node and op, with `words` in it."""
    import twinfer

    with pytest.raises(kind or twinfer.Error) as e:
        run(model, feeds)
    msg = str(e.value)
    assert NODE in msg, msg
    for w in words:
        assert w in msg, msg
    return e.value


def out_shapes(model, **opts):
    """The output shapes twinfer infers at load (symbols as str, unknown as None)."""
    import twinfer

    opts.setdefault("optimize", False)
    return [tuple(o.shape) for o in twinfer.load(model, device="cpu", **opts).outputs]


def sym_model(op, inputs, attrs=None, out=None, opset=17, **sym):
    """A model whose graph inputs have the symbolic shapes given as keyword args."""
    return build(op, inputs, attrs, out, opset, sym_inputs=sym)[0]


__all__ = ["Const", "rand", "build", "reference", "run", "check", "expect_error", "out_shapes", "sym_model",
           "F16", "F32", "F64", "I32", "I64", "BOOL", "MOVE_DTYPES", "NODE", "onnx"]
