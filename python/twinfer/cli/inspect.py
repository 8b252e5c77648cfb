"""`twinfer inspect MODEL`: what is in a model and whether twinfer can run it."""

from __future__ import annotations

import argparse
import json
import os

import twinfer

from ._models import MODEL_HELP, resolve

DESCRIPTION = """\
Show a model's inputs, outputs, opsets, op histogram, parameter count and
bytes, a FLOPs estimate (Conv, ConvTranspose, Gemm and MatMul only, at the
input shapes shown: declared dims, symbolic ones from --batch / --shapes), and
the ops this twinfer build does not support (found by loading the model).
With --device cuda (or sim), also where each node runs there: how many nodes
run on the device, which fall back to the CPU and why, and how many
host<->device copies that costs (at the shapes shown).
"""


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="inputs, outputs, ops, parameters, FLOPs estimate, unsupported ops",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--batch", type=int, default=1, help="size of symbolic batch dims for the FLOPs estimate")
    p.add_argument("--shapes", default=None, metavar="NAME:DIMS,...", help="input shapes for the FLOPs estimate")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda, cuda:N, or sim: also show where each node runs on that device")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from twinfer.benchmark import parse_shapes
    from twinfer.model_info import describe

    shapes = parse_shapes(args.shapes)
    if os.path.isfile(args.model) and twinfer._core.is_engine_file(args.model):
        return _inspect_engine(args.model, args.json, args.device)
    model = resolve(args.model, shapes, args.batch, args.progress)
    info = describe(model.path, shapes, args.batch)
    if model.module is not None:
        info.source = model.label
    print(info)
    if info.load_error and info.load_error.startswith("ModelFormatError"):
        # Not a model twinfer can read at all (an empty or broken file), as
        # bench says; unsupported ops are a report, and exit 0.
        return 1
    summary = info.to_dict()
    if args.device != "cpu":
        engine = twinfer.load(model.path, device=args.device)
        summary["placement"] = _print_placement(engine, info.flops_shapes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2, default=str)
        print(f"wrote {args.json}")
    return 0


def _print_placement(engine, shapes: dict) -> dict:
    """Where each node of the plan at ``shapes`` runs on the engine's device."""
    rows = engine.kernel_report({name: tuple(dims) for name, dims in shapes.items()})
    device = engine.device.split(":")[0]
    on_device = [r for r in rows if r.backend == device]
    on_cpu = [r for r in rows if r.backend == "cpu"]
    copies = [r for r in rows if r.backend == "copy"]
    print(f"placement on {engine.device}: {len(on_device)} nodes on the device, {len(on_cpu)} on the CPU, "
          f"{len(copies)} host<->device copies")
    reasons: dict[str, list[str]] = {}
    for r in on_cpu:
        reasons.setdefault(r.note or "no device kernel", []).append(r.op)
    for why, ops in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        counts = {op: ops.count(op) for op in sorted(set(ops))}
        print(f"  on the CPU: {', '.join(f'{op} x{n}' for op, n in counts.items())} ({why})")
    return {"device": engine.device, "on_device": len(on_device), "on_cpu": len(on_cpu), "copies": len(copies),
            "cpu_nodes": [[r.node, r.op, r.note] for r in on_cpu]}


def _inspect_engine(path: str, json_path: str | None, device: str = "cpu") -> int:
    """A saved engine: what it was built into (its graph is already optimised)."""
    engine = twinfer.load(path, device=device)
    summary = {
        "engine": path, "precision": engine.precision,
        "inputs": [[s.name, s.dtype, list(s.shape)] for s in engine.inputs],
        "outputs": [[s.name, s.dtype, list(s.shape)] for s in engine.outputs],
        "ops": engine._core.op_histogram(), "build passes": engine.stats()["passes"],
    }
    print(f"twinfer engine file {path} (precision {engine.precision}; optimised graph, no pass runs on load)")
    for key in ("inputs", "outputs"):
        print(f"  {key}:")
        for name, dtype, shape in summary[key]:
            print(f"    {name}: {dtype}{shape}")
    print("  ops: " + ", ".join(f"{op} x{n}" for op, n in sorted(summary["ops"].items(), key=lambda kv: -kv[1])))
    print("  built with:")
    for line in summary["build passes"]:
        print(f"    {line}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(summary, f, indent=2)
        print(f"wrote {json_path}")
    return 0
