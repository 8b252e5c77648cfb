"""Dynamic dims beyond the batch from PyTorch (issue 15): twinfer.torch.compile's
dynamic_axes (torch.onnx.export's form, keyed by forward's argument names) and
the torch.compile backend when Dynamo marks dims dynamic. One engine must
serve a transformer at every sequence length, checked against the PyTorch
module itself on fresh token ids."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import twinfer  # noqa: E402
import twinfer.torch  # noqa: E402

AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
SIZES = ((1, 5), (3, 17), (2, 40))  # (batch, sequence), none of them the example's


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINFER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def seed(rng):
    s = int(rng.integers(0, 2**31))
    torch.manual_seed(s)
    return s


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=128)
        self.bert = transformers.BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]


def Encoder():
    """A small BERT (Hugging Face's code, random weights) in eval mode (no
    dropout): token ids and mask in, last hidden state out."""
    return _Encoder().eval()


def tokens(batch, seq):
    """Random ids and a mask with the first row padded from the middle on."""
    ids = torch.randint(0, 500, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, max(1, seq // 2):] = 0
    return ids, mask


def _close(got, want):
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_one_engine_serves_every_sequence_length(seed, dynamo):
    model = Encoder()
    ids, mask = tokens(2, 12)
    with warnings.catch_warnings():
        # The probe (compile runs the engine at other lengths) finds nothing frozen.
        warnings.filterwarnings("error", message=".*does not serve other sizes")
        fast = twinfer.torch.compile(model, {"input_ids": ids, "attention_mask": mask}, dynamic_axes=AXES,
                                     dynamo=dynamo, progress=False)
    if not dynamo:  # the TorchScript exporter keeps our names; torch.export names its own
        assert [s.shape for s in fast.engine.inputs] == [("batch", "seq")] * 2
    for batch, seq in SIZES:
        ids, mask = tokens(batch, seq)
        with torch.no_grad():
            want = model(ids, mask)
        _close(fast(input_ids=ids, attention_mask=mask), want)
        _close(fast(ids, mask), want)
    assert fast.engine.stats()["plans_cached"] >= len(SIZES)


def test_list_form_and_output_keys(seed):
    model = Encoder()
    fast = twinfer.torch.compile(model, tokens(2, 9), dynamic_axes={"input_ids": [1], "attention_mask": [1],
                                                                   "output_0": {1: "seq_out"}}, progress=False)
    ids, mask = tokens(2, 4)  # the batch is dynamic by default (dynamic_batch=True) too
    with torch.no_grad():
        _close(fast(ids, mask), model(ids, mask))
    assert fast.dynamic_axes == {"input_ids": {1: "input_ids_dim1"}, "attention_mask": {1: "attention_mask_dim1"},
                                 "output_0": {1: "seq_out"}}


@pytest.mark.parametrize("axes, match", [
    ({"ids": {1: "seq"}}, "not an input of forward"),
    ({"input_ids": {2: "seq"}}, "not a dim of a rank-2 input"),
    ({"input_ids": {1: "a b"}}, "identifier"),
    ({"output_3": {0: "n"}}, "returns 1 tensor"),
])
def test_bad_dynamic_axes_are_refused_with_the_reason(seed, axes, match):
    with pytest.raises(twinfer.InvalidArgumentError, match=match):
        twinfer.torch.compile(Encoder(), tokens(2, 6), dynamic_axes=axes, progress=False)


def test_example_inputs_by_name_must_be_a_leading_run(seed):
    ids, mask = tokens(2, 6)
    with pytest.raises(twinfer.InvalidArgumentError, match="input_ids"):
        twinfer.torch.compile(Encoder(), {"attention_mask": mask}, progress=False)


def test_other_example_lengths_share_the_cached_export(seed):
    model = Encoder()
    first = twinfer.torch.compile(model, tokens(2, 12), dynamic_axes=AXES, progress=False)
    second = twinfer.torch.compile(model, tokens(3, 7), dynamic_axes=AXES, progress=False)
    assert not first.cache_hit and second.cache_hit


def test_a_size_the_tracer_froze_is_reported_at_compile_time(seed):
    """nn.TransformerEncoder traced by the TorchScript exporter keeps the
    example's sequence length in its attention reshapes: compile says so
    (instead of the first run at another length failing)."""
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    x = torch.randn(2, 12, 32)
    with pytest.warns(twinfer.torch.ExportWarning, match="does not serve other sizes"):
        twinfer.torch.compile(model, x, dynamic_axes={"src": {1: "seq"}}, progress=False)


# --- the torch.compile backend ---------------------------------------------------

class _Loads:
    """Counts the engines the backend builds (one per Dynamo graph)."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = twinfer.load

        def counting(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        from twinfer.torch import _backend

        monkeypatch.setattr(_backend.twinfer, "load", counting)


@pytest.mark.parametrize("how", ["mark_dynamic", "dynamic=True"])
def test_torch_compile_backend_with_dynamic_sequence(seed, monkeypatch, how):
    torch._dynamo.reset()
    loads = _Loads(monkeypatch)
    model = Encoder()
    fast = torch.compile(model, backend="twinfer", dynamic=True if how == "dynamic=True" else None)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="twinfer backend")  # no graph may fall back to eager
        # Batches of 2 or more: Dynamo itself specialises a size of 1 (a new graph).
        for batch, seq in ((2, 12), (3, 5), (2, 17), (4, 40)):
            ids, mask = tokens(batch, seq)
            if how == "mark_dynamic":
                for t in (ids, mask):
                    torch._dynamo.mark_dynamic(t, 0)
                    torch._dynamo.mark_dynamic(t, 1)
            with torch.no_grad():
                _close(fast(ids, mask), model(ids, mask))
    assert loads.count == 1  # one engine for all four shapes
