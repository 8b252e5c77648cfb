"""RNN, GRU and LSTM against onnxruntime: every direction, initial states,
biases, sequence_lens, layout 1, clip, peepholes, input_forget, GRU
linear_before_reset, non-default activations with alpha/beta; a
torch.nn.LSTM exported to ONNX run in twinfer and onnxruntime; bad shapes
raising twinfer errors.

Both CPU kernels: runtime W and R (graph inputs) run the general "cpu loop"
(csrc/ops/rnn/rnn.cc); constant float32 W and R (initializers, as exported
models have) run the oneDNN one (csrc/backends/cpu/onednn_rnn.cc), checked here
on odd sizes (input 13, hidden 29, seq 1 and 37, batch 1 and 3) against
onnxruntime, the ONNX reference evaluator and torch.nn.LSTM / GRU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import assert_close, run_reference
from op_cases import F32, F64, Const, build, check, expect_error, rand, reference, run

TOL = dict(rtol=1e-4, atol=1e-5)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.fixture
def rng():
    return np.random.default_rng(99)


def rnn_inputs(rng, op, S=5, N=3, I=4, H=6, dirs=1, layout=0, bias=True, lens=None, init=True, peep=False,
               dt=F32, r_scale=0.5):
    G = GATES[op]
    x = rand(rng, (N, S, I) if layout else (S, N, I), dt) * 0.8
    ins = [("X", x), ("W", rand(rng, (dirs, G * H, I), dt) * 0.5), ("R", rand(rng, (dirs, G * H, H), dt) * r_scale),
           ("B", rand(rng, (dirs, 2 * G * H), dt) * 0.3 if bias else None),
           ("L", np.asarray(lens, np.int32) if lens is not None else None)]
    st = (N, dirs, H) if layout else (dirs, N, H)
    ins.append(("h0", rand(rng, st, dt) if init else None))
    if op == "LSTM":
        ins.append(("c0", rand(rng, st, dt) if init else None))
        ins.append(("P", rand(rng, (dirs, 3 * H), dt) * 0.5 if peep else None))
    return ins


def outs(op, dt=F32):
    return [dt] * (3 if op == "LSTM" else 2)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_lens_states(rng, op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    ins = rnn_inputs(rng, op, dirs=dirs, lens=[5, 2, 4])
    check(op, ins, {"hidden_size": 6, "direction": direction}, out=outs(op), opset=14, **TOL)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_defaults(rng, op):
    # onnxruntime has no layout-1 kernels: the ONNX reference evaluator instead.
    ins = rnn_inputs(rng, op, layout=1, bias=False, init=False, S=4, N=2, I=3, H=5)
    model, feeds = build(op, ins, {"hidden_size": 5, "layout": 1}, out=outs(op), opset=14)
    got, exp = run(model, feeds), run_reference(model, feeds)
    for g, e in zip(got, exp):
        assert_close(g, e, what=f"{op} layout 1", **TOL)


def test_lstm_peepholes_clip_input_forget(rng):
    ins = rnn_inputs(rng, "LSTM", peep=True, lens=[5, 5, 3])
    check("LSTM", ins, {"hidden_size": 6, "clip": 0.7}, out=outs("LSTM"), opset=14, **TOL)
    check("LSTM", ins, {"hidden_size": 6, "input_forget": 1}, out=outs("LSTM"), opset=14, **TOL)


def test_gru_linear_before_reset_and_activations(rng):
    ins = rnn_inputs(rng, "GRU", dirs=2)
    check("GRU", ins, {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": 1},
          out=outs("GRU"), opset=14, **TOL)
    acts = {"activations": ["HardSigmoid", "LeakyRelu", "Sigmoid", "Tanh"], "activation_alpha": [0.3, 0.2],
            "activation_beta": [0.4]}
    check("GRU", ins, {"hidden_size": 6, "direction": "bidirectional", **acts}, out=outs("GRU"), opset=14, **TOL)


def test_rnn_float64_and_activation(rng):
    ins = rnn_inputs(rng, "RNN")
    check("RNN", ins, {"hidden_size": 6, "activations": ["Relu"]}, out=outs("RNN"), opset=14, **TOL)
    # float64 (no onnxruntime kernel: the reference evaluator).
    ins = rnn_inputs(rng, "RNN", dt=F64)  # the reference evaluator ignores sequence_lens
    model, feeds = build("RNN", ins, {"hidden_size": 6}, out=outs("RNN", F64), opset=14)
    for g, e in zip(run(model, feeds), run_reference(model, feeds)):
        assert_close(g, e, rtol=1e-10, atol=1e-10, what="RNN float64")


def test_errors(rng):
    import twinfer

    ins = rnn_inputs(rng, "LSTM")
    ins[2] = ("R", rand(rng, (1, 24, 5), F32))  # R's last dim is not hidden
    expect_error(*build("LSTM", ins, {"hidden_size": 6}, out=outs("LSTM"), opset=14), "R")
    ins = rnn_inputs(rng, "GRU", lens=[5, 9, 1])
    model, feeds = build("GRU", ins, {"hidden_size": 6}, out=outs("GRU"), opset=14)
    expect_error(model, feeds, "sequence_lens", kind=twinfer.Error)
    ins = rnn_inputs(rng, "RNN")
    expect_error(*build("RNN", ins, {"hidden_size": 6, "direction": "sideways"}, out=outs("RNN"), opset=14),
                 "direction")


def test_torch_lstm_export_matches_onnxruntime(tmp_path):
    torch = pytest.importorskip("torch")
    import onnx
    from onnx_helpers import assert_close, run_ort, run_twinfer

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(input_size=7, hidden_size=9, num_layers=2, batch_first=True,
                                      bidirectional=True)
            self.head = torch.nn.Linear(18, 3)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.head(y)

    net = Net().eval()
    x = torch.randn(2, 11, 7)
    path = tmp_path / "lstm.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
    model = onnx.load(str(path))
    assert any(n.op_type == "LSTM" for n in model.graph.node)
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 11, 7)).astype(np.float32)}
    got = run_twinfer(model, feeds)[0]
    assert_close(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5, what="exported LSTM")
    with torch.no_grad():
        assert_close(got, net(torch.from_numpy(feeds["x"])).numpy(), rtol=1e-4, atol=1e-5, what="vs torch")


# ---- the oneDNN kernel (constant float32 W and R) ---------------------------------------

ONEDNN = "onednn matmuls + vectorised gates"
SMALL = "onednn input projections, recurrent products as loops (small steps) + vectorised gates"


def expected_kernel(op, attrs, feeds):
    """The oneDNN kernel's form: a step's recurrent product of at most 2^17
    multiply-adds (N x H x its columns) at batch 1, 2^15 at larger batches,
    runs as a loop, larger on oneDNN."""
    H = attrs["hidden_size"]
    N = feeds["X"].shape[0 if attrs.get("layout", 0) else 1]
    cols = {"RNN": H, "LSTM": 4 * H, "GRU": 3 * H if attrs.get("linear_before_reset", 0) else 2 * H}[op]
    return SMALL if N * H * cols <= (1 << 17 if N == 1 else 1 << 15) else ONEDNN


def kernel_of(model, feeds):
    import twinfer

    engine = twinfer.load(model, device="cpu", optimize=False)
    (row,) = [r for r in engine.kernel_report({k: v.shape for k, v in feeds.items()}) if r.op in GATES]
    return row.kernel


def const_weights(ins):
    """W, R (and B, P) as initializers: the oneDNN kernel's inputs."""
    return [(k, Const(v) if k in ("W", "R", "B", "P") and v is not None else v) for k, v in ins]


