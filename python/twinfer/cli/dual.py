"""`twinfer dual A B`: two models at once on one device, with twinfer.Parallel."""

from __future__ import annotations

import argparse
import json

from ._models import MODEL_HELP, check_precision, resolve

DESCRIPTION = """\
Run models A and B side by side with twinfer.Parallel (one execution context
each, sharing the device; on the CPU the cores are split between them) on
random inputs from each engine's input specs, and print Parallel's profile:
the members back to back, then together, their overlap (serial time /
concurrent time), per-model latency percentiles alone and together, and each
context's memory.

--shapes takes NAME:DIMS items for inputs of either model (an item applies to
every model with an input of that name); symbolic dims not given take --batch
(first dim) or 1.

examples:
  twinfer dual a.onnx b.onnx --iterations 100 --plot timeline.png
  twinfer dual torchvision:resnet18 torchvision:mobilenet_v3_small --shapes input:1x3x96x96 --json dual.json
"""


def add_parser(sub) -> None:
    p = sub.add_parser("dual", help="two models at once on one device: overlap, latencies, timeline (twinfer.Parallel)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_a", metavar="A", help=MODEL_HELP)
    p.add_argument("model_b", metavar="B", help="the second model, same forms as A")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, sim (the simulated GPU)")
    p.add_argument("--precision", default=None,
                   help="fp32 (default for a model), tf32, fp16, bf16 (GPU); a saved engine keeps its own "
                        "(int8 and fp8 engines need calibration data: save them from Python and give the files)")
    p.add_argument("--batch", type=int, default=1, help="size of symbolic batch dims (default 1)")
    p.add_argument("--shapes", default=None, metavar="NAME:DIMS,...",
                   help="input shapes of either model, e.g. input:1x3x224x224 (see above)")
    p.add_argument("--iterations", type=int, default=50, help="runs per model and phase (default 50)")
    p.add_argument("--plot", default=None, metavar="PNG", help="save the timeline plot (needs matplotlib)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the profile as JSON")
    p.add_argument("--seed", type=int, default=None, help="seed of the random inputs")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=run)


def _shapes_for(specs, shapes: dict[str, list[int]]) -> dict[str, list[int]]:
    names = {s.name for s in specs}
    return {k: v for k, v in shapes.items() if k in names}


def run(args) -> int:
    import numpy as np

    import twinfer
    from twinfer._progress import Steps
    from twinfer.benchmark import parse_shapes, random_feeds
    from twinfer.errors import InvalidArgumentError

    shapes = parse_shapes(args.shapes)
    a = resolve(args.model_a, shapes, args.batch, args.progress)
    b = resolve(args.model_b, shapes, args.batch, args.progress)
    for m in (a, b):
        check_precision(args.precision, m.path, "dual")
    with Steps(2, "twinfer dual", enabled=args.progress) as s:
        s.step(f"building {a.label}")
        ea = twinfer.load(a.path, device=args.device, precision=args.precision)
        s.step(f"building {b.label}")
        eb = twinfer.load(b.path, device=args.device, precision=args.precision)
    unused = set(shapes) - {s.name for s in ea.inputs} - {s.name for s in eb.inputs}
    if unused:
        raise InvalidArgumentError(
            f"--shapes names {sorted(unused)} are inputs of neither model; A takes {[s.name for s in ea.inputs]}, "
            f"B takes {[s.name for s in eb.inputs]}"
        )
    rng = np.random.default_rng(args.seed)
    feeds = [random_feeds(e.inputs, {**(m.default_shapes or {}), **_shapes_for(e.inputs, shapes)}, args.batch, rng)
             for e, m in ((ea, a), (eb, b))]
    with twinfer.Parallel([ea, eb], names=["A", "B"]) as par:
        report = par.profile(feeds, iterations=args.iterations)
    print(f"A: {a.label}  inputs " + ", ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in feeds[0].items()))
    print(f"B: {b.label}  inputs " + ", ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in feeds[1].items()))
    print(report)
    if args.json:
        data = {"A": a.label, "B": b.label, "device": ea.device, "precision": ea.precision,
                "twinfer": twinfer.__version__, "profile": report.to_dict()}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, default=str)
        print(f"wrote {args.json}")
    if args.plot:
        fig = report.plot()
        fig.savefig(args.plot)
        print(f"wrote {args.plot}")
    return 0
