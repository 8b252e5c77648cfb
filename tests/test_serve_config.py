"""Model repositories: config.pbtxt read into Triton's ModelConfig, every
error naming the model and the field, broken models not stopping the others,
version policies, reloads, and int8 / fp16 precision choices. In-process
(ModelRepository), no server."""

from __future__ import annotations

import numpy as np
import pytest

import twinfer
from serve_repo import MLP_CONFIG, add_model, mlp_model, pair_model
from twinfer.serve.errors import InvalidRequest, ModelLoadError, NotFound, Unavailable
from twinfer.serve.repository import ModelRepository

# (config.pbtxt body after the name line, what the error must name)
BROKEN = {
    "syntax": ('max_batch_size: "eight"', "config.pbtxt: 2:"),
    "unknown_field": ("max_batch: 8", "max_batch"),
    "platform": ('platform: "tensorrt_plan"', "platform: 'tensorrt_plan' is not served"),
    "backend": ('backend: "python"', "backend: 'python'"),
    "dims": ('max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]', "input 'x'.dims"),
    "data_type_missing": ('max_batch_size: 8\ninput [ { name: "x" dims: [ 4 ] } ]', "input 'x'.data_type: missing"),
    "data_type_wrong": ('max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_INT64 dims: [ 4 ] } ]',
                        "input 'x'.data_type: TYPE_INT64"),
    "unknown_input": ('max_batch_size: 8\ninput [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]',
                      "input 'z': the model has no input"),
    "unknown_output": ('max_batch_size: 8\noutput [ { name: "z" data_type: TYPE_FP32 dims: [ 3 ] } ]',
                       "output 'z': the model has no output"),
    "preferred": ("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }",
                  "dynamic_batching.preferred_batch_size: [8] outside 1..max_batch_size (4)"),
    "dynamic_no_batch": ("dynamic_batching { }", "dynamic_batching: needs max_batch_size > 0"),
    "sequence": ("max_batch_size: 8\nsequence_batching { }", "sequence_batching"),
    "fp16": ('parameters { key: "precision" value: { string_value: "fp16" } }',
             "parameters.precision: precision 'fp16' is not supported"),
    "int8_no_calibration": ('parameters { key: "precision" value: { string_value: "int8" } }',
                            "parameters.calibration: precision int8 needs a calibration file"),
    "bad_precision": ('parameters { key: "precision" value: { string_value: "fp8" } }', "parameters.precision"),
    "specific_missing": ("version_policy: { specific: { versions: [ 1, 7 ] } }",
                         "version_policy.specific.versions: no folder for version(s) [7]"),
    "kind_model": ("instance_group [ { kind: KIND_MODEL } ]", "instance_group[0].kind: KIND_MODEL"),
    "name": ('name: "other"', "name: 'other' differs from the model's folder name"),
}


def _repo(tmp_path, rng, **kw):
    return ModelRepository(tmp_path, control_mode="explicit", **kw)


def test_broken_configs_name_model_and_field_and_others_load(tmp_path, rng):
    model = mlp_model(rng)
    for name, (body, _) in BROKEN.items():
        header = "" if body.startswith("name:") else f'name: "{name}"\n'
        add_model(tmp_path, name, header + body + "\n", {1: model})
    add_model(tmp_path, "good", MLP_CONFIG.format(name="good"), {1: model})
    add_model(tmp_path, "no_version", MLP_CONFIG.format(name="no_version"), {})
    add_model(tmp_path, "garbage", MLP_CONFIG.format(name="garbage"), {1: b"not an ONNX file"})
    repo = _repo(tmp_path, rng)
    repo.load_startup_models(["*"])
    reasons = {row["name"]: row["reason"] for row in repo.index() if row["state"] != "READY"}
    for name, (_, expected) in BROKEN.items():
        assert reasons[name].startswith(f"model {name!r}"), reasons[name]
        assert expected in reasons[name], (name, reasons[name])
    assert "no version folder" in reasons["no_version"]
    assert reasons["garbage"].startswith("model 'garbage' version 1: model.onnx on cpu: ModelFormatError")
    assert [r["name"] for r in repo.index(ready_only=True)] == ["good"]
    x = rng.standard_normal((2, 4)).astype(np.float32)
    want = twinfer.load(tmp_path / "good" / "1" / "model.onnx", device="cpu").run({"x": x})["y"].numpy()
    np.testing.assert_allclose(repo.get("good").batcher.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)
    with pytest.raises(Unavailable, match="model 'fp16' is not ready: model 'fp16': parameters.precision"):
        repo.get("fp16")
    with pytest.raises(NotFound, match="unknown model 'nope'"):
        repo.get("nope")
    repo.close()


