"""RNN, GRU and LSTM on the device (csrc/backends/cuda/recurrent.cu) against a
float64 NumPy reference written here from the ONNX definitions (itself checked
against the ONNX reference evaluator where that one applies: it ignores
sequence_lens), on fresh random data with odd sizes (seq 5, batch 3, input 7,
hidden 9): forward, reverse, bidirectional; layout 0 and 1; with and without
B, sequence_lens (including 0 and full lengths), initial_h / initial_c, LSTM
peepholes; clip, input_forget, GRU linear_before_reset, activations with
alpha/beta; float32, float64, float16; Y, Y_h, Y_c.

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: the CUDA kernel's supports() takes
them) and run by the CPU kernel, which shares its node checks and per-element
math with the CUDA kernel (csrc/ops/rnn/rnn_spec.h, rnn_math.h); on a GPU the
CUDA kernel itself runs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_on_device

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]

S, N, I, H = 5, 3, 7, 9
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
ONNX_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
TOL = {np.float32: 2e-5, np.float64: 1e-12, np.float16: 1e-2}


# ---- the reference --------------------------------------------------------------------

def act(name, x, alpha, beta):
    n = name.lower()
    if n == "relu":
        return np.maximum(x, 0)
    if n == "tanh":
        return np.tanh(x)
    if n == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if n == "affine":
        return alpha * x + beta
    if n == "leakyrelu":
        return np.where(x >= 0, x, alpha * x)
    if n == "thresholdedrelu":
        return np.where(x > alpha, x, 0)
    if n == "scaledtanh":
        return alpha * np.tanh(beta * x)
    if n == "hardsigmoid":
        return np.clip(alpha * x + beta, 0, 1)
    if n == "elu":
        return np.where(x >= 0, x, alpha * (np.exp(x) - 1))
    if n == "softsign":
        return x / (1 + np.abs(x))
    if n == "softplus":
        return np.log1p(np.exp(x))
    raise ValueError(name)


def reference(op, x, W, R, B=None, lens=None, h0=None, c0=None, P=None, direction="forward", layout=0, clip=None,
              acts=None, lbr=0, input_forget=0):
    """(Y, Y_h, Y_c) in float64. acts: [(name, alpha, beta)] for every direction."""
    f64 = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    x, W, R, B, h0, c0, P = map(f64, (x, W, R, B, h0, c0, P))
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    s, n, _ = x.shape
    dirs, hs = W.shape[0], R.shape[2]
    per = len(DEFAULT_ACTS[op])
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)  # noqa: E731
    Y = np.zeros((s, dirs, n, hs))
    YH = np.zeros((dirs, n, hs))
    YC = np.zeros((dirs, n, hs))
    for d in range(dirs):
        rev = direction == "reverse" or d == 1
        fs = [lambda v, a=a: act(a[0], v, a[1], a[2]) for a in acts[d * per:(d + 1) * per]]
        Wb = B[d, :GATES[op] * hs] if B is not None else np.zeros(GATES[op] * hs)
        Rb = B[d, GATES[op] * hs:] if B is not None else np.zeros(GATES[op] * hs)
        for b in range(n):
            L = int(lens[b]) if lens is not None else s
            h = h0[d, b].copy() if h0 is not None else np.zeros(hs)
            c = c0[d, b].copy() if c0 is not None else np.zeros(hs)
            for step in range(L):
                t = L - 1 - step if rev else step
                xw = W[d] @ x[t, b] + Wb
                if op == "RNN":
                    h = fs[0](cl(xw + R[d] @ h + Rb))
                elif op == "GRU":
                    sl = [slice(k * hs, (k + 1) * hs) for k in range(3)]
                    rh = R[d] @ h + Rb
                    z = fs[0](cl(xw[sl[0]] + rh[sl[0]]))
                    r = fs[0](cl(xw[sl[1]] + rh[sl[1]]))
                    if lbr:
                        hh = fs[1](cl(xw[sl[2]] + r * (R[d][sl[2]] @ h + Rb[sl[2]])))
                    else:
                        hh = fs[1](cl(xw[sl[2]] + R[d][sl[2]] @ (r * h) + Rb[sl[2]]))
                    h = (1 - z) * hh + z * h
                else:
                    sl = [slice(k * hs, (k + 1) * hs) for k in range(4)]  # i, o, f, c
                    pi, po, pf = (P[d, :hs], P[d, hs:2 * hs], P[d, 2 * hs:]) if P is not None else (0, 0, 0)
                    pre = xw + R[d] @ h + Rb
                    i = fs[0](cl(pre[sl[0]] + pi * c))
                    f = 1 - i if input_forget else fs[0](cl(pre[sl[2]] + pf * c))
                    c = f * c + i * fs[1](cl(pre[sl[3]]))
                    o = fs[0](cl(pre[sl[1]] + po * c))
                    h = o * fs[2](c)
                Y[t, d, b] = h
            YH[d, b], YC[d, b] = h, c
    if layout:
        Y, YH, YC = Y.transpose(2, 0, 1, 3), YH.transpose(1, 0, 2), YC.transpose(1, 0, 2)
    return Y, YH, YC


# ---- models and data --------------------------------------------------------------------

def make_case(rng, op, direction, layout, bias, lens, init, peep, dt, hs=H):
    G, dirs = GATES[op], 2 if direction == "bidirectional" else 1
    r = lambda shape, scale: (rng.standard_normal(shape) * scale).astype(dt)  # noqa: E731
    st = (N, dirs, hs) if layout else (dirs, N, hs)
    feeds = {"X": r((N, S, I) if layout else (S, N, I), 0.8), "W": r((dirs, G * hs, I), 0.4),
             "R": r((dirs, G * hs, hs), 0.4)}
    if bias:
        feeds["B"] = r((dirs, 2 * G * hs), 0.3)
    if lens:
        feeds["L"] = np.array([S, 0, 3][:N] + [S] * max(0, N - 3), np.int32) if lens == "varied" else \
            rng.integers(1, S + 1, size=N).astype(np.int32)
    if init:
        feeds["H0"] = r(st, 0.5)
        if op == "LSTM":
            feeds["C0"] = r(st, 0.5)
    if peep and op == "LSTM":
        feeds["P"] = r((dirs, 3 * hs), 0.3)
    return feeds


def make_model(op, feeds, direction, layout, dt, hs=H, attrs=None, opset=22, consts=()):
    """The node over `feeds`; the names in `consts` become initializers (the
    kernels prepare constant weights when they are built) instead of inputs."""
    names = ["X", "W", "R", "B", "L", "H0", "C0", "P"][:8 if op == "LSTM" else 6]
    ins = [k if k in feeds else "" for k in names]
    while ins and ins[-1] == "":
        ins.pop()
    t = ONNX_T[dt]
    inputs = [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "L" else t, list(feeds[k].shape))
              for k in ins if k and k not in consts]
    inits = [numpy_helper.from_array(feeds[k], k) for k in ins if k and k in consts]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, direction=direction, hidden_size=hs, layout=layout, **(attrs or {}))
    outputs = [helper.make_tensor_value_info(o, t, None) for o in outs]
    m = helper.make_model(helper.make_graph([node], op.lower(), inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run_on(device, model, feeds):
    return run_on_device(model, feeds, device)


def acts_list(op, direction, attrs):
    dirs = 2 if direction == "bidirectional" else 1
    names = attrs.get("activations", DEFAULT_ACTS[op])
    if len(names) == len(DEFAULT_ACTS[op]) and dirs == 2:
        names = names * 2
    al, be = attrs.get("activation_alpha"), attrs.get("activation_beta")
    defaults = {"affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
                "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}
    out = []
    for k, nm in enumerate(names):
        a, b = defaults.get(nm.lower(), (0.0, 0.0))
        out.append((nm, al[k] if al else a, be[k] if be else b))  # the tests give one alpha/beta per activation
    return out


def check_case(device, rng, op, direction, layout, dt=np.float32, bias=True, lens=None, init=True, peep=True,
               attrs=None, outputs=None, consts=()):
    attrs = attrs or {}
    feeds = make_case(rng, op, direction, layout, bias, lens, init, peep, dt)
    m = make_model(op, feeds, direction, layout, dt, attrs=attrs, consts=consts)
    run_feeds = {k: v for k, v in feeds.items() if k not in consts}
    if device == "cpu":
        import twinfer

        got = {k: v.numpy() for k, v in twinfer.load(m, device="cpu").run(run_feeds).items()}
    else:
        got = run_on(device, m, run_feeds)
    want = reference(op, feeds["X"], feeds["W"], feeds["R"], feeds.get("B"), feeds.get("L"), feeds.get("H0"),
                     feeds.get("C0"), feeds.get("P"), direction, layout,
                     None if attrs.get("clip") is None else float(np.float32(attrs["clip"])),  # a float32 attribute
                     acts_list(op, direction, attrs), attrs.get("linear_before_reset", 0),
                     attrs.get("input_forget", 0))
    for name, w in zip(["Y", "Y_h", "Y_c"], want):
        if name not in got:
            continue
        assert got[name].dtype == dt, (name, got[name].dtype)
        assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
        np.testing.assert_allclose(got[name].astype(np.float64), w, rtol=TOL[dt], atol=TOL[dt], err_msg=name)
    if "L" in feeds:  # steps past a sequence's end are exactly zero
        Y = got["Y"] if layout else got["Y"].transpose(2, 0, 1, 3)  # [N, S, dirs, H]
        for b, L in enumerate(feeds["L"]):
            assert not Y[b, L:].any(), (b, L)


# ---- tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_reference_matches_onnx_evaluator(op, direction, rng):
    """The NumPy reference agrees with onnx's ReferenceEvaluator (no sequence_lens, layout 0)."""
    from onnx.reference import ReferenceEvaluator

    feeds = make_case(rng, op, direction, 0, True, None, True, op == "LSTM", np.float64)
    m = make_model(op, feeds, direction, 0, np.float64)
    got = ReferenceEvaluator(m).run(None, feeds)
    want = reference(op, feeds["X"], feeds["W"], feeds["R"], feeds["B"], None, feeds["H0"], feeds.get("C0"),
                     feeds.get("P"), direction, 0, None, acts_list(op, direction, {}))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("opts", ["bare", "bias", "full", "random_lens"])
