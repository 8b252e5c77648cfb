"""The GPU session's tools run where a mistake costs the most (30 minutes of a
lent machine): their syntax and the summary's reading of pytest's JUnit files
are checked here, on every CI run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="12.5">
<testcase classname="tests.test_a" name="test_ok" time="1.0"/>
<testcase classname="tests.test_a" name="test_ok2" time="1.0"/>
<testcase classname="tests.test_a" name="test_bad" time="1.0"><failure message="assert 1 == 2&#10;more">tb</failure></testcase>
<testcase classname="tests.test_a" name="test_skip" time="0"><skipped message="no GPU"/></testcase>
</testsuite></testsuites>
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_wheels.sh", "gpu_debug.sh"])
def test_gpu_scripts_parse(script):
    path = ROOT / "tools" / script
    if not path.exists():
        pytest.skip(f"{script} is not in this checkout")
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_gpu_summary_reads_junit_files(tmp_path):
    (tmp_path / "env.txt").write_text("NVIDIA H100 80GB HBM3, 580.00\n")
    (tmp_path / "test_a.xml").write_text(JUNIT)
    (tmp_path / "test_a.log").write_text("...F\n")
    (tmp_path / "test_b.log").write_text("Fatal Python error: Segmentation fault\n")  # died: no JUnit file
    (tmp_path / "test_c.log").write_text("")  # never started
    (tmp_path / "phases.log").write_text("memcheck exit 0\nskipped, out of time: bench_quantization\n")
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_summary.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    row_a = next(ln for ln in lines if ln.startswith("test_a "))
    assert row_a.split() == ["test_a", "2", "1", "1", "12"]  # passed, failed, skipped, seconds
    row_b = next(ln for ln in lines if ln.startswith("test_b "))
    assert row_b.split()[1:4] == ["0", "1", "0"]
    assert any("tests.test_a::test_bad: assert 1 == 2" in ln for ln in lines)
    assert any("Segmentation fault" in ln for ln in lines)
    assert any("not run" in ln and "test_c" in ln for ln in lines)
    assert any("1 step(s) skipped for time" in ln for ln in lines)


@pytest.mark.cuda_build
@pytest.mark.parametrize("quantized_out", [True, False])
def test_int8_gemm_probe_models_are_one_qmatmul(quantized_out, rng):
    # benchmarks/int8_gemm_probe.py times these models' GEMMs on a GPU: each
    # must plan as one QMatMul on the device (the simulated device places
    # nodes as CUDA would) and compute what onnxruntime computes.
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    import twinfer
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from int8_gemm_probe import qdq_matmul_model
    finally:
        sys.path.pop(0)
    m = qdq_matmul_model(64, 24, quantized_out=quantized_out, seed=int(rng.integers(1 << 30)))
    x = (rng.standard_normal((37, 64)) * 2).astype(np.float32)
    e = twinfer.load(m, device="sim", sim_coverage="cuda", allow_cpu_fallback=False)
    rows = [r for r in e.kernel_report({"x": x.shape}) if r.backend != "copy"]
    assert [r.op for r in rows if "QMatMul" in r.op] == ["com.twinfer::QMatMul"], rows
    assert all(r.backend == "sim" for r in rows), rows
    got = e.run({"x": x})["y"].numpy()
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    step = 0.02 if quantized_out else 1e-4 * np.abs(want).max()
    assert np.abs(got - want).max() <= step * 1.001, np.abs(got - want).max()


@pytest.mark.cuda_build
def test_int8_gemm_probe_float_model_plans_one_fp8_matmul(rng):
    # The probe's fp8 row: precision="fp8" makes the float model's GEMM one
    # FP8MatMul on the device, close to onnxruntime's float32 result.
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    import twinfer
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from int8_gemm_probe import float_matmul_model
    finally:
        sys.path.pop(0)
    m = float_matmul_model(48, 40, seed=int(rng.integers(1 << 30)))
    x = rng.standard_normal((19, 48)).astype(np.float32)
    calibration = [{"x": rng.standard_normal((16, 48)).astype(np.float32)} for _ in range(2)]
    e = twinfer.load(m, device="sim", sim_coverage="cuda", allow_cpu_fallback=False, precision="fp8",
                     calibration=calibration, progress=False)
    rows = e.kernel_report({"x": x.shape})
    assert [r.op for r in rows if "MatMul" in r.op] == ["com.twinfer::FP8MatMul"], rows
    got = e.run({"x": x})["y"].numpy()
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.08  # E4M3 keeps 3 mantissa bits