def test_kind_gpu_without_a_gpu(tmp_path, rng):
    add_model(tmp_path, "gpu", MLP_CONFIG.format(name="gpu") + "instance_group [ { kind: KIND_GPU } ]\n",
              {1: mlp_model(rng)})
    repo = _repo(tmp_path, rng, gpu_device="cuda")
    if twinfer.cuda_available():
        repo.load("gpu")  # a GPU is here: the group loads on it
        assert repo.get("gpu").batcher.instance_engines[0].device.startswith("cuda")
    else:
        with pytest.raises(ModelLoadError, match=r"instance_group\[0\].kind: KIND_GPU, but no CUDA GPU"):
            repo.load("gpu")
    repo.close()


def test_autocomplete_without_config(tmp_path, rng):
    add_model(tmp_path, "pair", None, {1: pair_model()})
    repo = _repo(tmp_path, rng)
    repo.load("pair")
    served = repo.get("pair")
    config = served.config
    assert config.name == "pair" and config.max_batch_size == 0 and config.backend == "twinfer"
    assert [(t.name, list(t.dims)) for t in config.input] == [("a", [2, 3]), ("b", [2, 3])]
    assert [t.name for t in config.output] == ["sum", "prod"]
    a = rng.integers(-100, 100, (2, 3), dtype=np.int32)
    b = rng.integers(-100, 100, (2, 3), dtype=np.int32)
    out = served.batcher.run({"a": a, "b": b})
    np.testing.assert_array_equal(out["sum"], a + b)
    np.testing.assert_array_equal(out["prod"], a * b)
    repo.close()


@pytest.mark.parametrize("policy, expected", [
    ("", [3]),
    ("version_policy: { latest: { num_versions: 2 } }", [2, 3]),
    ("version_policy: { all: { } }", [1, 2, 3]),
    ("version_policy: { specific: { versions: [ 1, 3 ] } }", [1, 3]),
])
def test_version_policies(tmp_path, rng, policy, expected):
    models = {v: mlp_model(rng) for v in (1, 2, 3)}
    add_model(tmp_path, "m", MLP_CONFIG.format(name="m") + policy + "\n", models)
    repo = _repo(tmp_path, rng)
    repo.load("m")
    assert repo.versions_of("m") == [str(v) for v in expected]
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for v in expected:
        want = twinfer.load(tmp_path / "m" / str(v) / "model.onnx", device="cpu").run({"x": x})["y"].numpy()
        np.testing.assert_allclose(repo.get("m", str(v)).batcher.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)
    assert repo.get("m").version == str(expected[-1])  # no version asked: the newest
    with pytest.raises(NotFound, match="has no version '9'"):
        repo.get("m", "9")
    repo.close()


def test_failed_reload_keeps_serving(tmp_path, rng):
    folder = add_model(tmp_path, "m", MLP_CONFIG.format(name="m"), {1: mlp_model(rng)})
    repo = _repo(tmp_path, rng)
    repo.load("m")
    first = repo.get("m")
    (folder / "config.pbtxt").write_text('name: "m"\nmax_batch_size: -3\n')
    with pytest.raises(ModelLoadError, match="max_batch_size: -3 is negative"):
        repo.load("m")
    assert repo.get("m") is first
    assert "previous versions still serving" in repo.index()[0]["reason"]
    repo.close()


