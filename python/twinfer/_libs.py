"""Loads the shared libraries the extension needs before it is imported.

oneDNN comes from the ``onednn-cpu-gomp`` wheel, which puts ``libdnnl.so.3``
under ``<prefix>/lib``. Loading it by path (found through the wheel's own file
list) works in venvs, user installs and conda alike, where an rpath alone
would not."""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys


def _find_dnnl() -> str | None:
    try:
        dist = importlib.metadata.distribution("onednn-cpu-gomp")
        for f in dist.files or ():
            if f.name == "libdnnl.so.3":
                path = str(dist.locate_file(f))
                if os.path.exists(path):
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    candidate = os.path.join(sys.prefix, "lib", "libdnnl.so.3")
    return candidate if os.path.exists(candidate) else None


# GNU OpenMP's idle threads spin ~300k iterations before sleeping. When the
# cores are shared (a service next to other work, a notebook beside a build,
# two engines side by side) the spinning threads take the cores the working
# ones need. `python benchmarks/openmp_wait.py` (docs/performance.md): with 3
# busy processes on 2 cores, MiniLM b1 took 78 ms with libgomp's default and
# 37 ms with a spin count of 1000; idle, 1000 costs 4-11% (9.65 vs 8.73 ms).
# Dedicated machines may prefer GOMP_SPINCOUNT=300000 or OMP_WAIT_POLICY=ACTIVE.
# Set before libgomp loads; a user's own setting wins.
_SPIN_DEFAULT = "1000"


def _tame_openmp_spinning() -> None:
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = _SPIN_DEFAULT


def preload() -> None:
    _tame_openmp_spinning()
    path = _find_dnnl()
    if path:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
