"""`twinfer demo`: all-MiniLM-L6-v2 next to sentence-transformers and onnxruntime."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run all-MiniLM-L6-v2 next to sentence-transformers and onnxruntime")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--iterations", type=int, default=30, help="timed runs per runtime")
    p.set_defaults(func=run)


def run(args) -> int:
    from twinfer import demo

    result = demo.run(device=args.device, iterations=args.iterations)
    return 0 if result["min_cosine"] > 0.999 else 1