def test_an_unloaded_or_replaced_version_frees_its_engines_when_unload_returns(tmp_path, rng):
    # A version sat in the cycle version -> batcher -> listener (its bound
    # method) -> version, and close() kept the engines: an unloaded model's
    # memory (on a GPU, device memory) waited for the cycle collector. A
    # request queued when the version goes must still get its answer.
    import gc
    import time
    import weakref

    config = MLP_CONFIG.format(name="m") + "dynamic_batching { max_queue_delay_microseconds: 30000000 }\n"
    add_model(tmp_path, "m", config, {1: mlp_model(rng)})
    repo = _repo(tmp_path, rng)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    gc.collect()
    gc.disable()
    try:
        repo.load("m")
        old = repo.get("m")
        engine = weakref.ref(next(iter(old.engines.values())))
        queued = old.batcher.submit({"x": x})  # waits for company: 30 s
        repo.load("m")  # the reload closes the old version, draining its queue
        assert queued.result(timeout=0)["y"].shape == (1, 3)
        assert engine() is None  # gone while the old version is still held here
        version = weakref.ref(old)
        del old
        assert version() is None
        engine = weakref.ref(next(iter(repo.get("m").engines.values())))
        repo.unload("m")
        assert engine() is None
        # One dropped without close() (its batcher's listener holds it weakly)
        # goes too, once its idle workers have let go of the batcher.
        unclosed = repo._load_versions("m", tmp_path / "m", None)[1]
        engine, version = weakref.ref(next(iter(unclosed.engines.values()))), weakref.ref(unclosed)
        del unclosed
        deadline = time.monotonic() + 10
        while engine() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert version() is None and engine() is None
    finally:
        gc.enable()
        repo.close()


def test_control_mode_none_refuses_load(tmp_path, rng):
    add_model(tmp_path, "m", MLP_CONFIG.format(name="m"), {1: mlp_model(rng)})
    repo = ModelRepository(tmp_path, control_mode="none")
    repo.load_startup_models()
    assert repo.get("m").version == "1"
    with pytest.raises(InvalidRequest, match="--model-control-mode explicit"):
        repo.unload("m")
    repo.close()


def test_int8_with_calibration_file(tmp_path, rng):
    model = mlp_model(rng)
    samples = [{"x": rng.standard_normal((8, 4)).astype(np.float32)} for _ in range(4)]
    reference = twinfer.load(model.SerializeToString(), device="cpu", precision="int8", calibration=samples,
                             progress=False)
    folder = add_model(tmp_path, "q", MLP_CONFIG.format(name="q") +
                       'parameters { key: "precision" value: { string_value: "int8" } }\n'
                       'parameters { key: "calibration" value: { string_value: "q.calib.json" } }\n', {1: model})
    reference.calibration.save(folder / "q.calib.json")
    repo = _repo(tmp_path, rng)
    repo.load("q")
    served = repo.get("q")
    assert served.batcher.instance_engines[0].precision == "int8"
    x = rng.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(served.batcher.run({"x": x})["y"], reference.run({"x": x})["y"].numpy())
    repo.close()


def test_saved_engine_version(tmp_path, rng):
    model = mlp_model(rng)
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    folder = add_model(tmp_path, "saved", MLP_CONFIG.format(name="saved") + 'backend: "twinfer"\n', {})
    (folder / "1").mkdir()
    engine.save(folder / "1" / "model.twinfer")
    repo = _repo(tmp_path, rng)
    repo.load("saved")
    served = repo.get("saved")
    assert served.platform == "twinfer_engine"
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(served.batcher.run({"x": x})["y"], engine.run({"x": x})["y"].numpy(), rtol=1e-6,
                               atol=1e-6)
    repo.close()


def test_server_ports_off_free_or_refused(tmp_path):
    # None or -1 (the command line's "off") turn a listener off; a number no
    # port can be is refused by name (was an OverflowError from bind()).
    from twinfer.serve.server import Server

    s = Server(str(tmp_path), http_port=0, grpc_port=None, metrics_port=-1)
    assert s.http_port == 0 and s.grpc_port is None and s.metrics_port is None
    with pytest.raises(twinfer.InvalidArgumentError, match="metrics_port must be a port number"):
        Server(str(tmp_path), metrics_port=70000)
