#!/usr/bin/env bash
# The core built with AddressSanitizer + UndefinedBehaviorSanitizer (GCC),
# the fast tests run against it, then a leak check (LeakSanitizer).
#   tools/sanitize.sh                      build, the fast suite, the leak check
#   tools/sanitize.sh tests/test_bad_input.py tests/test_onnx_reader.py   some tests only
#   SANITIZE_LEAKS_ONLY=1 tools/sanitize.sh  build and the leak check only
# Python, NumPy, oneDNN and the other libraries are not instrumented: ASan's
# runtime is preloaded so it sees every allocation, and checks every memory
# access our code (csrc/) makes. A sanitizer report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
# -O1: sanitized code at -O3 compiles far slower and reports less precisely.
TWINFER_CUDA=OFF "$root/tools/devbuild.sh" asan -DTWINFER_SANITIZE=address,undefined \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g -DNDEBUG"
pkg=$root/build/dev-asan/pkg
logs=$root/build/dev-asan/reports
rm -rf "$logs" && mkdir -p "$logs"

export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# allocator_may_return_null: an allocation too large for the machine must
# reach our code as a failed allocation (OutOfMemoryError), as without ASan.
# detect_leaks=0 here: the leak check below runs at a point where Python is
# alive and consistent, not at interpreter exit.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:log_path=$logs/asan"
# UBSan keeps going after a report so one run lists them all; any report fails the run below.
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$logs/ubsan"
export PYTHONPATH=$pkg

# This build is host-only: the tests that place nodes as CUDA would
# (sim_coverage="cuda", marked cuda_build) skip themselves, with the reason.
# No -x: the suite takes about half an hour under the sanitizers, so one run
# should list every failure.
status=0
if [ -z "${SANITIZE_LEAKS_ONLY:-}" ]; then
  echo "[sanitize] tests under ASan + UBSan: ${*:-the fast suite}"
  if [ $# -gt 0 ]; then
    (cd "$root" && "$py" -m pytest -q -p no:cacheprovider "$@") || status=$?
  else
    (cd "$root" && "$py" -m pytest -q -p no:cacheprovider tests) || status=$?
  fi
fi

echo "[sanitize] leak check (LeakSanitizer)"
ASAN_OPTIONS="detect_leaks=1:leak_check_at_exit=0:allocator_may_return_null=1:log_path=$logs/lsan" \
  LSAN_OPTIONS="suppressions=$root/tools/lsan_suppressions.txt:print_suppressions=1" \
  PYTHONMALLOC=malloc "$py" "$root/tools/leak_check.py" || status=$?

if ls "$logs"/* >/dev/null 2>&1; then
  echo "[sanitize] sanitizer reports:" >&2
  for f in "$logs"/*; do echo "--- $f" >&2; head -80 "$f" >&2; done
  status=1
fi
[ $status -eq 0 ] && echo "[sanitize] clean" || echo "[sanitize] FAILED" >&2
exit $status
