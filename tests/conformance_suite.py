"""The ONNX backend conformance suite (onnx.backend.test) wired to twinfer:
which cases run, which are excluded (training ops only, each with a reason),
and which are known to fail today (tests/conformance/known_failures.txt, run
as strict expected failures so a fix shows up as an unexpected pass).

Used by tests/test_conformance.py and tools/conformance_report.py."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
KNOWN_FAILURES = HERE / "conformance" / "known_failures.txt"

# Training-only ops and modes: the only cases left out, each with its reason.
EXCLUDED = {
    r"^test_adagrad": "training op (ai.onnx.preview.training Adagrad optimizer)",
    r"^test_adam": "training op (ai.onnx.preview.training Adam optimizer)",
    r"^test_momentum": "training op (ai.onnx.preview.training Momentum optimizer)",
    r"^test_nesterov_momentum": "training op (ai.onnx.preview.training Momentum optimizer)",
    r"^test_gradient": "training op (ai.onnx.preview.training Gradient)",
    r"^test_training_dropout": "Dropout in training mode (random mask; inference engine)",
    r"^test_batchnorm_.*training_mode": "BatchNormalization in training mode (batch statistics, running-stat updates)",
}

# The kinds of cases onnx ships (node cases are built in memory; "real" are
# the light model-zoo models stored in the wheel).
KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator", "real")


def excluded_reason(name: str) -> str | None:
    for pattern, why in EXCLUDED.items():
        if re.search(pattern, name):
            return why
    return None


def known_failures() -> dict[str, str]:
    """{test name: reason} from known_failures.txt ("name  # reason" per line)."""
    out = {}
    if KNOWN_FAILURES.exists():
        for line in KNOWN_FAILURES.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, why = line.partition("#")
            out[name.strip()] = why.strip()
    return out


def load_cases() -> dict[str, object]:
    """{test name: onnx TestCase} for every kind the suite covers."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {}
        for kind in KINDS:
            for case in load_model_tests(kind=kind):
                cases[case.name] = case
    return cases


def op_types(case) -> list[str]:
    """The ops a case's model uses (node cases: the op under test)."""
    import onnx

    model = case.model
    if model is None and case.model_dir is not None:
        path = Path(case.model_dir) / "model.onnx"
        if path.exists():
            model = onnx.load(str(path), load_external_data=False)
    if model is None and case.url and case.url.startswith("onnx/backend/test/data/light/"):
        path = Path(onnx.__file__).parent.parent / case.url
        model = onnx.load(str(path), load_external_data=False)
    if model is None:
        return []
    return sorted({n.op_type for n in model.graph.node})


def backend_test(module_name: str, device: str = "CPU"):
    """An onnx BackendTest over twinfer with the exclusions and known failures applied."""
    import onnx.backend.test

    import twinfer.backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(twinfer.backend, module_name)
    for pattern in EXCLUDED:
        bt.exclude(pattern)
    for name in known_failures():
        bt.xfail(rf"^{re.escape(name)}_{device.lower()}$")
    return bt
