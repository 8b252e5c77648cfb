"""twinfer chooses GNU OpenMP's spin count at import as a time (about 50 µs of
spinning on this CPU), measured by a probe that must run before libgomp loads."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import twinfer
from twinfer import _libs


def _fresh_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(extra)
    return env


def _import_and_print(env: dict) -> str:
    code = "import os, twinfer; print(os.environ.get('GOMP_SPINCOUNT', '<unset>'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("ns, count", [(10.0, 5000), (26.0, 1923), (2.5, 20000), (0.0, 1000), (-1.0, 1000),
                                       (1e-3, 300_000), (1000.0, 500)])
def test_spin_count_is_a_time_budget(ns, count):
    assert _libs.spin_count_for(ns) == count


def test_import_sets_a_measured_spin_count():
    chosen = int(_import_and_print(_fresh_env()))
    assert 500 <= chosen <= 300_000
    if platform.machine() in ("x86_64", "AMD64", "aarch64"):
        # Measured, not the fallback: the probe's figure in this process gives
        # about the same count (timings vary, so within a factor of 3).
        ns = twinfer._spin_probe.spin_ns()
        assert ns > 0
        assert _libs.spin_count_for(ns) / 3 <= chosen <= _libs.spin_count_for(ns) * 3


@pytest.mark.parametrize("extra, expected", [({"GOMP_SPINCOUNT": "12345"}, "12345"),
                                             ({"OMP_WAIT_POLICY": "PASSIVE"}, "<unset>")])
def test_a_users_setting_wins(extra, expected):
    assert _import_and_print(_fresh_env(**extra)) == expected


def test_the_probe_loads_no_openmp():
    # GOMP_SPINCOUNT is read once, when libgomp loads: the probe must not bring
    # it (or oneDNN) in. Load the probe's file alone and look at the mappings.
    path = Path(twinfer._spin_probe.__file__)
    code = (
        "import importlib.machinery, importlib.util, sys\n"
        f"loader = importlib.machinery.ExtensionFileLoader('twinfer._spin_probe', {str(path)!r})\n"
        f"spec = importlib.util.spec_from_file_location('twinfer._spin_probe', {str(path)!r}, loader=loader)\n"
        "m = importlib.util.module_from_spec(spec); loader.exec_module(m)\n"
        "print(m.spin_ns(1000, 1))\n"
        "print(open('/proc/self/maps').read())\n"
    )
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps on this system")
    r = subprocess.run([sys.executable, "-c", code], env=_fresh_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    maps = r.stdout
    assert "libgomp" not in maps and "libdnnl" not in maps and "libiomp" not in maps
    assert float(maps.splitlines()[0]) >= 0.0


def _spin_info(env: dict, first: str = "") -> dict:
    code = f"{first}\nimport json, twinfer; print(json.dumps(twinfer.build_info()['openmp_spin']))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_build_info_says_whether_the_count_applies():
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps on this system")
    fresh = _spin_info(_fresh_env())
    assert fresh["set_by"] == "twinfer" and fresh["applies"] is True and "why_not" not in fresh
    assert 500 <= int(fresh["GOMP_SPINCOUNT"]) <= 300_000 and fresh["ns_per_iteration"] >= 0
    assert _spin_info(_fresh_env(GOMP_SPINCOUNT="777")) == {"set_by": "user", "GOMP_SPINCOUNT": "777",
                                                            "OMP_WAIT_POLICY": None}
    # An OpenMP runtime loaded first keeps its own default: said, not hidden.
    # (torch ships libgomp.so.1; without torch, load the system's.)
    has_torch = importlib.util.find_spec("torch") is not None
    first = "import torch" if has_torch else "import ctypes; ctypes.CDLL('libgomp.so.1')"
    late = _spin_info(_fresh_env(), first)
    assert late["set_by"] == "twinfer"
    assert late["applies"] is False and "before twinfer" in late["why_not"], late
