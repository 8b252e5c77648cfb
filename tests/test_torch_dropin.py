"""twinfer.torch: the drop-in module and the torch.compile backend, checked
against the PyTorch module itself on fresh random data."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import twinfer  # noqa: E402
import twinfer.torch  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test exports into its own cache folder."""
    monkeypatch.setenv("TWINFER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def seed(rng):
    s = int(rng.integers(0, 2**31))
    torch.manual_seed(s)
    return s


def _close(actual, expected, rtol=1e-4, atol=1e-4):
    assert isinstance(actual, torch.Tensor)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype and actual.device == expected.device
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=rtol, atol=atol)


def _resnet18():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None, num_classes=17).eval()
    # Non-trivial batch-norm statistics, so folding them is really exercised.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return model


def _transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=48, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("make, shape", [(_resnet18, (3, 64, 64)), (_transformer, (7, 32))], ids=["resnet18", "transformer"])
def test_dropin_matches_module_at_other_batch_sizes(make, shape, seed):
    model = make()
    compiled = twinfer.torch.compile(model, torch.randn(2, *shape), progress=False)
    assert isinstance(compiled, torch.nn.Module)
    assert compiled.cache_hit is False and compiled.onnx_path.exists()
    assert compiled.engine.inputs[0].shape[0] == "batch"
    for batch in (1, 3, 5):
        x = torch.randn(batch, *shape)
        with torch.no_grad():
            expected = model(x)
        _close(compiled(x), expected)


def test_structured_inputs_and_outputs(seed):
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(13, 5)
            self.b = torch.nn.Linear(13, 3)

        def forward(self, x, ids):
            h = torch.relu(self.a(x)) + ids.to(torch.float32).sum(dim=1, keepdim=True)
            return {"scores": h, "extra": (self.b(x), h.softmax(-1))}

    model = TwoHeads().eval()
    compiled = twinfer.torch.compile(model, (torch.randn(2, 13), torch.randint(0, 9, (2, 4))), progress=False)
    assert compiled.input_names == ["x", "ids"]
    x, ids = torch.randn(3, 13), torch.randint(0, 9, (3, 4))
    got = compiled(x, ids)
    with torch.no_grad():
        want = model(x, ids)
    assert set(got) == {"scores", "extra"} and isinstance(got["extra"], tuple)
    _close(got["scores"], want["scores"])
    _close(got["extra"][0], want["extra"][0])
    _close(got["extra"][1], want["extra"][1])


def test_static_batch_rejects_other_batch_sizes(seed):
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh()).eval()
    compiled = twinfer.torch.compile(model, torch.randn(2, 6), dynamic_batch=False, progress=False)
    assert compiled.engine.inputs[0].shape == (2, 6)
    x = torch.randn(2, 6)
    with torch.no_grad():
        _close(compiled(x), model(x))
    with pytest.raises(twinfer.Error):
        compiled(torch.randn(3, 6))


def test_dynamo_exporter_option(seed):
    model = torch.nn.Sequential(torch.nn.Linear(11, 9), torch.nn.GELU(), torch.nn.Linear(9, 2)).eval()
    compiled = twinfer.torch.compile(model, torch.randn(2, 11), dynamo=True, progress=False)
    for batch in (1, 4):
        x = torch.randn(batch, 11)
        with torch.no_grad():
            _close(compiled(x), model(x))


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, scale: float = 2.0, shift=None):
        y = self.fc(x) * scale
        return y if shift is None else y + shift


@pytest.mark.parametrize("dynamo", [False, True])
def test_arguments_left_to_their_defaults_keep_them(seed, dynamo):
    # The TorchScript exporter made the default `scale` an extra graph input
    # that no call fed: every call of the compiled module failed.
    model = _Scaled().eval()
    compiled = twinfer.torch.compile(model, torch.randn(2, 4), dynamo=dynamo, progress=False)
    assert [i.name for i in compiled.engine.inputs] == ["x"]
    for batch in (1, 5):
        x = torch.randn(batch, 4)
        with torch.no_grad():
            _close(compiled(x), model(x))


def test_inputs_are_read_in_place_and_outputs_are_fresh(seed):
    model = torch.nn.Linear(5, 5).eval()
    compiled = twinfer.torch.compile(model, torch.randn(2, 5), progress=False)
    x = torch.randn(4, 5)
    y1 = compiled(x)
    y2 = compiled(x)
    assert y1.data_ptr() != y2.data_ptr()  # each call returns its own buffers
    x_t = torch.randn(5, 4).t()  # non-contiguous input: still correct
    with torch.no_grad():
        _close(compiled(x_t), model(x_t))


