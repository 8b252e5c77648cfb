"""RNN, GRU and LSTM (csrc/ops/rnn/rnn.cc) against onnxruntime: every
direction, initial states, biases, sequence_lens, layout 1, clip, peepholes,
input_forget, GRU linear_before_reset, non-default activations with
alpha/beta; a torch.nn.LSTM exported to ONNX run in twinfer and onnxruntime;
bad shapes raising twinfer errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import assert_close, run_reference
from op_cases import F32, F64, build, check, expect_error, rand, run

TOL = dict(rtol=1e-4, atol=1e-5)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.fixture
def rng():
    return np.random.default_rng(99)


def rnn_inputs(rng, op, S=5, N=3, I=4, H=6, dirs=1, layout=0, bias=True, lens=None, init=True, peep=False,
               dt=F32):
    G = GATES[op]
    x = rand(rng, (N, S, I) if layout else (S, N, I), dt) * 0.8
    ins = [("X", x), ("W", rand(rng, (dirs, G * H, I), dt) * 0.5), ("R", rand(rng, (dirs, G * H, H), dt) * 0.5),
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
