#!/usr/bin/env python
"""Run the ONNX backend conformance suite on twinfer outside pytest and
report: failures grouped by cause, per-op pass/fail counts, and optionally the
generated docs/conformance.md and an updated known-failures list.

    PYTHONPATH=build/dev-NAME/pkg python tools/conformance.py                 # summary
    ... tools/conformance.py --include 'test_resize|test_upsample' -v          # some cases, every failure
    ... tools/conformance.py --markdown docs/conformance.md --update-known     # regenerate both
    ... tools/conformance.py --cuda-kernels sim --markdown docs/conformance.md # node cases CUDA's kernels cover

--cuda-kernels loads every case with allow_cpu_fallback=False, so a case passes only when every
node runs on a CUDA kernel: `gpu` on the GPU (the issue's count of node cases passing on CUDA),
`sim` on the simulated device placing nodes as CUDA would (no GPU needed: which cases CUDA's
kernels cover, the numbers computed by the CPU's kernels). With --markdown it rewrites only its
own block of the file.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import unittest
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import conformance_suite as cs  # noqa: E402


class KernelsOnly:
    """twinfer.backend with allow_cpu_fallback=False on CUDA (or on the
    simulated device placing nodes as CUDA would): a model loads only when
    every node has a CUDA kernel that takes it."""

    def __init__(self, sim: bool):
        self.sim = sim

    def supports_device(self, device: str) -> bool:
        import twinfer.backend

        return device.upper() == "CUDA" and (self.sim or twinfer.backend.supports_device("CUDA"))

    def prepare(self, model, device: str = "CUDA", **kwargs):
        import twinfer
        import twinfer.backend

        where = dict(device="sim", sim_coverage="cuda") if self.sim else dict(device="cuda")
        return twinfer.backend.BackendRep(twinfer.load(model, allow_cpu_fallback=False, **where))

    def run_model(self, model, inputs, device: str = "CUDA", **kwargs):
        return self.prepare(model, device).run(inputs)

    def run_node(self, node, inputs, device: str = "CUDA", outputs_info=None, **kwargs):
        raise NotImplementedError("twinfer runs whole models")

    def is_compatible(self, model, device: str = "CUDA", **kwargs) -> bool:
        return True


def run(include: str | None, device: str, backend=None):
    import onnx.backend.test

    import twinfer.backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(backend or twinfer.backend, "conformance")
        for p in cs.EXCLUDED:
            bt.exclude(p)
        if backend is None:  # the statistical checks load through twinfer.backend
            cs.replace_random_cases(bt, device)
        if include:
            bt.include(include)
        suite = bt.test_suite
        name = lambda t: t.id().split(".")[-1]  # noqa: E731
        all_names = [name(t) for t in _tests(suite)]  # running a suite empties it
        result = unittest.TestResult()
        suite.run(result)
    suffix = "_" + device.lower()
    # A failure (not an error) is an assertion on the outputs: wrong values,
    # whose last traceback line is often a row of numbers, so it is said here.
    failed = {name(t)[: -len(suffix)]: ("wrong values: " if (t, tb) in result.failures else "")
              + tb.strip().splitlines()[-1][:400]
              for t, tb in result.failures + result.errors if name(t).endswith(suffix)}
    ran = [n[: -len(suffix)] for n in all_names if n.endswith(suffix)]
    skipped = {name(t)[: -len(suffix)] for t, _ in result.skipped if name(t).endswith(suffix)}
    return [r for r in ran if r not in skipped], failed


def _tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _tests(t)
        else:
            yield t


def cuda_cause(msg: str) -> str:
    """The first node an allow_cpu_fallback=False load names, with why."""
    m = re.search(r"kernel: '[^']*' \(([^)]*)\): ([^;]*)", msg)  # placement: the node and why
    if m:
        return _numbers_as_n(f"{m.group(1)}: {m.group(2)}")[:140]
    m = re.search(r"kernel: '[^']*' \(([^)]*)\)", msg)  # at load: no CUDA kernel for the op at all
    if m:
        return f"{m.group(1)}: no CUDA kernel (or control flow)"
    if "depends on input values" in msg or "value-dependent" in msg:
        return "an output shape depends on input values: the CPU evaluates it"
    if "needs the CPU evaluator" in msg:  # strings, sequences, optionals
        return "strings, sequences or optionals: the CPU evaluates them"
    return cause(msg)


CUDA_BEGIN = "<!-- cuda kernels: tools/conformance.py --cuda-kernels MODE --markdown FILE rewrites this block -->"
CUDA_END = "<!-- end of cuda kernels -->"


def cuda_markdown(ran, failed, cases, seconds: float, mode: str) -> str:
    node = [n for n in ran if cases.get(n) is not None and cases[n].kind == "node"]
    bad = [n for n in node if n in failed]
    where = ("on an NVIDIA GPU" if mode == "gpu" else
             "on the simulated device placing nodes as CUDA would (placement by CUDA's kernels, numbers by "
             "the CPU's: an upper bound until a GPU run confirms it)")
    lines = [CUDA_BEGIN, "", f"## Node cases on CUDA kernels only ({mode})", "",
             f"Every case loaded with `allow_cpu_fallback=False` {where}, onnx {_onnx_version()}, "
             f"{seconds:.0f} s: a case passes only when every node runs on a CUDA kernel.", "",
             f"**{len(node) - len(bad)} of {len(node)} node cases pass "
             f"({100 * (len(node) - len(bad)) / max(1, len(node)):.1f}%).**", "",
             "| cases | first node without a CUDA kernel, or the failure |", "|---:|---|"]
    known = cs.known_failures()

    def why(x):
        if x in known:
            return "fails on the CPU too (tests/conformance/known_failures.txt)"
        msg = failed[x]
        if msg.startswith("wrong values: ") or "Mismatched elements" in msg or "Not equal to tolerance" in msg:
            return f"wrong values: {x}"  # by name: each is a bug of its own, to look at on the GPU
        return cuda_cause(msg)

    causes = collections.Counter(why(x) for x in bad)
    for c, n in causes.most_common():
        lines.append(f"| {n} | {c.replace('|', '/')} |")
    return "\n".join(lines + ["", CUDA_END]) + "\n"


def cause(msg: str) -> str:
    m = re.search(r"unsupported ops: (\w+)", msg)
    if m:
        return f"unsupported op {m.group(1)}"
    msg = re.sub(r"'[^']*'", "X", msg)
    return _numbers_as_n(msg)[:140]


def _numbers_as_n(msg: str) -> str:
    """Numbers as N, so that messages differing only in sizes group together;
    the digits of a name (float64, Conv_3) stay."""
    return re.sub(r"(?<![A-Za-z_0-9])\d+", "N", msg)


def markdown(ran, failed, cases, seconds: float, device: str) -> str:
    kinds = collections.Counter()
    kind_fail = collections.Counter()
    per_op = collections.defaultdict(lambda: [0, 0])
    for name in ran:
        case = cases.get(name)
        kind = case.kind if case else "?"
        kinds[kind] += 1
        kind_fail[kind] += name in failed
        ops = cs.op_types(case) if case and kind == "node" else [f"({kind} model)"]
        for op in ops[:1] if kind == "node" else ops:
            per_op[op][0 if name not in failed else 1] += 1
    total, bad = len(ran), len(failed)
    lines = [
        "# ONNX backend conformance",
        "",
        "Generated by `tools/conformance.py --markdown docs/conformance.md` (do not edit by hand):",
        f"the `onnx.backend.test` cases (onnx {_onnx_version()}) on twinfer's {device} backend, "
        f"{seconds:.0f} s. The same cases run in pytest (`tests/test_conformance.py`); the ones listed in",
        "`tests/conformance/known_failures.txt` run there as strict expected failures.",
        "",
        f"**Overall: {total - bad} of {total} cases pass ({100 * (total - bad) / max(1, total):.1f}%).**",
        "",
        "| kind | cases | pass | fail | pass rate |",
        "|---|---:|---:|---:|---:|",
    ]
    for k in sorted(kinds):
        n, f = kinds[k], kind_fail[k]
        lines.append(f"| {k} | {n} | {n - f} | {f} | {100 * (n - f) / n:.1f}% |")
    lines += ["", "Excluded (training only):", ""]
    for pattern, why in cs.EXCLUDED.items():
        lines.append(f"- `{pattern}`: {why}")
    lines += ["", "Random outputs, checked statistically (`tests/conformance_suite.py`, `tests/statistical.py`: "
              "the case's input repeated 4000 times, each element's frequency of ones against its probability "
              "by a chi-square test at a false-alarm rate of 1e-6, plus the stored output's dtype and shape):", ""]
    for pattern, why in cs.RANDOM_CASES.items():
        lines.append(f"- `{pattern}`: {why}")
    lines += ["", "## Per op (node cases; first op of the case's model)", "", "| op | pass | fail |", "|---|---:|---:|"]
    for op in sorted(per_op):
        p, f = per_op[op]
        lines.append(f"| {op} | {p} | {f}{' ❌' if f and not p else ''} |")
    causes = collections.Counter(cause(m) for m in failed.values())
    lines += ["", "## Why the failures fail", "", "| cases | cause |", "|---:|---|"]
    for c, n in causes.most_common():
        lines.append(f"| {n} | {c.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


HAND_WRITTEN = "<!-- hand-written from here on: tools/conformance.py keeps it -->"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--include", help="regex of test names to run (default: all)")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    ap.add_argument("--markdown", type=Path, help="write the report here")
    ap.add_argument("--update-known", action="store_true", help="rewrite tests/conformance/known_failures.txt")
    ap.add_argument("--cuda-kernels", choices=["sim", "gpu"],
                    help="count the cases that run with every node on a CUDA kernel (see above)")
    args = ap.parse_args()
    if args.cuda_kernels:
        return cuda_kernels_main(args)

    t0 = time.time()
    ran, failed = run(args.include, args.device)
    seconds = time.time() - t0
    print(f"{len(ran)} cases, {len(ran) - len(failed)} pass, {len(failed)} fail "
          f"({100 * (len(ran) - len(failed)) / max(1, len(ran)):.1f}% pass) in {seconds:.0f} s")
    if args.verbose:
        for name, msg in sorted(failed.items()):
            print(f"  {name}: {msg}")
    else:
        for c, n in collections.Counter(cause(m) for m in failed.values()).most_common():
            print(f"  {n:4d}  {c}")
    if args.markdown:
        text = markdown(ran, failed, cs.load_cases(), seconds, args.device)
        # The hand-written part after the marker (the real-model sweep) is kept.
        old = args.markdown.read_text() if args.markdown.exists() else ""
        if HAND_WRITTEN in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(HAND_WRITTEN):]
        args.markdown.write_text(text)
        print("wrote", args.markdown)
    if args.update_known:
        if args.include:
            print("--update-known needs the whole suite (no --include)", file=sys.stderr)
            return 2
        lines = ["# Conformance cases that fail today, with why (tools/conformance.py --update-known writes this).",
                 "# tests/test_conformance.py runs them as strict expected failures: fixing one makes it fail",
                 "# until it is removed here."]
        lines += [f"{name}  # {cause(msg)}" for name, msg in sorted(failed.items())]
        cs.KNOWN_FAILURES.parent.mkdir(parents=True, exist_ok=True)
        cs.KNOWN_FAILURES.write_text("\n".join(lines) + "\n")
        print("wrote", cs.KNOWN_FAILURES)
    return 0


def cuda_kernels_main(args) -> int:
    t0 = time.time()
    ran, failed = run(args.include, "CUDA", KernelsOnly(sim=args.cuda_kernels == "sim"))
    seconds = time.time() - t0
    text = cuda_markdown(ran, failed, cs.load_cases(), seconds, args.cuda_kernels)
    print(text)
    if args.verbose:
        for name, msg in sorted(failed.items()):
            print(f"  {name}: {msg}")
    if args.markdown:
        old = args.markdown.read_text() if args.markdown.exists() else ""
        if CUDA_BEGIN in old and CUDA_END in old:
            new = old[: old.index(CUDA_BEGIN)] + text.rstrip("\n") + old[old.index(CUDA_END) + len(CUDA_END):]
        else:  # after the hand-written marker, which the CPU report keeps
            if HAND_WRITTEN not in old:
                old = old.rstrip("\n") + "\n\n" + HAND_WRITTEN + "\n"
            new = old.rstrip("\n") + "\n\n" + text
        args.markdown.write_text(new)
        print("wrote", args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