def test_export_failure_explains_what_to_try():
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    with pytest.raises(twinfer.torch.ExportError) as e:
        twinfer.torch.compile(Spectrum(), torch.randn(2, 8), progress=False)
    msg = str(e.value)
    assert isinstance(e.value, twinfer.Error)
    assert "fft" in msg  # the exporter's own words
    assert "dynamo=True" in msg  # what to try instead


def test_non_tensor_inputs_are_refused_with_advice():
    class Scaled(torch.nn.Module):
        def forward(self, x, factor):
            return x * factor

    with pytest.raises(twinfer.torch.ExportError, match="wrapper"):
        twinfer.torch.compile(Scaled(), (torch.randn(2, 3), 2.0), progress=False)


_CACHE_SCRIPT = textwrap.dedent(
    """
    import sys, torch, twinfer.torch
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(7, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()
    if sys.argv[1] == "forbid-export":
        def refuse(*a, **k):
            raise AssertionError("torch.onnx.export was called")
        torch.onnx.export = refuse
        # Nor may the engine be built from the ONNX file: the cached engine loads.
        real_load = twinfer.load
        def load_saved_only(model, *a, **k):
            assert str(model).endswith(".twinfer"), f"engine built from {model}"
            return real_load(model, *a, **k)
        twinfer.load = load_saved_only
    compiled = twinfer.torch.compile(model, torch.randn(2, 7), progress=False)
    x = torch.randn(5, 7)
    with torch.no_grad():
        err = (compiled(x) - model(x)).abs().max().item()
    print(f"cache_hit={compiled.cache_hit},{compiled.engine_cache_hit} err={err:.2e}")
    """
)


def test_second_process_reuses_the_export_and_the_engine(private_cache, tmp_path):
    script = tmp_path / "compile_once.py"
    script.write_text(_CACHE_SCRIPT)
    env = dict(os.environ, TWINFER_CACHE=str(private_cache))

    def run(mode):
        r = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        line = r.stdout.strip().splitlines()[-1]
        hit, err = line.split()
        return hit, float(err.split("=")[1])

    hit, err = run("allow-export")
    assert hit == "cache_hit=False,False" and err < 1e-4
    hit, err = run("forbid-export")  # exporting or building here would raise
    assert hit == "cache_hit=True,True" and err < 1e-4


def test_weights_change_the_cache_key(seed):
    model = torch.nn.Linear(4, 3).eval()
    first = twinfer.torch.compile(model, torch.randn(2, 4), progress=False)
    again = twinfer.torch.compile(model, torch.randn(2, 4), progress=False)
    assert again.cache_hit and again.onnx_path == first.onnx_path
    with torch.no_grad():
        model.weight.add_(1.0)
    changed = twinfer.torch.compile(model, torch.randn(2, 4), progress=False)
    assert not changed.cache_hit and changed.onnx_path != first.onnx_path
    x = torch.randn(3, 4)
    with torch.no_grad():
        _close(changed(x), model(x))


class _Counter:
    def __init__(self, monkeypatch):
        from twinfer.torch import _bridge

        self.calls = 0
        original = _bridge.TorchRunner.__call__

        def counting(runner, inputs):
            self.calls += 1
            return original(runner, inputs)

        monkeypatch.setattr(_bridge.TorchRunner, "__call__", counting)


