"""The twinfer command line (also `python -m twinfer`)."""

from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from . import demo

    result = demo.run(device=args.device, iterations=args.iterations)
    return 0 if result["min_cosine"] > 0.999 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twinfer", description="Fast neural-network inference.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run all-MiniLM-L6-v2 next to sentence-transformers and onnxruntime")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--iterations", type=int, default=30, help="timed runs per runtime")
    p.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
