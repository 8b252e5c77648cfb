"""The short table at the end of tools/gpu_check.sh: per test file passed /
failed / skipped (with the first failures), the sanitizer's verdict, and the
benchmarks' tables. Reads the folder gpu_check.sh wrote.

    python tools/gpu_summary.py OUT_DIR
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit(path: Path) -> tuple[int, int, int, list[str], float]:
    """passed, failed, skipped, the first failures, and pytest's seconds for the file."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return 0, 1, 0, [f"{path.name}: unreadable JUnit file (the process died?)"], 0.0
    seconds = sum(float(s.get("time") or 0) for s in root.iter("testsuite"))
    passed = failed = skipped = 0
    first: list[str] = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            node = case.find("failure") if case.find("failure") is not None else case.find("error")
            msg = (node.get("message") or "").splitlines()[0][:160] if node is not None else ""
            if len(first) < 5:
                first.append(f"{case.get('classname')}::{case.get('name')}: {msg}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped, first, seconds


def main(out: Path) -> int:
    print((out / "env.txt").read_text().strip() if (out / "env.txt").exists() else "env: missing")
    rows, failures = [], []
    totals = [0, 0, 0]
    for xml in sorted(out.glob("test_*.xml")):
        p, f, s, first, secs = junit(xml)
        rows.append((xml.stem, p, f, s, f"{secs:.0f}"))
        totals = [totals[0] + p, totals[1] + f, totals[2] + s]
        failures += first
    logs = {x.stem for x in out.glob("test_*.xml")}
    not_run = []
    for log in sorted(out.glob("test_*.log")):
        if log.stem in logs:
            continue
        text = log.read_text()
        if not text.strip():  # never started (out of time) or killed before printing
            not_run.append(log.stem)
            continue
        rows.append((log.stem, 0, 1, 0, "?"))  # a process killed before writing its JUnit file
        totals[1] += 1
        failures.append(f"{log.stem}: no JUnit file; log tail: {text[-300:]!r}")
    if rows:
        print(f"\n{'cuda tests':<28} {'passed':>7} {'failed':>7} {'skipped':>8} {'seconds':>8}")
        for name, p, f, s, secs in rows:
            print(f"{name:<28} {p:>7} {f:>7} {s:>8} {secs:>8}")
        print(f"{'total':<28} {totals[0]:>7} {totals[1]:>7} {totals[2]:>8}")
    for line in failures:
        print("  FAILED", line)
    if not_run:
        print("  not run (out of time?):", ", ".join(not_run))
    phases = out / "phases.log"
    if phases.exists():
        skipped = [ln for ln in phases.read_text().splitlines() if ln.startswith("skipped, out of time")]
        exits = [ln for ln in phases.read_text().splitlines()
                 if ln.startswith(("bench_", "memcheck", "conformance")) and " exit " in ln]
        if exits:
            print("\nexit codes: " + "; ".join(exits))
        if skipped:
            print(f"{len(skipped)} step(s) skipped for time (phases.log)")
    for log in ("memcheck.log", "memcheck_new.log"):
        san = out / log
        if san.exists():
            m = re.search(r"ERROR SUMMARY: (\d+) errors?", san.read_text())
            print(f"\ncompute-sanitizer memcheck ({log}): {m.group(0) if m else 'no summary line'}")
    conf = out / "conformance_cuda.log"
    if conf.exists():
        m = re.search(r"\*\*(\d+ of \d+ node cases pass \([\d.]+%\))", conf.read_text())
        print(f"\nONNX node cases on CUDA kernels only: {m.group(1) if m else 'no count (see conformance_cuda.log)'}")
        log = out / "conformance_cuda.log"
        wrong = [ln for ln in log.read_text().splitlines() if "wrong values:" in ln] if log.exists() else []
        for ln in wrong[:10]:
            print("  " + ln.strip())
    for bench in sorted(out.glob("bench_*.log")):
        all_lines = [ln for ln in bench.read_text().splitlines() if ln]
        if bench.stem == "bench_profile":  # one table per model and precision: the head of each
            print(f"\n{bench.stem}:")
            keep, n = [], 0
            for ln in all_lines:
                n = 0 if ln.startswith("== ") else n + 1
                if n < 14:
                    keep.append(ln)
            print("\n".join(keep))
            continue
        # The tables, not the per-row JSON the benchmarks also print; but when
        # a benchmark died before its table, its JSON rows are all there is.
        table = [ln for ln in all_lines if not ln.startswith("{")]
        lines = table if len(table) >= 3 else all_lines
        print(f"\n{bench.stem}:")
        print("\n".join(lines[-26:]) if lines else "  (empty log: not run, or killed before printing)")
    print(f"\nTOTAL cuda tests: {totals[0]} passed, {totals[1]} failed")
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-check-out")))