def test_cells_match_reference(device, op, direction, layout, opts, rng):
    kw = dict(bare=dict(bias=False, lens=None, init=False, peep=False),
              bias=dict(bias=True, lens=None, init=False, peep=False),
              full=dict(bias=True, lens="varied", init=True, peep=True),
              random_lens=dict(bias=False, lens="random", init=True, peep=False))[opts]
    check_case(device, rng, op, direction, layout, **kw)


@pytest.mark.parametrize("device", ["cpu"] + DEVICES)
@pytest.mark.parametrize("op,attrs", [("RNN", {}), ("GRU", {}), ("GRU", dict(linear_before_reset=1)), ("LSTM", {}),
                                      ("LSTM", dict(input_forget=1, clip=0.6))])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_constant_weights(device, op, attrs, direction, dt, rng):
    # W, R, B, P as initializers: the CPU kernel transposes W and R once when
    # it is built (ops/rnn/rnn.cc) and its products read them that way; the
    # answers are the reference's, as with weights fed per run.
    check_case(device, rng, op, direction, 0, dt=dt, lens="varied", attrs=attrs, consts=("W", "R", "B", "P"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dt", [np.float64, np.float16])
def test_other_float_types(device, op, dt, rng):
    check_case(device, rng, op, "bidirectional", 0, dt=dt, lens="varied")
    check_case(device, rng, op, "reverse", 1, dt=dt, lens=None)


ATTR_CASES = {
    "RNN": [dict(clip=0.7), dict(activations=["LeakyRelu"], activation_alpha=[0.3]),
            dict(activations=["ScaledTanh"], activation_alpha=[1.5], activation_beta=[0.7]),
            dict(activations=["Affine"], activation_alpha=[0.5], activation_beta=[0.1]),
            dict(activations=["ThresholdedRelu"], activation_alpha=[0.2]), dict(activations=["Relu"])],
    "GRU": [dict(linear_before_reset=1), dict(clip=0.5, linear_before_reset=1),
            dict(activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3, 0.0],
                 activation_beta=[0.4, 0.0])],
    "LSTM": [dict(input_forget=1), dict(clip=0.6),
             dict(activations=["Sigmoid", "Elu", "Softplus"], activation_alpha=[0.0, 0.8, 0.0],
                  activation_beta=[0.0, 0.0, 0.0])],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,k", [(op, k) for op, cases in ATTR_CASES.items() for k in range(len(cases))])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_attributes(device, op, k, direction, rng):
    attrs = ATTR_CASES[op][k]
    if direction == "bidirectional" and "activations" in attrs:  # one list per direction, alphas too
        attrs = {kk: (v * 2 if isinstance(v, list) else v) for kk, v in attrs.items()}
    check_case(device, rng, op, direction, 1 if k == 1 else 0, lens="varied", attrs=attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_only_some_outputs(device, op, rng):
    """Y_h alone (Y and Y_c not asked for)."""
    feeds = make_case(rng, op, "bidirectional", 0, True, "varied", True, False, np.float32)
    m = make_model(op, feeds, "bidirectional", 0, np.float32)
    node = m.graph.node[0]
    node.output[0] = ""
    if op == "LSTM":
        del node.output[2]
    while len(m.graph.output) > 0:
        m.graph.output.pop()
    m.graph.output.append(helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None))
    got = run_on(device, m, feeds)
    want = reference(op, feeds["X"], feeds["W"], feeds["R"], feeds["B"], feeds["L"], feeds["H0"], feeds.get("C0"),
                     None, "bidirectional", 0, None, acts_list(op, "bidirectional", {}))
    np.testing.assert_allclose(got["Y_h"], want[1], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_sequence_length_out_of_range_raises(device, rng):
    feeds = make_case(rng, "LSTM", "forward", 0, True, "varied", True, False, np.float32)
    feeds["L"] = np.array([S, S + 1, 2], np.int32)
    e = twinfer.load(make_model("LSTM", feeds, "forward", 0, np.float32), device=device, sim_coverage="cuda",
                     allow_cpu_fallback=False)
    with pytest.raises(twinfer.InvalidArgumentError, match="outside|out of range"):
        e.run(feeds)


@pytest.mark.cuda_build
def test_hidden_size_too_large_is_refused(rng):
    """A state that does not fit the kernel's shared memory: no CUDA kernel, with the reason."""
    hs = 1300  # LSTM float32: (6 + 4) * 1300 * 4 bytes > 48 KiB
    feeds = {"X": np.zeros((2, 1, 3), np.float32), "W": np.zeros((1, 4 * hs, 3), np.float32),
             "R": np.zeros((1, 4 * hs, hs), np.float32)}
    m = make_model("LSTM", feeds, "forward", 0, np.float32, hs=hs)
    with pytest.raises(Exception, match="shared memory"):
        twinfer.load(m, device="sim", sim_coverage="cuda", allow_cpu_fallback=False).run(feeds)