def _mlp_bn():
    model = torch.nn.Sequential(
        torch.nn.Linear(9, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model


def test_torch_compile_backend_runs_on_twinfer(seed, monkeypatch):
    torch._dynamo.reset()
    counter = _Counter(monkeypatch)
    model = _mlp_bn()
    fast = torch.compile(model, backend="twinfer")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (2, 3, 5):  # the second size makes Dynamo recompile with a symbolic batch
            x = torch.randn(batch, 9)
            with torch.no_grad():
                _close(fast(x), model(x))
    assert not [w for w in caught if "twinfer backend" in str(w.message)]
    assert counter.calls == 3


def test_torch_compile_backend_falls_back_with_a_warning(seed, monkeypatch):
    torch._dynamo.reset()
    counter = _Counter(monkeypatch)

    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).abs() + 1.0

    model = Spectrum()
    fast = torch.compile(model, backend="twinfer")
    x = torch.randn(3, 8)
    with pytest.warns(RuntimeWarning, match="running this graph eagerly"):
        y = fast(x)
    _close(y, model(x))
    assert counter.calls == 0


def test_value_dependent_code_warns_on_export_and_on_cache_hit(seed):
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # frozen by the TorchScript tracer
                return x * 3
            return x - 1

    with pytest.warns(twinfer.torch.ExportWarning, match=r"if x.sum\(\) > 0") as first:
        compiled = twinfer.torch.compile(Branchy(), torch.ones(2, 3), progress=False)
    assert first[0].filename == __file__  # points at the caller's line
    assert not compiled.cache_hit
    with pytest.warns(twinfer.torch.ExportWarning, match="dynamo=True"):
        again = twinfer.torch.compile(Branchy(), torch.ones(2, 3), progress=False)
    assert again.cache_hit


def test_library_checks_do_not_warn(seed):
    # nn.MultiheadAttention's own input checks raise tracer warnings inside PyTorch: not the user's code.
    with warnings.catch_warnings():
        warnings.simplefilter("error", twinfer.torch.ExportWarning)
        twinfer.torch.compile(_transformer(), torch.randn(2, 5, 32), progress=False)


def test_code_change_changes_the_cache_key_without_source(seed):
    """Classes defined where inspect cannot find their source (REPL, exec) are keyed by their bytecode."""

    def make(factor):
        ns = {"torch": torch}
        exec(f"class Scale(torch.nn.Module):\n    def forward(self, x):\n        return x * {factor}\n", ns)
        return ns["Scale"]()

    x = torch.randn(3, 4)
    two = twinfer.torch.compile(make(2), torch.randn(2, 4), progress=False)
    three = twinfer.torch.compile(make(3), torch.randn(2, 4), progress=False)
    assert not three.cache_hit and three.onnx_path != two.onnx_path
    _close(three(x), x * 3)
    assert twinfer.torch.compile(make(3), torch.randn(2, 4), progress=False).cache_hit


def test_module_key_is_stable_across_processes(tmp_path):
    script = textwrap.dedent(
        """
        import torch
        from twinfer.torch._key import module_key
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 2)
            def forward(self, x):
                return self.fc(x) if x.dtype in {torch.float32, torch.float64} else x
        torch.manual_seed(0)
        print(module_key(Net(), (torch.randn(2, 3),), {"dynamic_batch": True}))
        """
    )
    path = tmp_path / "key.py"
    path.write_text(script)
    keys = set()
    for hash_seed in ("1", "2"):  # set constants must not make the key depend on string hashing
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        r = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        keys.add(r.stdout.strip())
    assert len(keys) == 1


@pytest.mark.skipif(torch.cuda.is_available() and twinfer.cuda_available(), reason="a usable GPU is present")
def test_cuda_device_without_a_gpu_is_a_clear_error():
    with pytest.raises(twinfer.DeviceError, match="device='cpu'"):
        twinfer.torch.compile(torch.nn.Linear(3, 3), torch.randn(2, 3), device="cuda", progress=False)


def test_to_moves_the_engine_and_refuses_a_dtype(seed):
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU()).eval()
    compiled = twinfer.torch.compile(model, torch.randn(2, 5), progress=False)
    engine = compiled.engine
    assert compiled.to("cpu") is compiled and compiled.cpu() is compiled and compiled.engine is engine  # already there
    with pytest.raises(twinfer.InvalidArgumentError, match="precision"):
        compiled.to(torch.float16)
    x = torch.randn(3, 5)
    with torch.no_grad():
        _close(compiled(x), model(x))
    if not (torch.cuda.is_available() and twinfer.cuda_available()):
        with pytest.raises(twinfer.DeviceError, match="device='cpu'"):
            compiled.to("cuda")
        assert compiled.device == torch.device("cpu") and compiled.engine is engine  # unchanged after the refusal


def test_compiled_module_renders_as_html(seed):
    compiled = twinfer.torch.compile(torch.nn.Linear(4, 3).eval(), torch.randn(2, 4), progress=False)
    html = compiled._repr_html_()
    assert "<table" in html and "twinfer.torch.compile(Linear)" in html and "batch" in html
    assert "cache_hit=False" in repr(compiled)


def test_a_device_torch_does_not_know_is_refused_by_name():
    import twinfer.torch as tt

    net = torch.nn.Linear(4, 2)
    with pytest.raises(twinfer.InvalidArgumentError, match="'sim', twinfer's test device, holds no torch tensors"):
        tt.compile(net, (torch.randn(3, 4),), device="sim")
