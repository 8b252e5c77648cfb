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


def preload() -> None:
    path = _find_dnnl()
    if path:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
