#!/usr/bin/env bash
# Developer build without pip: compiles the extension into build/dev-NAME and
# lays out an importable package there (symlinks to python/twinfer + _core).
#   tools/devbuild.sh NAME [extra cmake args]   then   PYTHONPATH=build/dev-NAME/pkg pytest ...
set -euo pipefail
name=${1:-main}; shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
bdir=$root/build/dev-$name
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTWINFER_CUDA=${TWINFER_CUDA:-OFF} -DPython_EXECUTABLE="$(command -v $py)" \
  -Dpybind11_DIR="$($py -m pybind11 --cmakedir)" "$@" >/dev/null
ninja -C "$bdir" -j${JOBS:-2} >"$bdir/ninja.log" 2>&1 || { grep -E "error|Error" -A3 "$bdir/ninja.log" | head -60; exit 1; }
pkg=$bdir/pkg/twinfer
rm -rf "$pkg" && mkdir -p "$pkg"
for f in "$root"/python/twinfer/*; do ln -s "$f" "$pkg/"; done
ln -s "$bdir"/_core*.so "$bdir"/_spin_probe*.so "$pkg/"
echo "built: PYTHONPATH=$bdir/pkg"
