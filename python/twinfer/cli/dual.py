"""`twinfer dual A B`: two models at once on one device, with twinfer.Parallel."""

from __future__ import annotations

import argparse

from ._models import MODEL_HELP, resolve

DESCRIPTION = """\
Run models A and B side by side with twinfer.Parallel (one execution context
each, sharing the device) on random inputs from each engine's input specs, and
print Parallel's profile: per-model latency and throughput alone and together.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("dual", help="two models at once on one device (twinfer.Parallel)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_a", metavar="A", help=MODEL_HELP)
    p.add_argument("model_b", metavar="B", help="the second model, same forms as A")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--batch", type=int, default=1, help="size of symbolic batch dims (default 1)")
    p.add_argument("--iterations", type=int, default=50, help="runs per model (default 50)")
    p.add_argument("--plot", default=None, metavar="PNG", help="save the timeline plot (needs matplotlib)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    import twinfer
    from twinfer._progress import Steps
    from twinfer.benchmark import random_feeds

    if not hasattr(twinfer, "Parallel"):
        print("twinfer dual: needs twinfer.Parallel (in progress)")
        return 2
    a = resolve(args.model_a, {}, args.batch, args.progress)
    b = resolve(args.model_b, {}, args.batch, args.progress)
    with Steps(2, "twinfer dual", enabled=args.progress) as s:
        s.step(f"building {a.label}")
        ea = twinfer.load(a.path, device=args.device)
        s.step(f"building {b.label}")
        eb = twinfer.load(b.path, device=args.device)
    rng = np.random.default_rng()
    feeds = [random_feeds(ea.inputs, a.default_shapes, args.batch, rng),
             random_feeds(eb.inputs, b.default_shapes, args.batch, rng)]
    par = twinfer.Parallel([ea, eb])
    report = par.profile(feeds, iterations=args.iterations)
    print(f"A: {a.label}\nB: {b.label}")
    print(report)
    if args.plot:
        fig = report.plot()
        fig.savefig(args.plot)
        print(f"wrote {args.plot}")
    return 0
