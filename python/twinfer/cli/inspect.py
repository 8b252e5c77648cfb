"""`twinfer inspect MODEL`: what is in a model and whether twinfer can run it."""

from __future__ import annotations

import argparse
import json

from ._models import MODEL_HELP, resolve

DESCRIPTION = """\
Show a model's inputs, outputs, opsets, op histogram, parameter count and
bytes, a FLOPs estimate (Conv, ConvTranspose, Gemm and MatMul only, at the
input shapes shown: declared dims, symbolic ones from --batch / --shapes), and
the ops this twinfer build does not support (found by loading the model).
"""


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="inputs, outputs, ops, parameters, FLOPs estimate, unsupported ops",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--batch", type=int, default=1, help="size of symbolic batch dims for the FLOPs estimate")
    p.add_argument("--shapes", default=None, metavar="NAME:DIMS,...", help="input shapes for the FLOPs estimate")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from twinfer.benchmark import parse_shapes
    from twinfer.model_info import describe

    shapes = parse_shapes(args.shapes)
    model = resolve(args.model, shapes, args.batch, args.progress)
    info = describe(model.path, shapes, args.batch)
    if model.module is not None:
        info.source = model.label
    print(info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info.to_dict(), f, indent=2, default=str)
        print(f"wrote {args.json}")
    return 0
