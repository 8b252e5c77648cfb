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


# GNU OpenMP's idle threads spin GOMP_SPINCOUNT iterations (libgomp's default
# 300000) before they sleep. Too long, and when the cores are shared (a service
# next to other work, a notebook beside a build, two engines side by side) the
# spinning threads take the time the working ones need; too short, and every
# operator of a small model pays a sleeping thread's wake-up (tens of µs on a
# VM). The count is iterations, whose cost differs between CPUs (Intel's
# manual gives `pause` ~140 cycles since Skylake, ~10 before), so
# twinfer spends a time instead: about 50 µs of spinning, long enough to bridge
# the gap between two operators. `python benchmarks/openmp_wait.py --spincounts`
# (docs/performance.md), 2-core Xeon VM, 10 ns per iteration: 1000 (10 µs)
# made MiniLM b1 16.4 ms idle against 12.0 ms at 5000 (52 µs), equal within
# noise with 3 busy processes; libgomp's 300000 took 1.7-3.7x longer loaded.
# Dedicated machines may prefer GOMP_SPINCOUNT=300000 or OMP_WAIT_POLICY=ACTIVE.
# Set before libgomp loads; a user's own setting wins.
SPIN_BUDGET_NS = 50_000
_SPIN_FALLBACK = 1000  # where the probe cannot measure (no pause-like instruction)
_SPIN_LIMITS = (500, 300_000)  # never longer than libgomp's own default


def spin_count_for(ns_per_iteration: float, budget_ns: float = SPIN_BUDGET_NS) -> int:
    """GOMP_SPINCOUNT that spins about `budget_ns` at `ns_per_iteration`."""
    if not ns_per_iteration or ns_per_iteration <= 0:
        return _SPIN_FALLBACK
    return int(min(max(round(budget_ns / ns_per_iteration), _SPIN_LIMITS[0]), _SPIN_LIMITS[1]))


# What twinfer did about the spin count, for build_info()["openmp_spin"].
openmp_spin: dict = {}


def _libgomp_loaded() -> bool | None:
    """Whether a libgomp is mapped into this process already (None: cannot tell)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return None


def _tame_openmp_spinning() -> None:
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        openmp_spin.update(set_by="user", GOMP_SPINCOUNT=os.environ.get("GOMP_SPINCOUNT"),
                           OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY"))
        return
    try:
        from . import _spin_probe  # links no OpenMP: safe before libgomp loads

        ns = _spin_probe.spin_ns()
    except ImportError:  # a build without the probe: the fixed count
        ns = 0.0
    count = spin_count_for(ns)
    os.environ["GOMP_SPINCOUNT"] = str(count)
    # libgomp reads the variable when it loads: one already loaded (torch
    # ships its own libgomp.so.1, which oneDNN then shares) keeps its default.
    loaded = _libgomp_loaded()
    openmp_spin.update(set_by="twinfer", GOMP_SPINCOUNT=str(count), ns_per_iteration=round(ns, 3),
                       applies=None if loaded is None else not loaded)
    if loaded:
        openmp_spin["why_not"] = ("libgomp was loaded before twinfer (torch ships its own), so its default spin "
                                  "applies; set GOMP_SPINCOUNT before starting Python to choose")


def preload() -> None:
    _tame_openmp_spinning()
    path = _find_dnnl()
    if path:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


# cuBLASLt and cuDNN come from NVIDIA's wheels (the `cuda` extra, or torch's
# dependencies): distribution, the file in it. The core opens them with
# dlopen when the CUDA backend first needs them, never at import, so twinfer
# imports on machines without them, a GPU or a driver.
_CUDA_LIBRARIES = {
    "cublasLt": (("nvidia-cublas", "nvidia-cublas-cu13"), "libcublasLt.so.13"),
    "cudnn": (("nvidia-cudnn-cu13",), "libcudnn.so.9"),
    # CUPTI only for kernel spans in concurrency profiles (profile(kernels=True)).
    "cupti": (("nvidia-cuda-cupti", "nvidia-cuda-cupti-cu13"), "libcupti.so.13"),
    # The shared CUDA runtime, for cuDNN's graph API (its frontend calls the
    # runtime through dlopen; twinfer's own runtime is linked statically).
    "cudart": (("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13"), "libcudart.so.13"),
}


def _find_in_distribution(dists: tuple[str, ...], filename: str) -> str | None:
    for name in dists:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name == filename:
                path = str(dist.locate_file(f))
                if os.path.exists(path):
                    return path
    return None


def register_cuda_libraries(core) -> None:
    """Tell the core where the CUDA libraries are (cheap: file lists only)."""
    if not core.build_info_cuda_compiled():
        return
    for lib, (dists, filename) in _CUDA_LIBRARIES.items():
        path = _find_in_distribution(dists, filename)
        if path:
            core.set_cuda_library_path(lib, path)