def odd_inputs(rng, op, S=37, N=3, H=29, **kw):
    """Odd sizes (input 13, hidden 29 unless asked); R scaled so that 37
    steps of a plain RNN stay contractive (at R * 0.5 its float32 error, in
    every runtime, grows past the tolerance), by 1 / sqrt(H) for other sizes."""
    return rnn_inputs(rng, op, S=S, N=N, I=13, H=H, r_scale=0.12 * (29 / H) ** 0.5, **kw)


def check_onednn(op, ins, attrs, opset=14, tol=TOL):
    model, feeds = build(op, const_weights(ins), attrs, out=outs(op), opset=opset)
    assert kernel_of(model, feeds) == expected_kernel(op, attrs, feeds)
    got = run(model, feeds)
    for k, (g, e) in enumerate(zip(got, reference(model, feeds))):
        assert_close(g, np.asarray(e), what=f"{op} output {k}", **tol)
    return got


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("S,N", [(1, 1), (37, 1), (1, 3), (37, 3)])
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("H", [29, 191])  # the step's product as a loop; at 191 on oneDNN but for GRU at N = 1
def test_onednn_matches_onnxruntime(rng, op, direction, S, N, init, H):
    dirs = 2 if direction == "bidirectional" else 1
    lens = None if N == 1 else [S, (S + 1) // 2, 1]
    ins = odd_inputs(rng, op, S=S, N=N, H=H, dirs=dirs, lens=lens, init=init, peep=op == "LSTM" and init)
    check_onednn(op, ins, {"hidden_size": H, "direction": direction})


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_onednn_zero_lengths_match_cpu_loop(rng, op):
    # A sequence of length 0: Y zero, Y_h / Y_c its initial state as in the
    # general kernel (the same node with W and R as inputs; onnxruntime gives
    # zero states there, so only its Y is compared).
    ins = odd_inputs(rng, op, S=7, dirs=2, lens=[7, 0, 3], peep=op == "LSTM")
    attrs = {"hidden_size": 29, "direction": "bidirectional"}
    model, feeds = build(op, const_weights(ins), attrs, out=outs(op), opset=14)
    assert kernel_of(model, feeds) == expected_kernel(op, attrs, feeds)
    fast = run(model, feeds)
    assert_close(fast[0], reference(model, feeds)[0], what=f"{op} Y", **TOL)
    model, feeds = build(op, ins, attrs, out=outs(op), opset=14)
    assert kernel_of(model, feeds) == "cpu loop"
    for g, e in zip(fast, run(model, feeds)):
        assert_close(g, e, what=f"{op} vs cpu loop", **TOL)
    assert not fast[0][:, :, 1].any()


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_onednn_layout_1(rng, op):
    # onnxruntime has no layout-1 kernels: the ONNX reference evaluator instead.
    ins = odd_inputs(rng, op, layout=1, dirs=2)
    attrs = {"hidden_size": 29, "layout": 1, "direction": "bidirectional"}
    model, feeds = build(op, const_weights(ins), attrs, out=outs(op), opset=14)
    assert kernel_of(model, feeds) == expected_kernel(op, attrs, feeds)
    for g, e in zip(run(model, feeds), run_reference(model, feeds)):
        assert_close(g, e, what=f"{op} layout 1", **TOL)


def test_onednn_lstm_peepholes_clip_input_forget(rng):
    ins = odd_inputs(rng, "LSTM", peep=True, lens=[37, 20, 3])
    check_onednn("LSTM", ins, {"hidden_size": 29, "clip": 0.7})
    check_onednn("LSTM", ins, {"hidden_size": 29, "input_forget": 1})


@pytest.mark.parametrize("lbr", [0, 1])
def test_onednn_gru_reset_and_activations(rng, lbr):
    ins = odd_inputs(rng, "GRU", dirs=2, lens=[37, 11, 1])
    attrs = {"hidden_size": 29, "direction": "bidirectional", "linear_before_reset": lbr}
    check_onednn("GRU", ins, attrs)
    check_onednn("GRU", ins, {**attrs, "clip": 0.5})
    acts = {"activations": ["HardSigmoid", "LeakyRelu", "Sigmoid", "Tanh"], "activation_alpha": [0.3, 0.2],
            "activation_beta": [0.4]}
    check_onednn("GRU", ins, {**attrs, **acts})


def test_onednn_rnn_activation_and_no_bias(rng):
    ins = odd_inputs(rng, "RNN", bias=False)
    check_onednn("RNN", ins, {"hidden_size": 29, "activations": ["Relu"]})
    check_onednn("RNN", ins, {"hidden_size": 29})


def test_runtime_weights_and_float64_keep_the_cpu_loop(rng):
    ins = rnn_inputs(rng, "LSTM")
    assert kernel_of(*build("LSTM", ins, {"hidden_size": 6}, out=outs("LSTM"), opset=14)) == "cpu loop"
    ins = const_weights(rnn_inputs(rng, "LSTM", dt=F64))
    assert kernel_of(*build("LSTM", ins, {"hidden_size": 6}, out=outs("LSTM", F64), opset=14)) == "cpu loop"


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("N,S", [(1, 37), (3, 1), (3, 37)])
def test_torch_lstm_gru_match(tmp_path, kind, N, S):
    # torch.nn.LSTM / GRU (2 layers, bidirectional, initial states) exported
    # to ONNX: its weights become initializers, so the oneDNN kernel runs.
    torch = pytest.importorskip("torch")
    import onnx
    from onnx_helpers import run_twinfer

    torch.manual_seed(1)
    net = getattr(torch.nn, kind)(input_size=13, hidden_size=29, num_layers=2, bidirectional=True).eval()
    g = np.random.default_rng(7)
    x = g.standard_normal((S, N, 13)).astype(np.float32)
    h0 = g.standard_normal((4, N, 29)).astype(np.float32)
    c0 = g.standard_normal((4, N, 29)).astype(np.float32)
    state = (torch.from_numpy(h0), torch.from_numpy(c0)) if kind == "LSTM" else torch.from_numpy(h0)
    path = tmp_path / "rnn.onnx"
    names = ["x", "h0", "c0"] if kind == "LSTM" else ["x", "h0"]

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = net

        def forward(self, x, *s):
            y, hs = self.rnn(x, (s[0], s[1]) if kind == "LSTM" else s[0])
            return (y, hs[0]) if kind == "LSTM" else (y, hs)

    wrap = Wrap().eval()
    args = (torch.from_numpy(x), *((state if kind == "LSTM" else (state,))))
    torch.onnx.export(wrap, args, str(path), dynamo=False, input_names=names, output_names=["y", "h"],
                      opset_version=17)
    model = onnx.load(str(path))
    feeds = {"x": x, "h0": h0, **({"c0": c0} if kind == "LSTM" else {})}
    import twinfer

    rows = twinfer.load(model, device="cpu").kernel_report({k: v.shape for k, v in feeds.items()})
    form = expected_kernel(kind, {"hidden_size": 29, "linear_before_reset": 1}, {"X": x})  # torch's GRU: lbr
    assert [r.kernel for r in rows if r.op == kind] == [form, form]
    got = run_twinfer(model, feeds)
    with torch.no_grad():
        want = wrap(*args)
    for gv, w, what in zip(got, want, ["y", "h_n"]):
        assert_close(gv, w.numpy(), rtol=1e-4, atol=2e-5, what=f"{kind} {what} vs torch")
