#!/usr/bin/env bash
# Run HERE (the development machine, which reaches PyPI) before a GPU run: the
# GPU machine has no network, and lacks the wheels twinfer builds against
# (oneDNN) and a few test extras. They go into .whl/ (ignored by .gitignore),
# which the device tool carries: run(carry=[".whl", ".gpu_commit"]). Also
# writes .gpu_commit (the machine receives the working tree without .git).
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse HEAD > .gpu_commit
mkdir -p .whl
get() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl "$@"
}
# 39 MB of the 64 MiB a call may carry; the MiniLM weights wheel (84 MB) does
# not fit, so the GPU run checks models the tests export themselves.
get onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
# The serving tests' server and clients (7 MB; the machine has grpcio,
# protobuf, anyio, click, h11): without them test_serve*.py is not even
# collected there, and KIND_GPU serving goes unchecked.
get tritonclient==2.73.0 python-rapidjson==1.25 geventhttpclient==2.6.1 gevent==26.9.0 greenlet==3.5.6 \
  zope.event==6.2 zope.interface==8.7 brotli==1.2.1 starlette==1.10.0 uvicorn==0.54.0
# cuDNN's header-only frontend (a CUDA build requirement; 6 MB): fused attention.
get nvidia-cudnn-frontend==1.28.0
# CUTLASS's headers (a CUDA build requirement; 6 MB, installed with --no-deps:
# its Python tools' dependencies are not needed to build): the int8 GEMMs.
get nvidia-cutlass==4.2.0.0
du -sh .whl
