"""Saved engines (Engine.save / twinfer.load of the file): the same outputs
as the engine that was saved and as onnxruntime, no load-time pass and no
calibration data needed to load, a second process reading it, and clear
errors (never a crash) for truncated, corrupt or foreign files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx_helpers import run_ort
from test_control_flow import loop_model
from test_int8_kernels import cnn

import twinfer


def test_float_cnn_round_trips(rng, tmp_path, device):
    model, shape = cnn(rng)
    engine = twinfer.load(model, device=device)
    path = tmp_path / "cnn.twinfer"
    engine.save(path)
    again = twinfer.load(path, device=device)
    assert again.stats()["passes"] == engine.stats()["passes"]  # the build's log, read from the file
    assert [(s.name, s.dtype, s.shape) for s in again.inputs] == [(s.name, s.dtype, s.shape) for s in engine.inputs]
    for n in (1, 5):  # the batch dim stays symbolic
        x = rng.standard_normal((n,) + shape[1:]).astype(np.float32)
        got = again.run({"x": x})["y"].numpy()
        np.testing.assert_array_equal(got, engine.run({"x": x})["y"].numpy())
        np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_int8_engine_loads_without_calibration_data(rng, tmp_path):
    model, shape = cnn(rng)
    data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    engine = twinfer.load(model, device="cpu", precision="int8", calibration=data, progress=False)
    path = tmp_path / "cnn-int8.twinfer"
    engine.save(path)
    # Building int8 from ONNX needs calibration; the saved engine does not:
    # the quantized, fused graph is in the file.
    again = twinfer.load(path)
    assert again.precision == "int8" and again.device == "cpu"
    assert again.calibration.amax == engine.calibration.amax and again.calibration.method == "percentile"
    ops = [r.op for r in again.kernel_report({"x": shape})]
    assert ops.count("com.twinfer::QConv") == 3, ops
    x = rng.standard_normal((4,) + shape[1:]).astype(np.float32)
    np.testing.assert_array_equal(again.run({"x": x})["y"].numpy(), engine.run({"x": x})["y"].numpy())
    with pytest.raises(twinfer.InvalidArgumentError, match="saved int8 engine"):
        twinfer.load(path, precision="fp16")


def test_subgraphs_and_shape_ranges_round_trip(rng, tmp_path):
    model = loop_model()
    engine = twinfer.load(model, device="cpu", shape_ranges={"x": ((1, 5), (4, 5))})
    path = tmp_path / "loop.twinfer"
    engine.save(path)
    again = twinfer.load(path, device="cpu")
    assert again.shape_ranges == engine.shape_ranges
    feeds = {"M": np.array(4, np.int64), "cond": np.array(True), "x": rng.standard_normal((3, 5)).astype(np.float32),
             "limit": np.array(1e9, np.float32)}
    want = run_ort(model, feeds)
    got = again.run(feeds)
    np.testing.assert_allclose(got["acc"].numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["parts"].numpy(), want[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(twinfer.ShapeError, match="outside the declared range"):
        again.run({**feeds, "x": np.zeros((6, 5), np.float32)})


def test_a_second_process_loads_the_saved_engine(rng, tmp_path):
    model, shape = cnn(rng)
    engine = twinfer.load(model, device="cpu")
    path = tmp_path / "cnn.twinfer"
    engine.save(path)
    x = rng.standard_normal((2,) + shape[1:]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import numpy as np, twinfer
        e = twinfer.load({str(path)!r}, device="cpu")
        np.save({str(tmp_path / "y.npy")!r}, e.run({{"x": np.load({str(tmp_path / "x.npy")!r})}})["y"].numpy())
    """)
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), engine.run({"x": x})["y"].numpy())


def test_options_that_were_fixed_at_build_are_refused(rng, tmp_path):
    model, _ = cnn(rng)
    path = tmp_path / "cnn.twinfer"
    twinfer.load(model, device="cpu").save(path)
    with pytest.raises(twinfer.InvalidArgumentError, match="only device=, num_threads= and the options of running") \
            as info:
        twinfer.load(path, optimize=False)
    # The message listed the GPU options only; the plan cache's are taken too.
    for option in ("allow_cpu_fallback", "cuda_graphs", "stream_priority", "sim_coverage", "max_cached_plans",
                   "plan_ahead"):
        assert option in str(info.value), str(info.value)
    assert twinfer.load(path, device="cpu", num_threads=1).num_threads == 1
    assert twinfer.load(path, device="cpu", max_cached_plans=4, plan_ahead=False).stats() is not None


def test_a_saved_engine_keeps_its_precision_and_refuses_another(rng, tmp_path):
    # Precision left out: the engine's own. Given: it must be the engine's
    # (before, an explicit fp32 was taken for the default and a saved fp16
    # engine ran in fp16 regardless). A lowered engine on the CPU, which
    # computes in fp32, is refused as loading the model so would be.
    from device_models import chain_model, chain_ref

    path = tmp_path / "c16.twinfer"
    twinfer.load(chain_model(4), device="sim", precision="fp16").save(path)
    x = rng.standard_normal((2, 33)).astype(np.float32)
    e = twinfer.load(path, device="sim")
    assert e.precision == "fp16"
    assert np.abs(e.run({"x": x})["y"].numpy() - chain_ref(x, 4)).max() < 1e-2
    assert twinfer.load(path, device="sim", precision="fp16").precision == "fp16"
    for asked in ("fp32", "float32", "bf16"):
        with pytest.raises(twinfer.InvalidArgumentError, match="saved fp16 engine"):
            twinfer.load(path, device="sim", precision=asked)
    with pytest.raises(twinfer.InvalidArgumentError, match="fp16, which the CPU backend does not run"):
        twinfer.load(path, device="cpu")
    fp32 = tmp_path / "c32.twinfer"
    twinfer.load(chain_model(4), device="cpu").save(fp32)
    assert twinfer.load(fp32, device="cpu", precision="fp32").precision == "fp32"


