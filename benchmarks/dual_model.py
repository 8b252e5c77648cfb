"""Several models at once: twinfer.Parallel and twinfer.Pipeline against
running the same engines one after another.

    python benchmarks/dual_model.py [--device cpu|cuda] [--iterations N] [--json out.json] [--only SUBSTR]

On a GPU (--device cuda, the default where there is one) it measures what
benchmarks/dual_gpu.py describes: the batch-1 pairs serially, with
Parallel/Pipeline, as one CUDA graph, and with PyTorch on two streams (eager,
torch.compile unless --no-compile), and a high-priority model's p99 under a
low-priority load; --plot writes one timeline. What follows is the CPU run.

Scenarios (random weights, torchvision / the bundled MiniLM):
  * resnet50 + minilm            Parallel, two different models
  * mobilenet_v2 + efficientnet_b0  Parallel
  * detector -> crop -> classifier  Pipeline: a detector-like CNN (ResNet-18 trunk with a
                                    1x1 heat-map head), a Python crop around the hottest cell,
                                    MobileNetV2 on the crop
  * 2 x small CNN (1 thread each)   Parallel, the same engine twice (CPU: the clean case)

For each: serial = the members one after another in their own contexts with the
same thread budget as together; concurrent = Parallel.run (or Pipeline.map);
overlap = serial / concurrent (the median of --repeats profiles). "all cores" = each engine alone with every core,
back to back — what you would do without Parallel; gain = all-cores / concurrent.
On the CPU the inputs are smaller (--image-size 128, --seq 64, --crop 96) so the
whole run takes a few minutes on 2 cores; on the GPU use --image-size 224.
Prints a table and writes JSON (spans' summaries, percentiles, memory per context).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import twinfer
from twinfer._timing import measure, median_ms
from twinfer.concurrency._members import available_cores


# -- models -------------------------------------------------------------------------
def export_torchvision(folder: Path, name: str, size: int) -> Path:
    import torch
    import torchvision

    path = folder / f"{name}-{size}.onnx"
    if not path.exists():
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)().eval()
        torch.onnx.export(model, (torch.randn(1, 3, size, size),), str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}})
    return path


def export_detector(folder: Path, size: int) -> Path:
    """ResNet-18 up to layer3 (stride 16) + a 1x1 conv: a [N, 1, H/16, W/16] heat map."""
    import torch
    import torchvision

    path = folder / f"detector-{size}.onnx"
    if not path.exists():
        torch.manual_seed(0)
        r = torchvision.models.resnet18()
        trunk = torch.nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3,
                                    torch.nn.Conv2d(256, 1, 1)).eval()
        torch.onnx.export(trunk, (torch.randn(1, 3, size, size),), str(path), dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["heatmap"], dynamic_axes={"image": {0: "batch"}})
    return path


def export_small_cnn(folder: Path) -> Path:
    """Two 3x3 convs, 16 -> 128 -> 128 channels at 64x64 (1.3 GFLOP): ~7 ms per run on one core here."""
    from onnx import TensorProto, helper, numpy_helper

    path = folder / "small_cnn.onnx"
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((128, 16, 3, 3)) * 0.1).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((128, 128, 3, 3)) * 0.03).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 1, 1])], [w1, w2])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def image(rng, size):
    return {"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def text(rng, seq):
    ids = rng.integers(1000, 30000, size=(1, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def make_crop(size: int, crop: int):
    """Host step between detector and classifier: crop around the hottest heat-map cell."""

    def crop_hottest(out, item):
        heat = out["heatmap"].numpy()[0, 0]
        cy, cx = np.unravel_index(int(heat.argmax()), heat.shape)
        y = int(np.clip((cy + 0.5) * size / heat.shape[0] - crop / 2, 0, size - crop))
        x = int(np.clip((cx + 0.5) * size / heat.shape[1] - crop / 2, 0, size - crop))
        return {"input": np.ascontiguousarray(item["image"][:, :, y:y + crop, x:x + crop])}

    return crop_hottest


# -- measuring ----------------------------------------------------------------------
def all_cores_serial_ms(engines_feeds, iterations) -> float:
    """Each engine alone with its default (all-core) context, back to back, per iteration."""
    def once():
        for e, f in engines_feeds:
            e.run(f)
    return median_ms(measure(once, iterations, warmup=2))


def median_profile(make, repeats: int):
    """Profile `repeats` times; the run with the median overlap, and all overlaps."""
    profs = sorted((make() for _ in range(repeats)), key=lambda p: p.overlap)
    return profs[len(profs) // 2], [p.overlap for p in profs]


def parallel_row(engines, feeds, args, threads=None):
    par = twinfer.Parallel(engines, threads=threads, priorities=args.priorities)
    prof = median_profile(lambda: par.profile(feeds, iterations=args.iterations, warmup=2), args.repeats)
    allc = all_cores_serial_ms(list(zip(engines, feeds)), args.iterations)
    par.close()
    return prof, allc


def pipeline_row(stages, items, args):
    pipe = twinfer.Pipeline(stages, priorities=args.priorities)
    prof = median_profile(lambda: pipe.profile(items, warmup=2), args.repeats)
    t0 = time.perf_counter()  # the same items, stage after stage, engines with all cores
    for item in items:
        res = item
        for s in stages:
            if isinstance(s, twinfer.Engine):
                res = s.run({i.name: res[i.name] for i in s.inputs})
            else:
                res = s(res, item)
    allc = (time.perf_counter() - t0) * 1e3 / len(items)
    pipe.close()
    return prof, allc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if twinfer.cuda_available() else "cpu")
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--items", type=int, default=16, help="items through the pipeline")
    ap.add_argument("--repeats", type=int, default=3, help="profiles per scenario; the median-overlap one is shown")
    ap.add_argument("--image-size", type=int, default=None, help="default: 224 on cuda, 128 on cpu")
    ap.add_argument("--seq", type=int, default=None, help="MiniLM tokens; default 128 on cuda, 64 on cpu")
    ap.add_argument("--crop", type=int, default=None, help="classifier crop; default 224 on cuda, 96 on cpu")
    ap.add_argument("--priorities", default=None, help="e.g. high,normal (one per member)")
    ap.add_argument("--only", default="", help="comma-separated substrings of scenario names")
    ap.add_argument("--json", default=None, help="default: dual_model_<device>.json")
    ap.add_argument("--cache", default=None, help="folder for exported ONNX files (default: a temp dir)")
    gpu_opts = ap.add_argument_group("GPU run")
    gpu_opts.add_argument("--precision", default="fp32", choices=["fp32", "tf32"])
    gpu_opts.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile")
    gpu_opts.add_argument("--plot", default=None, help="write the timeline of --plot-scenario here (PNG)")
    gpu_opts.add_argument("--plot-scenario", default="resnet50 + minilm")
    gpu_opts.add_argument("--load-batch", type=int, default=32, help="batch of the low-priority load")
    gpu_opts.add_argument("--latency-runs", type=int, default=200, help="timed calls of the high-priority model")
    args = ap.parse_args()
    if args.device.startswith("cuda"):
        import dual_gpu

        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(args.cache or tmp)
            folder.mkdir(parents=True, exist_ok=True)
            report = dual_gpu.run(args, folder)
        out = Path(args.json or "dual_model_cuda.json")
        out.write_text(json.dumps(report, indent=2, default=str))
        print(f"\n{report['meta']}; JSON: {out}")
        return 0
    gpu = args.device.startswith("cuda")
    size = args.image_size or (224 if gpu else 128)
    seq = args.seq or (128 if gpu else 64)
    crop = args.crop or (224 if gpu else 96)
    det_size = max(crop, size)
    args.priorities = args.priorities.split(",") if args.priorities else None
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(0)
    load = lambda p: twinfer.load(p, device=args.device)  # noqa: E731
    wanted = lambda n: not args.only or any(s in n for s in args.only.split(","))  # noqa: E731

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.cache or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        scenarios = []
        if wanted("resnet50 + minilm"):
            from twinfer.models import minilm
            scenarios.append(("resnet50 + minilm", "parallel",
                              lambda: ([load(export_torchvision(folder, "resnet50", size)), load(minilm.export_onnx())],
                                       [image(rng, size), text(rng, seq)])))
        if wanted("mobilenet_v2 + efficientnet_b0"):
            scenarios.append(("mobilenet_v2 + efficientnet_b0", "parallel",
                              lambda: ([load(export_torchvision(folder, "mobilenet_v2", size)),
                                        load(export_torchvision(folder, "efficientnet_b0", size))],
                                       [image(rng, size), image(rng, size)])))
        if wanted("detector -> crop -> classifier"):
            def pipeline_setup():
                det, cls = load(export_detector(folder, det_size)), load(export_torchvision(folder, "mobilenet_v2", crop))
                items = [{"image": rng.standard_normal((1, 3, det_size, det_size)).astype(np.float32)}
                         for _ in range(args.items)]
                return [det, make_crop(det_size, crop), cls], items
            scenarios.append(("detector -> crop -> classifier", "pipeline", pipeline_setup))
        if wanted("2 x small CNN (1 thread each)"):
            def twins():
                e = load(export_small_cnn(folder))
                x = {"x": rng.standard_normal((1, 16, 64, 64)).astype(np.float32)}
                return [e, e], [x, x]
            scenarios.append(("2 x small CNN (1 thread each)", "parallel", twins))

        for name, kind, setup in scenarios:
            try:
                members, feeds = setup()
                if kind == "parallel":
                    threads = 1 if name.startswith("2 x") else None
                    prof, allc = parallel_row(members, feeds, args, threads)
                else:
                    prof, allc = pipeline_row(members, feeds, args)
            except twinfer.Error as e:  # a model this build cannot run yet: say so, go on
                print(f"{name}: skipped — {type(e).__name__}: {e}\n", flush=True)
                results.append({"scenario": name, "kind": kind, "device": args.device, "skipped": str(e)})
                continue
            prof, overlaps = prof
            per = prof.count
            row = {"scenario": name, "kind": kind, "device": args.device,
                   "threads": [m.threads for m in prof.members if m.kind == "engine"],
                   "serial_ms": prof.serial_s * 1e3 / per, "concurrent_ms": prof.concurrent_s * 1e3 / per,
                   "overlap": prof.overlap, "overlaps_of_repeats": overlaps, "all_cores_serial_ms": allc,
                   "gain_vs_all_cores": allc / (prof.concurrent_s * 1e3 / per), "profile": prof.to_dict()}
            results.append(row)
            print(prof, flush=True)
            print(f"  all cores, one engine at a time: {allc:.2f} ms  -> gain {row['gain_vs_all_cores']:.2f}x\n",
                  flush=True)

    meta = {"device": args.device, "cores": available_cores(), "iterations": args.iterations, "items": args.items,
            "image_size": size, "seq": seq, "crop": crop, "detector_size": det_size,
            "twinfer": twinfer.__version__, "time": time.strftime("%Y-%m-%d %H:%M")}
    out = Path(args.json or f"dual_model_{args.device.replace(':', '')}.json")
    out.write_text(json.dumps({"meta": meta, "rows": results}, indent=2))
    print("| scenario | threads | serial ms | concurrent ms | overlap (min..max) | all-cores serial ms | gain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "skipped" in r:
            print(f"| {r['scenario']} | skipped: {r['skipped'][:60]} | | | | | |")
            continue
        print(f"| {r['scenario']} | {r['threads']} | {r['serial_ms']:.2f} | {r['concurrent_ms']:.2f} | "
              f"{r['overlap']:.2f}x ({min(r['overlaps_of_repeats']):.2f}..{max(r['overlaps_of_repeats']):.2f}) | {r['all_cores_serial_ms']:.2f} | {r['gain_vs_all_cores']:.2f}x |")
    print(f"\nper iteration (pipeline: per item); {meta}; JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
