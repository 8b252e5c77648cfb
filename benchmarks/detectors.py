"""Detection models whose output sizes depend on the data (NonZero, NMS):
torchvision's SSDlite320-MobileNetV3 and Faster R-CNN MobileNetV3-320-FPN
with random weights, exported to ONNX, twinfer and onnxruntime on the CPU in
one process, interleaved blocks: median ms and the ratio twinfer /
onnxruntime (lower is better for twinfer), after checking that both return
the same detections. Not a test: no assertion on time.

    python benchmarks/detectors.py [--threads 1 2] [--blocks 5] [--models ssdlite320 fasterrcnn_mbv3_320]
    python benchmarks/detectors.py --device cuda     # on a GPU: see below

On a GPU (--device cuda): twinfer on the device with the value-dependent tail
staged there (NMS and NonZero run alone, their counts read back:
runtime/staged_tail.h), the same with TWINFER_STAGED_TAIL=0 (the tail through
the host evaluator), and torchvision's own model in PyTorch eager on the GPU,
each from a NumPy image to NumPy detections, after checking twinfer's
detections against onnxruntime's (CPU); wall-clock medians of interleaved
blocks, with the CPU nodes each twinfer engine ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np

from interleaved import block  # benchmarks/interleaved.py

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


def torch_model(name: str):
    import torch
    import torchvision.models.detection as det

    torch.manual_seed(0)  # the weights export() gave the ONNX file
    make = {"ssdlite320": det.ssdlite320_mobilenet_v3_large,
            "fasterrcnn_mbv3_320": det.fasterrcnn_mobilenet_v3_large_320_fpn}[name]
    return make(weights=None, weights_backbone=None).eval()


def gpu_main(args) -> None:
    import os

    import onnxruntime as ort
    import torch

    import twinfer

    folder = Path(tempfile.mkdtemp(prefix="twinfer-detectors-"))
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'model':22s} {'staged ms':>10s} {'host tail ms':>13s} {'torch eager ms':>15s} "
          f"{'torch / staged':>15s} {'cpu nodes staged / host':>24s} {'detections':>10s}")
    for name in args.models:
        path = export(name, folder)
        x = rng.random((3, 320, 320), dtype=np.float32)
        feeds = {"x": x}
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        engines = {}
        for label, env in (("staged", None), ("host tail", "0")):
            if env is None:
                os.environ.pop("TWINFER_STAGED_TAIL", None)
            else:
                os.environ["TWINFER_STAGED_TAIL"] = env  # read when a plan is built: the first run below
            e = twinfer.load(path, device=args.device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the host tail's note
                got = e.run(feeds)
            for out, w in zip(e.outputs, want):  # the same detections, before any timing
                np.testing.assert_allclose(got[out.name].numpy(), w, rtol=1e-3, atol=1e-3, err_msg=out.name)
            engines[label] = e
        os.environ.pop("TWINFER_STAGED_TAIL", None)
        torch_device = "cpu" if args.device.startswith("sim") else args.device  # sim: a dry run of this script
        model = torch_model(name).to(torch_device)
        image = torch.from_numpy(x)

        def torch_run():
            with torch.inference_mode():
                out = model([image.to(torch_device)])[0]
            return {k: v.cpu().numpy() for k, v in out.items()}

        runs = {"staged": lambda: engines["staged"].run(feeds), "host tail": lambda: engines["host tail"].run(feeds),
                "torch": torch_run}
        for run in runs.values():
            run()  # warm-up (plans, cuDNN choices)
        times = {k: [] for k in runs}
        for b in range(args.blocks):
            for k in (list(runs) if b % 2 == 0 else list(runs)[::-1]):
                times[k].append(block(runs[k], args.block_seconds))
        med = {k: statistics.median(v) for k, v in times.items()}
        cpu = {k: sum(r.backend == "cpu" for r in engines[k].kernel_report({"x": x.shape})) for k in engines}
        rows.append({"model": name, "staged_ms": med["staged"], "host_tail_ms": med["host tail"],
                     "torch_eager_ms": med["torch"], "cpu_nodes": cpu, "detections": int(want[0].shape[0])})
        print(f"{name:22s} {med['staged']:10.3f} {med['host tail']:13.3f} {med['torch']:15.3f} "
              f"{med['torch'] / med['staged']:14.2f}x {cpu['staged']:>11d} / {cpu['host tail']:<10d} "
              f"{want[0].shape[0]:10d}")
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(json.dumps({"device": args.device, "gpu": gpu, "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.4)
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    ap.add_argument("--device", default="cpu", help="cuda: twinfer staged / host tail / torch eager on the GPU")
    args = ap.parse_args()
    if args.device != "cpu":
        return gpu_main(args)
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
