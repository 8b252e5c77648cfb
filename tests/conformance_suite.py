"""The ONNX backend conformance suite (onnx.backend.test) wired to twinfer:
which cases run, which are excluded (training ops only, each with a reason),
which random ones run as statistical checks, and which are known to fail
today (tests/conformance/known_failures.txt, run as strict expected failures
so a fix shows up as an unexpected pass).

Used by tests/test_conformance.py and tools/conformance_report.py."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

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

# Cases whose outputs are random: no run can equal the outputs onnx stored,
# so each runs a statistical check of the same model instead (the model's
# input tiled many times, the draws tested against the probabilities; see
# tests/statistical.py). They count as passing when the check passes.
RANDOM_CASES = {
    r"^test_bernoulli": "Bernoulli draws; the _expanded forms are ONNX's function body for it",
}


def ones_probability(name: str, p: np.ndarray) -> np.ndarray:
    """How likely a 1 is where the input is p. ONNX's function body for
    Bernoulli (the _expanded cases) is Cast(RandomUniformLike(x) > x), which
    draws a 1 with probability 1 - p, not p; the ONNX reference evaluator
    gives the same frequencies for those models."""
    return 1 - p if name.endswith("_expanded") else p

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


def random_case(name: str) -> bool:
    return any(re.search(p, name) for p in RANDOM_CASES)


def bernoulli_check(case, device: str, reps: int = 4000) -> None:
    """Runs a Bernoulli case's model on its input repeated ``reps`` times
    along axis 0 and tests the draws: the dtype and shape onnx stored, values
    0/1, and each element's frequency against its probability."""
    import copy

    import onnx

    import statistical
    import twinfer.backend

    model = copy.deepcopy(case.model)
    (x,), (want,) = case.data_sets[0]
    x, want = np.asarray(x), np.asarray(want)
    for v in list(model.graph.input) + list(model.graph.output):
        dim = v.type.tensor_type.shape.dim[0]
        dim.dim_value = dim.dim_value * reps
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    tiled = np.concatenate([x] * reps)
    (got,) = twinfer.backend.prepare(model, device).run([tiled])
    assert got.dtype == want.dtype, f"{case.name}: dtype {got.dtype}, onnx stored {want.dtype}"
    assert got.shape == tiled.shape, f"{case.name}: shape {got.shape}, expected {tiled.shape}"
    statistical.assert_bernoulli(got.reshape(reps, *x.shape), ones_probability(case.name, x.astype(np.float64)),
                                 case.name)


def replace_random_cases(bt, device: str) -> None:
    """The random cases' test functions become statistical checks."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {c.name: c for c in load_model_tests(kind="node") if random_case(c.name)}
    suffix = "_" + device.lower()
    for items in bt._test_items.values():  # onnx's runner keeps its tests there
        for test_name, item in items.items():
            name = test_name[: -len(suffix)] if test_name.endswith(suffix) else None
            if name is None or not random_case(name) or name not in cases:
                continue

            def check(self, case=cases[name]):
                bernoulli_check(case, device)

            check.__name__ = test_name
            item.func = check


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
    replace_random_cases(bt, device)
    return bt
