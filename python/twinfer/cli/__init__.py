"""The twinfer command line: one module per command (bench, inspect, dual, demo, serve).

    twinfer bench MODEL ...     latency percentiles and throughput, peers side by side
    twinfer inspect MODEL       inputs, outputs, ops, parameters, FLOPs estimate, unsupported ops
    twinfer dual A B            two models at once on one device (twinfer.Parallel)
    twinfer demo                the main job: all-MiniLM-L6-v2 next to its reference
    twinfer serve --model-repository DIR   a KServe v2 server (HTTP, gRPC, metrics), as Triton
"""

from __future__ import annotations

import argparse
import sys

from . import bench, demo, dual, inspect, serve


def build_parser() -> argparse.ArgumentParser:
    import twinfer

    parser = argparse.ArgumentParser(
        prog="twinfer", description="Fast neural-network inference: benchmark, inspect and run models.",
        epilog="`twinfer COMMAND --help` explains each command.",
    )
    parser.add_argument("--version", action="version", version=f"twinfer {twinfer.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (bench, inspect, dual, demo, serve):
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from twinfer.errors import Error

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Error as e:  # a clean message, not a traceback, for what the user can fix
        print(f"twinfer {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `twinfer inspect m.onnx | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        # Also the user's to fix, from the libraries underneath: a --json path
        # in a missing folder, a negative --batch, a garbage file for inspect
        # (protobuf's DecodeError), a string input bench cannot make data for.
        # One line, as for the above; anything else is a bug: its traceback.
        user = isinstance(e, (OSError, ValueError, KeyError, MemoryError)) or type(e).__name__ == "DecodeError"
        if not user:
            raise
        print(f"twinfer {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
