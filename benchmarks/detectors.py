"""Detection models whose output sizes depend on the data (NonZero, NMS):
torchvision's SSDlite320-MobileNetV3 and Faster R-CNN MobileNetV3-320-FPN
with random weights, exported to ONNX, twinfer and onnxruntime on the CPU in
one process, interleaved blocks: median ms and the ratio twinfer /
onnxruntime (lower is better for twinfer), after checking that both return
the same detections. Not a test: no assertion on time.

    python benchmarks/detectors.py [--threads 1 2] [--blocks 5] [--models ssdlite320 fasterrcnn_mbv3_320]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np

from op_cliffs import block

MODELS = ("ssdlite320", "fasterrcnn_mbv3_320")


def export(name: str, folder: Path) -> Path:
    import torch
    import torchvision.models.detection as det

    torch.manual_seed(0)
    make = {"ssdlite320": det.ssdlite320_mobilenet_v3_large,
            "fasterrcnn_mbv3_320": det.fasterrcnn_mobilenet_v3_large_320_fpn}[name]
    model = make(weights=None, weights_backbone=None).eval()
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([torch.rand(3, 320, 320)],), str(path), dynamo=False, input_names=["x"],
                          opset_version=17)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.4)
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    args = ap.parse_args()
    import onnxruntime as ort

    import twinfer

    folder = Path(tempfile.mkdtemp(prefix="twinfer-detectors-"))
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'model':22s} {'threads':>7s} {'twinfer ms':>11s} {'ort ms':>9s} {'ratio':>6s} {'detections':>10s}")
    for name in args.models:
        path = export(name, folder)
        feeds = {"x": rng.random((3, 320, 320), dtype=np.float32)}
        for threads in args.threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            e = twinfer.load(path, device="cpu", num_threads=threads)
            got, want = e.run(feeds), sess.run(None, feeds)
            for out, w in zip(e.outputs, want):  # the same detections, before any timing
                np.testing.assert_allclose(got[out.name].numpy(), w, rtol=1e-3, atol=1e-3, err_msg=out.name)
            runs = {"twinfer": lambda: e.run(feeds), "ort": lambda: sess.run(None, feeds)}
            times = {k: [] for k in runs}
            for b in range(args.blocks):  # ABBA
                for k in (("twinfer", "ort") if b % 2 == 0 else ("ort", "twinfer")):
                    times[k].append(block(runs[k], args.block_seconds))
            tw, o = statistics.median(times["twinfer"]), statistics.median(times["ort"])
            rows.append({"model": name, "threads": threads, "twinfer_ms": tw, "ort_ms": o, "ratio": tw / o,
                         "detections": int(want[0].shape[0])})
            print(f"{name:22s} {threads:7d} {tw:11.3f} {o:9.3f} {tw / o:6.2f} {want[0].shape[0]:10d}")
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
