#!/usr/bin/env bash
# A crash that shows only now and then on the GPU machine: run a pytest
# selection again and again under cuda-gdb (the GPU image has no gdb; cuda-gdb
# debugs host code too) until it crashes or SECONDS pass, then print every
# thread's native backtrace at the crash.
#
#   tools/gpu_debug.sh 150 tests/test_concurrency_device.py -k framework_arrays
set -uo pipefail
cd "$(dirname "$0")/.."
secs=$1; shift
end=$(( $(date +%s) + secs ))
PY=${PYTHON:-python3}
i=0
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  log=$(mktemp)
  timeout -k 10 $(( end - $(date +%s) + 5 )) cuda-gdb -q -batch -ex "set pagination off" -ex "set confirm off" \
    -ex "handle SIGPIPE nostop noprint" -ex run -ex "thread apply all bt 40" \
    --args "$PY" -m pytest -q -p no:cacheprovider -m cuda "$@" > "$log" 2>&1
  if grep -q "received signal SIGSEGV\|received signal SIGABRT\|received signal SIGBUS" "$log"; then
    echo "run $i crashed:"
    grep -v "^\[New Thread\|^\[Thread .* exited\|^\[Detaching" "$log" | tail -400
    exit 1
  fi
  echo "run $i: $(grep -E 'passed|failed' "$log" | tail -1)"
done
echo "no crash in $i runs"