def test_a_path_that_cannot_be_written_is_named_with_the_reason(rng, tmp_path):
    # Before: the base twinfer.Error, without the operating system's reason.
    model, _ = cnn(rng)
    engine = twinfer.load(model, device="cpu")
    with pytest.raises(twinfer.InvalidArgumentError, match=r"cannot write the engine file .*: No such file or directory"):
        engine.save(tmp_path / "missing" / "e.twinfer")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "x").write_text("")
    with pytest.raises(twinfer.InvalidArgumentError, match=r"cannot move the engine file into place at .*folder'"):
        engine.save(tmp_path / "folder")  # a non-empty folder where the file should go
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # the temporary file is gone


def _reseal(b: bytearray) -> bytes:
    """The engine file's checksum (runtime/engine_file.cc: a 64-bit state
    over little-endian 8-byte words of everything after the 32-byte header,
    the last word zero-padded, then the byte count; folded to 32 bits) put
    back at offset 20, so a file corrupted on purpose reaches the parser's
    own checks."""
    mask = (1 << 64) - 1
    body = bytes(b[32:])
    body += b"\0" * (-len(body) % 8)
    h = 0x243F6A8885A308D3
    words = [int.from_bytes(body[i:i + 8], "little") for i in range(0, len(body), 8)] + [len(body)]
    for w in words:
        h = ((h ^ w) * 0x9E3779B97F4A7C15) & mask
        h ^= h >> 29
    b[20:24] = ((h ^ (h >> 32)) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(b)


def test_a_flipped_bit_anywhere_is_caught_by_the_checksum(rng, tmp_path):
    # About a fifth of bit-flipped files used to load and compute something
    # else (a flip in a weight, say); the checksum catches every one.
    model, shape = cnn(rng)
    path = tmp_path / "cnn.twinfer"
    twinfer.load(model, device="cpu").save(path)
    blob = path.read_bytes()
    assert _reseal(bytearray(blob)) == blob  # the test's checksum is the file's
    bad = tmp_path / "bad.twinfer"
    for at in [int(v) for v in rng.integers(32, len(blob), 25)] + [len(blob) - 1]:
        b = bytearray(blob)
        b[at] ^= 1 << int(rng.integers(0, 8))
        bad.write_bytes(bytes(b))
        with pytest.raises(twinfer.ModelFormatError, match="checksum does not match"):
            twinfer.load(bad, device="cpu")


def test_truncated_or_corrupt_files_are_clear_errors(rng, tmp_path):
    model, shape = cnn(rng)
    path = tmp_path / "cnn.twinfer"
    twinfer.load(model, device="cpu").save(path)
    blob = path.read_bytes()
    bad = tmp_path / "bad.twinfer"
    meta_end = 32 + int.from_bytes(blob[24:32], "little")
    # Cut anywhere: in the header, the metadata, the weights.
    for cut in sorted({20, 40, 100, meta_end // 2, meta_end - 1, meta_end + 10, len(blob) // 2, len(blob) - 1}):
        bad.write_bytes(blob[:cut])
        with pytest.raises(twinfer.ModelFormatError, match="corrupt or truncated|not a twinfer engine"):
            twinfer.load(bad, device="cpu")
    # Random bytes flipped in the metadata: an error or an engine, never a crash.
    # A flip can make a valid but huge model (a pad of 47105: a 13 GB
    # intermediate, minutes of reference convolution for seed 18); such an
    # engine is only planned, not run.
    for k in range(40):
        b = bytearray(blob)
        at = int(rng.integers(32, meta_end))
        b[at] ^= int(rng.integers(1, 256))
        bad.write_bytes(_reseal(b))  # past the checksum: the parser's own checks
        x = rng.standard_normal((1,) + shape[1:]).astype(np.float32)
        try:
            e = twinfer.load(bad, device="cpu")
            if e.memory_report({"x": x.shape})["arena_bytes"] < 64 << 20:
                e.run({"x": x})
        except twinfer.Error:
            pass
    # Targeted: the graph's output id set to -1 (the 8 bytes before the two
    # empty counts of inputs' defaults and folded initializers that end the
    # metadata), and a weight's leading dim made 2**62 + 1 (numel * 4 would wrap).
    b = bytearray(blob)
    assert blob[meta_end - 16:meta_end] == bytes(16)
    b[meta_end - 24:meta_end - 16] = (-1).to_bytes(8, "little", signed=True)
    bad.write_bytes(_reseal(b))
    with pytest.raises(twinfer.ModelFormatError, match="out of range"):
        twinfer.load(bad, device="cpu")
    dims = b"".join(int(v).to_bytes(8, "little") for v in (4, 16, 3, 3, 3))  # w1: rank 4, [16, 3, 3, 3]
    at = blob.index(dims, 32, meta_end)
    b = bytearray(blob)
    b[at + 8:at + 16] = (2**62 + 1).to_bytes(8, "little")
    bad.write_bytes(_reseal(b))
    with pytest.raises(twinfer.ModelFormatError, match="larger than the file"):
        twinfer.load(bad, device="cpu")
    # A newer format.
    b = bytearray(blob)
    b[16] = 99
    bad.write_bytes(bytes(b))
    with pytest.raises(twinfer.ModelFormatError, match="format 99"):
        twinfer.load(bad, device="cpu")
