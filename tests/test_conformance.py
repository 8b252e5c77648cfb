"""The ONNX backend conformance suite (onnx.backend.test: node, simple,
pytorch-converted, pytorch-operator and the light model-zoo cases) on
twinfer's CPU backend, and on CUDA when a GPU is present (those cases skip
cleanly otherwise). Each case compares twinfer with the outputs onnx ships
(or the ONNX reference evaluator's).

Training-only cases are excluded (tests/conformance_suite.py says why);
cases that fail today are listed with their cause in
tests/conformance/known_failures.txt and run as strict expected failures, so
a case that starts passing fails here until it is taken off the list.
docs/conformance.md has the per-op counts (tools/conformance.py)."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

import conformance_suite  # noqa: E402

_backend_test = conformance_suite.backend_test(__name__)
globals().update(_backend_test.test_cases)
