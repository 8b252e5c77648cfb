"""`twinfer serve` against the real Triton clients (tritonclient.http and
tritonclient.grpc), on free local ports: health, metadata, configuration,
inference equal to engine.run on the CPU, versions, load/unload, statistics,
metrics, concurrent clients, and bad requests that get a clear 4xx / gRPC
error while the server keeps serving."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import urllib.request

import numpy as np
import pytest

tritonclient_http = pytest.importorskip("tritonclient.http", reason="needs the [serve] and [test] extras")
import tritonclient.grpc as tritonclient_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import twinfer  # noqa: E402
from serve_repo import MLP_CONFIG, add_model, mlp_model, pair_model  # noqa: E402
from twinfer.serve.server import Server  # noqa: E402

MAX_REQUEST = 1 << 20


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    rng = np.random.default_rng()
    root = tmp_path_factory.mktemp("repo")
    batching = "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    add_model(root, "mlp", MLP_CONFIG.format(name="mlp") + batching +
              "instance_group [ { count: 2 kind: KIND_CPU } ]\nversion_policy: { all: { } }\n",
              {1: mlp_model(rng), 2: mlp_model(rng)})
    add_model(root, "mlp_sim", MLP_CONFIG.format(name="mlp_sim") + batching +
              "instance_group [ { count: 2 kind: KIND_GPU } ]\n", {1: mlp_model(rng)})
    add_model(root, "pair", None, {1: pair_model()})
    add_model(root, "spare", MLP_CONFIG.format(name="spare"), {1: mlp_model(rng)})
    add_model(root, "fp16", MLP_CONFIG.format(name="fp16") +
              'parameters { key: "precision" value: { string_value: "fp16" } }\n', {1: mlp_model(rng)})
    add_model(root, "broken", 'name: "broken"\nmax_batch_size: 8\ninput [ { name: "x" dims: [ 4 ] } ]\n',
              {1: mlp_model(rng)})
    return root


@pytest.fixture(scope="module")
def server(repo):
    with Server(str(repo), http_port=0, grpc_port=0, metrics_port=0, control_mode="explicit", load_models=["*"],
                gpu_device="sim", max_request_bytes=MAX_REQUEST) as s:
        yield s


@pytest.fixture(scope="module")
def http_client(server):
    return tritonclient_http.InferenceServerClient(f"127.0.0.1:{server.http_port}", concurrency=4)


@pytest.fixture(scope="module")
def grpc_client(server):
    return tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def _reference(repo, model, version, feeds):
    engine = twinfer.load(repo / model / version / "model.onnx", device="cpu")
    return {k: v.numpy() for k, v in engine.run(feeds).items()}


def _http_infer(client, model, feeds, version="", binary=True, outputs=None):
    inputs = []
    for name, array in feeds.items():
        i = tritonclient_http.InferInput(name, list(array.shape), _datatype(array))
        i.set_data_from_numpy(array, binary_data=binary)
        inputs.append(i)
    requested = [tritonclient_http.InferRequestedOutput(n, binary_data=binary) for n in outputs] if outputs else None
    return client.infer(model, inputs, model_version=version, outputs=requested)


def _grpc_infer(client, model, feeds, version="", **kw):
    inputs = []
    for name, array in feeds.items():
        i = tritonclient_grpc.InferInput(name, list(array.shape), _datatype(array))
        i.set_data_from_numpy(array)
        inputs.append(i)
    return client.infer(model, inputs, model_version=version, **kw)


def _datatype(array) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


# -- health, metadata, configuration ------------------------------------------------------------
def test_health_and_metadata(http_client, grpc_client):
    for client in (http_client, grpc_client):
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("mlp") and client.is_model_ready("mlp", "1")
        assert not client.is_model_ready("broken") and not client.is_model_ready("nope")
    meta = http_client.get_server_metadata()
    assert meta["name"] == "twinfer" and "binary_tensor_data" in meta["extensions"]
    assert grpc_client.get_server_metadata().version == twinfer.__version__
    m = http_client.get_model_metadata("mlp")
    assert m["versions"] == ["1", "2"] and m["platform"] == "onnxruntime_onnx"
    assert m["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert m["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    g = grpc_client.get_model_metadata("pair", as_json=True)
    assert [(t["name"], t["datatype"], t["shape"]) for t in g["inputs"]] == [("a", "INT32", ["2", "3"]),
                                                                             ("b", "INT32", ["2", "3"])]


def test_model_config(http_client, grpc_client):
    config = http_client.get_model_config("mlp")
    assert config["max_batch_size"] == 8 and config["dynamic_batching"]["max_queue_delay_microseconds"] == 20000
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("x", "TYPE_FP32", [4])]
    assert http_client.get_model_config("pair")["max_batch_size"] == 0  # defaults are answers too
    sim = grpc_client.get_model_config("mlp_sim").config
    assert sim.instance_group[0].kind == sim.instance_group[0].KIND_GPU and sim.instance_group[0].count == 2
    pair = grpc_client.get_model_config("pair").config  # no config.pbtxt: completed from the model
    assert [t.name for t in pair.output] == ["sum", "prod"] and pair.max_batch_size == 0


# -- inference --------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["http-binary", "http-json", "grpc"])
def test_infer_equals_engine_run(server, repo, http_client, grpc_client, protocol, rng):
    cases = [("mlp", "1"), ("mlp", "2"), ("mlp_sim", "1")]
    for model, version in cases:
        x = rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32)
        want = _reference(repo, model, version, {"x": x})["y"]
        if protocol == "grpc":
            got = _grpc_infer(grpc_client, model, {"x": x}, version).as_numpy("y")
        else:
            result = _http_infer(http_client, model, {"x": x}, version, binary=protocol == "http-binary",
                                 outputs=["y"])
            got = result.as_numpy("y")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    a = rng.integers(-1000, 1000, (2, 3), dtype=np.int32)
    b = rng.integers(-1000, 1000, (2, 3), dtype=np.int32)
    if protocol == "grpc":
        result = _grpc_infer(grpc_client, "pair", {"a": a, "b": b})
    else:
        result = _http_infer(http_client, "pair", {"a": a, "b": b}, binary=protocol == "http-binary",
                             outputs=["prod", "sum"])
    np.testing.assert_array_equal(result.as_numpy("sum"), a + b)
    np.testing.assert_array_equal(result.as_numpy("prod"), a * b)


def test_versions_differ_and_unknown_version(repo, http_client, grpc_client, rng):
    x = rng.standard_normal((2, 4)).astype(np.float32)
    latest = _http_infer(http_client, "mlp", {"x": x}).as_numpy("y")
    np.testing.assert_allclose(latest, _reference(repo, "mlp", "2", {"x": x})["y"], rtol=1e-6, atol=1e-6)
    assert not np.allclose(latest, _http_infer(http_client, "mlp", {"x": x}, "1").as_numpy("y"))
    with pytest.raises(InferenceServerException, match="has no version '7' loaded") as e:
        _http_infer(http_client, "mlp", {"x": x}, "7")
    assert e.value.status() == "404"
    with pytest.raises(InferenceServerException, match="has no version '7' loaded") as e:
        _grpc_infer(grpc_client, "mlp", {"x": x}, "7")
    assert e.value.status() == "StatusCode.NOT_FOUND"


def test_repository_index_and_broken_models(http_client, grpc_client):
    index = {(r["name"], r.get("version", "")): r for r in http_client.get_model_repository_index()}
    assert index[("mlp", "1")]["state"] == index[("mlp", "2")]["state"] == "READY"
    assert index[("broken", "")]["state"] == "UNAVAILABLE"
    assert "model 'broken': input 'x'.data_type: missing" in index[("broken", "")]["reason"]
    assert "model 'fp16': parameters.precision" in index[("fp16", "")]["reason"]
    rows = grpc_client.get_model_repository_index().models
    assert {r.name for r in rows} == {"mlp", "mlp_sim", "pair", "spare", "fp16", "broken"}
    with pytest.raises(InferenceServerException, match="model 'broken' is not ready") as e:
        _grpc_infer(grpc_client, "broken", {"x": np.zeros((1, 4), np.float32)})
    assert e.value.status() == "StatusCode.UNAVAILABLE"


def test_unload_and_load(repo, http_client, grpc_client, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    want = _reference(repo, "spare", "1", {"x": x})["y"]
    http_client.unload_model("spare")
    assert not http_client.is_model_ready("spare")
    with pytest.raises(InferenceServerException, match="model 'spare' is not ready: unloaded") as e:
        _http_infer(http_client, "spare", {"x": x})
    assert e.value.status() == "503"
    grpc_client.load_model("spare")
    assert grpc_client.is_model_ready("spare")
    np.testing.assert_allclose(_grpc_infer(grpc_client, "spare", {"x": x}).as_numpy("y"), want, rtol=1e-6,
                               atol=1e-6)
    # A configuration sent with the load request replaces config.pbtxt.
    override = {"name": "spare", "max_batch_size": 2, "dynamic_batching": {"preferred_batch_size": [2]}}
    http_client.load_model("spare", config=json.dumps(override))
    assert http_client.get_model_config("spare")["max_batch_size"] == 2
    with pytest.raises(InferenceServerException, match="batch size 3, outside 1..max_batch_size"):
        _http_infer(http_client, "spare", {"x": x})
    grpc_client.load_model("spare")  # back to config.pbtxt
    with pytest.raises(InferenceServerException, match="is not in the repository") as e:
        http_client.load_model("nope")
    assert e.value.status() == "404"


def test_statistics(http_client, grpc_client, rng):
    def stats(client):
        s = client.get_inference_statistics("pair", as_json=True) if client is grpc_client else \
            client.get_inference_statistics("pair")
        entry = s["model_stats"][0]
        return int(entry["inference_stats"]["success"].get("count", 0)), int(entry.get("execution_count", 0))

    before = stats(http_client)
    a = rng.integers(0, 9, (2, 3), dtype=np.int32)
    for _ in range(3):
        _http_infer(http_client, "pair", {"a": a, "b": a})
        _grpc_infer(grpc_client, "pair", {"a": a, "b": a})
    after = stats(grpc_client)
    assert after[0] - before[0] == 6 and after[1] - before[1] == 6
    everything = http_client.get_inference_statistics()
    assert {(m["name"], m["version"]) for m in everything["model_stats"]} >= {("mlp", "1"), ("mlp", "2"),
                                                                              ("pair", "1")}


def _concurrent_clients(server, model, version, xs) -> dict[int, np.ndarray]:
    """One client per x, all released at once: odd ones over gRPC, even ones
    over HTTP; {i: its y}. Any client's error fails the test."""
    got: dict[int, np.ndarray] = {}
    errors = []
    barrier = threading.Barrier(len(xs))

    def client(i):
        try:
            if i % 2:
                c = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
                barrier.wait()
                got[i] = _grpc_infer(c, model, {"x": xs[i]}, version).as_numpy("y")
            else:
                c = tritonclient_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
                barrier.wait()
                got[i] = _http_infer(c, model, {"x": xs[i]}, version).as_numpy("y")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return got


