"""twinfer's PEP 517 build backend: scikit-build-core, plus NVIDIA's cuBLAS
and cuDNN wheels (and cuDNN's header-only frontend) as build requirements
when the CUDA backend will be built (nvcc present, TWINFER_CUDA not OFF).
Their headers (cublasLt.h, cudnn.h, cudnn_frontend.h, CUTLASS's) are
what the CUDA GEMM and convolution compile against; the libraries themselves
are opened at run time from the user's environment
(csrc/backends/cuda/libraries.cc), never linked. A CPU-only build does not
download the ~1 GB of wheels."""

from __future__ import annotations

import os
import shutil

from scikit_build_core import build as _skb
from scikit_build_core.build import (  # noqa: F401  (re-exported hooks)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

# The frontend is header-only (cuDNN's graph API: fused attention); 1.28.0 is
# its last release that pulls in no other packages (later ones require
# nvidia-cutlass-dsl).
# CUTLASS's C++ headers come in NVIDIA's nvidia-cutlass wheel (its Python
# tools pull in a few packages the build does not use): the Hopper int8 GEMM
# with its scales in the epilogue (csrc/backends/cuda/scaled_gemm.h).
CUDA_BUILD_REQUIRES = ["nvidia-cublas>=13,<14", "nvidia-cudnn-cu13>=9,<10", "nvidia-cudnn-frontend==1.28.0",
                       "nvidia-cutlass==4.2.0.0"]


def _cuda_backend_wanted() -> bool:
    mode = os.environ.get("TWINFER_CUDA", "AUTO").upper()
    if mode == "OFF":
        return False
    if mode == "ON":
        return True
    # Where CMake's CUDA detection looks too (CMakeLists.txt: check_language(CUDA)).
    return bool(os.environ.get("CUDACXX") or shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"))


def get_requires_for_build_wheel(config_settings=None):
    extra = CUDA_BUILD_REQUIRES if _cuda_backend_wanted() else []
    return list(_skb.get_requires_for_build_wheel(config_settings)) + extra


def get_requires_for_build_editable(config_settings=None):
    extra = CUDA_BUILD_REQUIRES if _cuda_backend_wanted() else []
    return list(_skb.get_requires_for_build_editable(config_settings)) + extra
