"""The examples run on the CPU and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

CASES = {
    "quickstart.py": "quickstart: twinfer matches onnxruntime",
    "torch_dropin.py": "torch.compile backend: matches PyTorch",
    "dual_model_pipeline.py": "pipeline: matches the sequential run",
}


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name, tmp_path):
    env = dict(os.environ, TWINFER_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert CASES[name] in r.stdout