def test_concurrent_clients_are_batched(server, repo, rng):
    """24 clients at once over HTTP and gRPC, one row each: every answer is its
    own, and the metrics show batches of more than one row."""
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(24)]
    want = _reference(repo, "mlp", "2", {"x": np.concatenate(xs)})["y"]
    before = _metrics(server)
    got = _concurrent_clients(server, "mlp", "2", xs)
    for i in range(len(xs)):
        np.testing.assert_allclose(got[i], want[i:i + 1], rtol=1e-6, atol=1e-6)
    after = _metrics(server)

    def delta(name, **labels):
        return _sample(after, name, **labels) - _sample(before, name, **labels, missing=0.0)

    rows = delta("twinfer_batch_size_sum", model="mlp", version="2")
    batches = delta("twinfer_batch_size_count", model="mlp", version="2")
    assert rows == len(xs) and batches < len(xs), (rows, batches)  # 24 rows in fewer batches: merged
    assert delta("twinfer_inference_requests_total", model="mlp", version="2", outcome="success") == len(xs)


def _metrics(server) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()


def _sample(text: str, name: str, missing: float | None = None, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    if missing is not None:
        return missing
    raise AssertionError(f"no {name} {labels} in the metrics")


def test_metrics_page(server, http_client, rng):
    _http_infer(http_client, "mlp_sim", {"x": rng.standard_normal((2, 4)).astype(np.float32)})
    text = _metrics(server)
    for name in ("twinfer_request_duration_seconds_bucket", "twinfer_queue_duration_seconds_bucket",
                 "twinfer_compute_duration_seconds_bucket", "twinfer_inference_count_total",
                 "twinfer_inference_exec_count_total"):
        assert _sample(text, name, model="mlp_sim") >= 0
    assert _sample(text, "twinfer_model_memory_bytes", model="mlp_sim", device="sim:0", kind="weights") > 0
    assert _sample(text, "twinfer_model_memory_bytes", model="mlp_sim", device="sim:0", kind="arena") > 0


# -- bad requests -----------------------------------------------------------------------------------
def _post(server, path, body: bytes, headers=None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_bad_requests_get_clear_errors(server, http_client, grpc_client):
    x = np.zeros((2, 4), np.float32)
    cases = [
        (lambda c, f: f(c, "nope", {"x": x}), "404", "NOT_FOUND", "unknown model 'nope'"),
        (lambda c, f: f(c, "mlp", {"x": np.zeros((2, 5), np.float32)}), "400", "INVALID_ARGUMENT",
         r"input 'x' has shape \[2, 5\], the model takes \[-1, 4\]"),
        (lambda c, f: f(c, "mlp", {"x": np.zeros((2, 4))}), "400", "INVALID_ARGUMENT",
         "input 'x' has datatype FP64, the model takes FP32"),
        (lambda c, f: f(c, "mlp", {"x": np.zeros((9, 4), np.float32)}), "400", "INVALID_ARGUMENT",
         "batch size 9, outside 1..max_batch_size"),
        (lambda c, f: f(c, "mlp", {"z": x}), "400", "INVALID_ARGUMENT", r"unknown input\(s\) \['z'\]"),
    ]
    for run, http_status, grpc_code, message in cases:
        with pytest.raises(InferenceServerException, match=message) as e:
            run(http_client, _http_infer)
        assert e.value.status() == http_status
        with pytest.raises(InferenceServerException, match=message) as e:
            run(grpc_client, _grpc_infer)
        assert e.value.status() == f"StatusCode.{grpc_code}"

    status, body = _post(server, "/v2/models/mlp/infer", b'{"inputs": [')
    assert status == 400 and "malformed JSON" in body["error"]
    status, body = _post(server, "/v2/models/mlp/infer", json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]}]}).encode())
    assert status == 400 and "3 values of data, but shape [1, 4] needs 4" in body["error"]
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    status, body = _post(server, "/v2/models/mlp/infer", header + b"\0" * 12,
                         {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "binary_data_size 16 runs past the 12 bytes" in body["error"]
    status, body = _post(server, "/v2/models/mlp/infer", b"\0" * (MAX_REQUEST + 1000))
    assert status == 413 and f"limit of {MAX_REQUEST} bytes" in body["error"]
    big = np.zeros((8, 4), np.float32)
    big_request = {"x": np.zeros((MAX_REQUEST // 16 + 1, 4), np.float32)}
    with pytest.raises(InferenceServerException) as e:
        _grpc_infer(grpc_client, "mlp", big_request)
    assert e.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    status, body = _post(server, "/v2/models/mlp/nothing", b"{}")
    assert status == 404 and "no such endpoint" in body["error"]
    # ... and the server goes on serving.
    assert http_client.is_server_ready()
    assert _grpc_infer(grpc_client, "mlp", {"x": big}).as_numpy("y").shape == (8, 3)


def test_client_disconnects_mid_request(server, http_client, grpc_client):
    # HTTP: half a body, then the connection closes.
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    sock.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 10000\r\n\r\n" + b'{"inputs": [' + b" " * 100)
    sock.close()
    # gRPC: the client gives up (deadline) while its request waits for a batch.
    x = np.zeros((1, 4), np.float32)
    with pytest.raises(InferenceServerException) as e:
        _grpc_infer(grpc_client, "mlp", {"x": x}, client_timeout=0.005)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert http_client.is_server_live()
    assert _http_infer(http_client, "mlp", {"x": x}).as_numpy("y").shape == (1, 3)
    assert _grpc_infer(grpc_client, "mlp", {"x": x}).as_numpy("y").shape == (1, 3)


def test_request_timeout_parameter(server, http_client):
    # mlp waits 20 ms for a batch; a request that allows 1 us times out in the queue.
    x = np.zeros((1, 4), np.float32)
    i = tritonclient_http.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException, match="longer than its timeout") as e:
        http_client.infer("mlp", [i], timeout=1)
    assert e.value.status() == "408"


def test_grpc_stream(server, repo, grpc_client, rng):
    """ModelStreamInfer: one answer per request, in order; a bad request's
    error comes in the stream and the stream goes on."""
    import queue

    answers: queue.Queue = queue.Queue()
    client = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    xs = [rng.standard_normal((2, 4)).astype(np.float32), np.zeros((2, 5), np.float32),
          rng.standard_normal((3, 4)).astype(np.float32)]
    try:
        for x in xs:
            i = tritonclient_grpc.InferInput("x", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            client.async_stream_infer("mlp", [i], model_version="1")
        got = [answers.get(timeout=30) for _ in xs]
    finally:
        client.stop_stream()
    for x, (result, error) in zip(xs[::2], got[::2]):
        assert error is None
        np.testing.assert_allclose(result.as_numpy("y"), _reference(repo, "mlp", "1", {"x": x})["y"], rtol=1e-6,
                                   atol=1e-6)
    assert got[1][0] is None and "input 'x' has shape [2, 5]" in str(got[1][1])


@pytest.mark.cuda
def test_serving_on_the_gpu(tmp_path, rng):
    """A KIND_GPU model on the real GPU: two instances (each its own stream),
    16 concurrent clients over HTTP and gRPC, every answer equal to the CPU's,
    batches merged, and the engine's device memory on the metrics page."""
    batching = "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    add_model(tmp_path, "mlp_gpu", MLP_CONFIG.format(name="mlp_gpu") + batching +
              "instance_group [ { count: 2 kind: KIND_GPU } ]\n", {1: mlp_model(rng)})
    xs = [rng.standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(16)]
    with Server(str(tmp_path), http_port=0, grpc_port=0, metrics_port=0, gpu_device="cuda") as s:
        got = _concurrent_clients(s, "mlp_gpu", "", xs)
        text = _metrics(s)
    for i, x in enumerate(xs):
        np.testing.assert_allclose(got[i], _reference(tmp_path, "mlp_gpu", "1", {"x": x})["y"], rtol=1e-4, atol=1e-4)
    assert _sample(text, "twinfer_batch_size_count", model="mlp_gpu", version="1") < len(xs)
    assert _sample(text, "twinfer_model_memory_bytes", model="mlp_gpu", device="cuda:0", kind="weights") > 0


def test_odd_names_numbers_and_nesting_get_4xx(server, grpc_client):
    # Each gave a 500 (or a 503 that told a client which folders exist on
    # the server) and a traceback in the log.
    x = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    status, body = _post(server, "/v2/models/mlp/infer", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "nested too deeply" in body["error"]
    # "²" is a digit to str.isdigit() but not to int().
    status, body = _post(server, "/v2/models/mlp/versions/%C2%B2/infer", json.dumps(x).encode())
    assert status == 404 and "has no version" in body["error"]
    status, body = _post(server, "/v2/models/mlp/infer", json.dumps(x).encode(),
                         {"Inference-Header-Content-Length": "\u00b2"})
    assert status == 400 and "Inference-Header-Content-Length" in body["error"]
    # Names that are folders but not models: "..", ".", "" and absolute paths.
    status, body = _post(server, "/v2/models/../infer", json.dumps(x).encode())
    assert status == 404 and "unknown model '..'" in body["error"]
    for name in ("", "..", "/etc", "/tmp"):
        with pytest.raises(InferenceServerException) as e:
            grpc_client.get_model_metadata(name)
        assert e.value.status() == "StatusCode.NOT_FOUND", (name, e.value)
    # Lenient values are refused, not coerced.
    for tensor, message in [({"data": None}, "data must be a list"), ({"data": [1, 2, "3", 4]}, "string values"),
                            ({"shape": [1.9, 4], "data": [1, 2, 3, 4]}, "shape must be a list of integers"),
                            ({"shape": [2**62, 4], "data": []}, "more elements than a tensor can hold")]:
        request = {"inputs": [{**x["inputs"][0], **tensor}]}
        status, body = _post(server, "/v2/models/mlp/infer", json.dumps(request).encode())
        assert status == 400 and message in body["error"], (tensor, status, body)
    status, body = _post(server, "/v2/models/mlp/infer", json.dumps({**x, "parameters": {"timeout": True}}).encode())
    assert status == 400 and "parameters.timeout" in body["error"]


def test_shape_faults_the_batcher_finds_are_400(tmp_path, rng):
    # Two batched inputs whose batch dims disagree, and a config whose dims
    # (-1) admit what the model's fixed dim does not: the batcher refuses
    # them at submit, which the server answered with 500 / INTERNAL.
    from onnx_helpers import make_model
    from onnx import helper

    add_model(tmp_path, "two", "max_batch_size: 8\n", {1: make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])], [("a", np.float32, ["N", 4]), ("b", np.float32, ["N", 4])],
        [("y", np.float32, ["N", 4])])})
    add_model(tmp_path, "loose", 'max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]\n',
              {1: mlp_model(rng)})
    with Server(str(tmp_path), http_port=0, grpc_port=0, metrics_port=None) as s:
        http_c = tritonclient_http.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        grpc_c = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        cases = [("two", {"a": np.zeros((2, 4), np.float32), "b": np.zeros((3, 4), np.float32)},
                  "disagree on the batch dim"),
                 ("loose", {"x": np.zeros((2, 5), np.float32)}, r"the model takes \['N', 4\]")]
        for model, feeds, message in cases:
            with pytest.raises(InferenceServerException, match=message) as e:
                _http_infer(http_c, model, feeds)
            assert e.value.status() == "400"
            with pytest.raises(InferenceServerException, match=message) as e:
                _grpc_infer(grpc_c, model, feeds)
            assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        y = _http_infer(http_c, "two", {"a": np.ones((2, 4), np.float32), "b": np.ones((2, 4), np.float32)})
        np.testing.assert_array_equal(y.as_numpy("y"), np.full((2, 4), 2, np.float32))


def test_a_request_that_meets_a_reload_goes_to_the_new_version(tmp_path, rng):
    # The window: a request finds the served version, a reload swaps in the
    # new one and closes the old batcher, then the request submits. It got a
    # 503 "the batcher is closed" during a reload that succeeded. Made
    # certain here by handing the request the old version once.
    import asyncio
    import time

    from twinfer.serve.inference import InferRequest

    model = mlp_model(rng)
    add_model(tmp_path, "m", MLP_CONFIG.format(name="m"), {1: model})
    with Server(str(tmp_path), http_port=None, grpc_port=None, metrics_port=None, control_mode="explicit",
                load_models=["m"]) as s:
        old = s.repository.get("m")
        s.repository.load("m")  # the reload: old's batcher closes
        assert s.repository.get("m") is not old
        real_get, calls = s.repository.get, []

        def stale_once(name, version=""):
            calls.append(name)
            return old if len(calls) == 1 else real_get(name, version)

        s.repository.get = stale_once
        x = rng.standard_normal((2, 4)).astype(np.float32)
        request = InferRequest("m", "", "1", {"x": ("FP32", x)}, None, None, time.monotonic_ns())
        response = asyncio.run(s.service.infer(request))
        want = twinfer.load(model.SerializeToString(), device="cpu").run({"x": x})["y"].numpy()
        np.testing.assert_allclose(dict((n, a) for n, _, a in response.outputs)["y"], want, rtol=1e-5, atol=1e-6)
        assert len(calls) == 2
        # Counted once, as the success it was (not also as the old version's failure).
        new_stats = s.repository.get("m").stats.to_dict()["inference_stats"]
        old_stats = old.stats.to_dict()["inference_stats"]
        assert new_stats["success"]["count"] == 1 and new_stats["fail"]["count"] == 0
        assert old_stats["success"]["count"] == 0 and old_stats["fail"]["count"] == 0


def test_unload_of_names_that_are_not_models_is_404(tmp_path, rng):
    add_model(tmp_path, "m", MLP_CONFIG.format(name="m"), {1: mlp_model(rng)})
    with Server(str(tmp_path), http_port=0, grpc_port=None, metrics_port=None, control_mode="explicit") as s:
        for name in ("..", "."):
            status, body = _post(s, f"/v2/repository/models/{name}/unload", b"{}")
            assert status == 404 and "is not in the repository" in body["error"], (name, status, body)
        status, _ = _post(s, "/v2/repository/models/m/unload", b"{}")  # a model, not loaded: fine
        assert status == 200


def test_a_served_model_whose_output_has_no_declared_shape_loads(tmp_path, rng):
    # The output's rank is unknown until run (a Reshape to a shape input):
    # the server completes the config for it, as before; only an input of
    # unknown rank needs its dims in config.pbtxt.
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, ["k"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    add_model(tmp_path, "r", "max_batch_size: 0\n", {1: m})
    with Server(str(tmp_path), http_port=0, grpc_port=None, metrics_port=None) as s:
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        assert client.is_model_ready("r")
        x = np.arange(12, dtype=np.float32).reshape(2, 6)
        inputs = [tritonclient_http.InferInput("x", [2, 6], "FP32"), tritonclient_http.InferInput("s", [2], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(np.array([3, 4], np.int64))
        np.testing.assert_array_equal(client.infer("r", inputs).as_numpy("y"), x.reshape(3, 4))
