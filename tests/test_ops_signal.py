"""Signal ops on the CPU backend (csrc/ops/signal/): DFT (opsets 17 and 20,
forward/inverse, onesided, inverse real, dft_length cut and padded), STFT,
the Hann/Hamming/Blackman windows, MelWeightMatrix and TfIdfVectorizer,
against onnxruntime or, where it has no kernel, the ONNX reference evaluator
(numpy.fft underneath). Fresh random data with odd sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import assert_close, run_ort, run_reference
from op_cases import F16, F32, F64, I32, I64, Const, build, expect_error, run


def check(op, inputs, attrs=None, out=None, opset=17, rtol=1e-4, atol=1e-4, prefer="ort"):
    model, feeds = build(op, inputs, attrs, out, opset)
    got = run(model, feeds)
    exp = None
    if prefer == "ort":
        try:
            exp = run_ort(model, feeds)
        except Exception:  # noqa: BLE001 - onnxruntime lacks the kernel/opset
            exp = None
    if exp is None:
        exp = [np.asarray(o) for o in run_reference(model, feeds)]
    for k, (g, e) in enumerate(zip(got, exp)):
        assert_close(g, np.asarray(e), rtol=rtol, atol=atol, what=f"{op} output {k}")
    return got


def k64(v):
    return np.array(v, dtype=np.int64)


# ---------------------------------------------------------------------------
# DFT
# ---------------------------------------------------------------------------
# An inverse one-sided transform takes a complex half spectrum, so it has no
# real-input (1 channel) case.
@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("inverse,onesided,channels", [(0, 0, 1), (1, 0, 1), (0, 1, 1), (0, 0, 2), (1, 0, 2),
                                                       (0, 1, 2), (1, 1, 2)])
def test_dft(rng, opset, inverse, onesided, channels):
    x = rng.standard_normal((2, 9, 5, channels)).astype(F32)
    for axis, length in [(1, None), (2, None), (1, 12), (2, 3), (-3, 7)]:
        ins = [("x", x)]
        attrs = {"inverse": inverse, "onesided": onesided}
        ins.append(("n", Const(k64(length))) if length is not None else ("n", None))
        if opset >= 20:
            ins.append(("a", Const(k64(axis))))
        else:
            attrs["axis"] = axis
        check("DFT", ins, attrs, opset=opset, prefer="reference")


def test_dft_runtime_length_and_dtypes(rng):
    x = rng.standard_normal((3, 10, 2)).astype(F64)
    # dft_length as a graph input: the output shape depends on its value.
    check("DFT", [("x", x), ("n", k64(13)), ("a", Const(k64(1)))], {}, opset=20, rtol=1e-10, atol=1e-10,
          prefer="reference")
    x = rng.standard_normal((3, 10, 1)).astype(F32)
    check("DFT", [("x", x)], {"onesided": 1}, opset=17)  # onnxruntime's rfft


# Lengths for the CPU FFT's paths: powers of two (radix 4 and 2), mixed
# radix with a direct odd butterfly (12, 45, 400 = 4*4*5*5), and primes above
# 64 that go through Bluestein (67, 131). numpy.fft is the reference.
FFT_LENGTHS = [1, 2, 8, 12, 45, 64, 67, 131, 400, 512]


@pytest.mark.parametrize("n", FFT_LENGTHS)
def test_dft_lengths_against_numpy(rng, n):
    x = rng.standard_normal((3, n, 2)).astype(F32)
    z = x[..., 0].astype(np.float64) + 1j * x[..., 1]
    for inverse, onesided, exp in [(0, 0, np.fft.fft(z, axis=1)), (1, 0, np.fft.ifft(z, axis=1)),
                                   (0, 1, np.fft.fft(z, axis=1)[:, : n // 2 + 1])]:
        model, feeds = build("DFT", [("x", x)], {"inverse": inverse, "onesided": onesided, "axis": 1}, opset=17)
        (got,) = run(model, feeds)
        assert_close(got, np.stack([exp.real, exp.imag], -1).astype(F32), rtol=1e-5, atol=1e-5 * np.sqrt(n),
                     what=f"DFT n={n} inverse={inverse} onesided={onesided}")
    # Real input, cut and padded lengths.
    xr = x[..., :1]
    for length in [max(1, n - 3), n + 5]:
        model, feeds = build("DFT", [("x", xr), ("n", Const(k64(length)))], {"axis": 1}, opset=17)
        (got,) = run(model, feeds)
        exp = np.fft.fft(xr[..., 0].astype(np.float64), n=length, axis=1)
        assert_close(got, np.stack([exp.real, exp.imag], -1).astype(F32), rtol=1e-5, atol=1e-5 * np.sqrt(length),
                     what=f"DFT n={n} dft_length={length}")
    if n > 1:  # inverse real transform: bins 0..n/2 in, n real samples out
        half = x[:, : n // 2 + 1]
        model, feeds = build("DFT", [("x", half), ("n", Const(k64(n))), ("a", Const(k64(1)))],
                             {"inverse": 1, "onesided": 1}, opset=20)
        (got,) = run(model, feeds)
        exp = np.fft.irfft(half[..., 0].astype(np.float64) + 1j * half[..., 1], n=n, axis=1)
        assert_close(got[..., 0], exp.astype(F32), rtol=1e-5, atol=1e-5, what=f"irfft n={n}")


def test_dft_errors(rng):
    x = rng.standard_normal((3, 10, 3)).astype(F32)
    model, feeds = build("DFT", [("x", x)], {}, opset=17)
    expect_error(model, feeds, "1 (real) or 2")
    x = rng.standard_normal((3, 10, 2)).astype(F32)
    model, feeds = build("DFT", [("x", x), ("n", None), ("a", Const(k64(2)))], {}, opset=20)
    expect_error(model, feeds, "axis")


# ---------------------------------------------------------------------------
# STFT
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("onesided", [1, 0])
@pytest.mark.parametrize("window", [True, False])
def test_stft(rng, onesided, window):
    sig = rng.standard_normal((2, 53, 1)).astype(F32)
    for step, length in [(4, 16), (7, 9), (16, 16)]:
        ins = [("s", sig), ("step", Const(k64(step)))]
        ins.append(("w", rng.uniform(0, 1, length).astype(F32)) if window else ("w", None))
        ins.append(("l", Const(k64(length))))
        check("STFT", ins, {"onesided": onesided}, prefer="reference")


def test_stft_complex_against_ort(rng):
    sig = rng.standard_normal((1, 40, 2)).astype(F32)
    win = np.hanning(10).astype(F32)
    check("STFT", [("s", sig), ("step", Const(k64(3))), ("w", win), ("l", Const(k64(10)))], {"onesided": 0})


def stft_numpy(sig, step, length, window, onesided):
    z = sig[..., 0].astype(np.float64) + (1j * sig[..., 1] if sig.shape[-1] == 2 else 0)
    frames = 1 + (sig.shape[1] - length) // step
    idx = np.arange(frames)[:, None] * step + np.arange(length)
    spec = np.fft.fft(z[:, idx] * window.astype(np.float64), axis=-1)
    if onesided:
        spec = spec[..., : length // 2 + 1]
    return np.stack([spec.real, spec.imag], -1)


# The spectrogram front-end shape (16000 samples, 512-point frames every 160)
# and frame lengths off the power-of-two path; real signals pair frames
# through one complex FFT, so odd frame counts and batch > 1 (pairs across
# the batch boundary) are covered.
@pytest.mark.parametrize("length,step,samples", [(512, 160, 16000), (400, 160, 4001), (67, 13, 301), (45, 7, 250)])
@pytest.mark.parametrize("channels", [1, 2])
def test_stft_fft_lengths(rng, length, step, samples, channels):
    sig = rng.standard_normal((3, samples, channels)).astype(F32)
    win = np.hanning(length).astype(F32)
    for onesided in ([1, 0] if channels == 1 else [0]):
        ins = [("s", sig), ("step", Const(k64(step))), ("w", win), ("l", Const(k64(length)))]
        model, feeds = build("STFT", ins, {"onesided": onesided})
        (got,) = run(model, feeds)
        exp = stft_numpy(sig, step, length, win, onesided)
        assert got.shape == exp.shape
        assert_close(got, exp.astype(F32), rtol=1e-5, atol=1e-4, what=f"STFT {length}/{step} onesided={onesided}")
    if channels == 1:
        # onnxruntime's float32 FFT is itself off by up to ~1.5e-3 at 400
        # points (values up to ~30; numpy above holds twinfer to 1e-4).
        check("STFT", [("s", sig[:1]), ("step", Const(k64(step))), ("w", win), ("l", Const(k64(length)))],
              {"onesided": 1}, rtol=1e-4, atol=5e-3)


# ---------------------------------------------------------------------------
# Windows and mel filters
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [1, 0])
def test_windows(op, periodic):
    for size, dt in [(17, 1), (1, 1), (32, 11), (9, 7)]:
        out = {1: F32, 11: F64, 7: I64}[dt]
        check(op, [("n", k64(size))], {"periodic": periodic, "output_datatype": dt}, [out], rtol=1e-6, atol=1e-6,
              prefer="reference")
        check(op, [("n", Const(np.array(size, I32)))], {"periodic": periodic, "output_datatype": dt}, [out],
              rtol=1e-6, atol=1e-6, prefer="reference")


def test_mel_weight_matrix():
    for mel, dft, rate, lo, hi in [(8, 16, 8192, 0.0, 4096.0), (13, 64, 16000, 30.0, 7000.0), (5, 33, 22050, 0, 11025)]:
        ins = [("m", k64(mel)), ("d", k64(dft)), ("r", k64(rate)), ("lo", np.array(lo, F32)),
               ("hi", np.array(hi, F32))]
        check("MelWeightMatrix", ins, {}, [F32], rtol=1e-6, atol=1e-6, prefer="reference")


# ---------------------------------------------------------------------------
# TfIdfVectorizer
# ---------------------------------------------------------------------------
POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 3), ((2, 2), 5)])
@pytest.mark.parametrize("weights", [False, True])
def test_tfidf(rng, mode, grams, skip, weights):
    attrs = dict(POOL, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip)
    if weights:
        attrs["weights"] = [float(w) for w in rng.uniform(0.5, 2.0, 7)]
    for shape, dt in [((23,), I64), ((3, 11), I32)]:
        x = rng.integers(2, 9, shape).astype(dt)
        check("TfIdfVectorizer", [("x", x)], attrs, [F32], opset=9, rtol=1e-6, atol=1e-6)


def test_tfidf_errors(rng):
    x = rng.integers(0, 9, (2, 3, 4)).astype(I64)
    model, feeds = build("TfIdfVectorizer", [("x", x)], dict(POOL, mode="TF", min_gram_length=1, max_gram_length=1),
                         [F32], 9)
    expect_error(model, feeds, "[C] or [B, C]")
    model, feeds = build("TfIdfVectorizer", [("x", x[0])], dict(POOL, mode="XX"), [F32], 9)
    expect_error(model, feeds, "mode")


def test_signal_f16(rng):
    x = rng.standard_normal((2, 8, 2)).astype(F16)
    check("DFT", [("x", x)], {"axis": 1}, opset=17, rtol=2e-2, atol=2e-2, prefer="reference")
