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
