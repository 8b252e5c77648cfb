#!/usr/bin/env bash
# One command for a GPU machine: build with every core, run the `cuda` tests
# (each test file in its own process, so a sticky CUDA error only ends its
# own file), compute-sanitizer memcheck on our kernels with small shapes, the
# GPU benchmarks, then a short table (tools/gpu_summary.py).
#
#   tools/gpu_check.sh                 # all phases: build test sanitize bench
#   tools/gpu_check.sh build test      # some of them (a warm machine keeps the build)
#   phases: build test sanitize bench (= bench_runtime bench_dual bench_quant)
#
# The device tool allows 600 s a command and brings back 8 files from $OUT:
# the script stops starting work GPU_CHECK_BUDGET seconds (default 570) after
# it began, cuts each step's timeout to what is left, and writes its logs to
# $WORK (kept on a warm machine, so a second call continues the first),
# packed after every phase into $OUT/gpu_check_logs.tar.gz beside
# phases.log, summary.txt and the timeline. A plan for one session:
#   run 1: tools/gpu_check.sh build test       run 2 (within 30 s): sanitize bench
#
# The GPU machine has no network: run tools/gpu_wheels.sh on the development
# machine first and carry .whl (run(carry=[".whl"], ...)). Record the run in
# docs/gpu-runs/ (commit, GPU, driver, the table).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${WORK:-/tmp/gpu-check}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
phases=${*:-build test sanitize bench}
deadline=$(( $(date +%s) + ${GPU_CHECK_BUDGET:-570} ))
stamp() { echo "[gpu_check] $(date +%H:%M:%S) $*" | tee -a "$WORK/phases.log"; }
has() { [[ " $phases " == *" $1 "* ]] || { [[ $1 == bench_* ]] && [[ " $phases " == *" bench "* ]]; }; }
# within SECONDS CMD...: CMD under `timeout`, cut to the time left before the
# deadline (15 s kept for packing); not started at all when under 20 s are left.
within() {
  local want=$1 left=$(( deadline - $(date +%s) - 15 )); shift
  if [ $left -lt 20 ]; then echo "skipped, out of time: $*" >> "$WORK/phases.log"; return 124; fi
  timeout $(( want < left ? want : left )) "$@"
}
# What comes back: the logs packed, and the few files read first.
pack() {
  tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$WORK" . 2>/dev/null
  for f in phases.log summary.txt env.txt dual_timeline.png; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
  return 0
}

{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
  $PY -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, torch.version.cuda)"
  nvcc --version | tail -1
  cat .gpu_commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo "commit: unknown (write it to .gpu_commit)"
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt"

if has build; then
  stamp "build"
  if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile .whl/*.whl >> "$WORK/build.log" 2>&1
  fi
  # All cores, sm_90 only; --no-build-isolation: the machine has the build
  # requirements installed and no network to fetch them. pyproject's
  # build-dir (build/, kept on a warm machine): a second build recompiles only
  # what changed.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) TWINFER_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" \
    within 540 $PY -m pip install --no-build-isolation --no-deps -v . >> "$WORK/build.log" 2>&1
  rc=$?
  stamp "build exit $rc"
  [ $rc -eq 0 ] || { tail -40 "$WORK/build.log"; pack; exit $rc; }
  (cd /tmp && $PY -c "import twinfer, json; print(json.dumps({k: v for k, v in twinfer.build_info().items() if k != 'ops'}))") \
    > "$WORK/build_info.json" 2>&1
  cat "$WORK/build_info.json"
  pack
fi

if has test; then
  stamp "cuda tests"
  # Every test file with a cuda test, one process each; a file with a JUnit
  # file from an earlier call on this machine is not run again.
  for f in $(grep -l "mark.cuda\b" tests/test_*.py); do
    name=$(basename "$f" .py)
    [ -f "$WORK/$name.xml" ] && continue
    within 300 $PY -m pytest -q -m cuda -p no:cacheprovider "$f" --junitxml="$WORK/$name.xml" > "$WORK/$name.log" 2>&1
    echo "$name exit $?" >> "$WORK/phases.log"
  done
  pack
fi

if has sanitize; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  stamp "compute-sanitizer memcheck (our kernels: namespace twinfer_gpu)"
  within 240 "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 --kernel-name kns=twinfer_gpu \
    $PY -m pytest -q -m cuda -p no:cacheprovider tests/test_device_kernels.py tests/test_device_runtime.py \
    -k "not 2_to_the_31 and not out_of_memory" > "$WORK/memcheck.log" 2>&1
  echo "memcheck exit $?" >> "$WORK/phases.log"
  pack
fi

if has bench_runtime; then
  stamp "benchmarks: runtime overhead, GPU runtime, against PyTorch eager"
  within 120 $PY benchmarks/overhead.py --devices cpu cuda > "$WORK/bench_overhead.log" 2>&1
  within 180 $PY benchmarks/gpu_runtime.py > "$WORK/bench_gpu_runtime.log" 2>&1
  # The full comparison with torch.compile takes longer: run it on its own
  # (python benchmarks/gpu_vs_torch.py); here the eager peers only.
  within 300 $PY benchmarks/gpu_vs_torch.py --no-compile --iterations 20 > "$WORK/bench_gpu_vs_torch.log" 2>&1
  pack
fi
if has bench_dual; then
  # Two models at once (issue 13): pairs, one graph, torch two-stream, priorities; one timeline.
  stamp "benchmarks: two models at once"
  (cd benchmarks && within 300 $PY dual_model.py --device cuda --no-compile --iterations 50 \
    --json "$WORK/dual_model_cuda.json" --plot "$WORK/dual_timeline.png") > "$WORK/bench_dual_model.log" 2>&1
  pack
fi
if has bench_quant; then
  # INT8 / FP8 against FP16 (issue 14): ResNet-50 b256, EfficientNet-Lite0, BERT-base b64, MiniLM.
  stamp "benchmarks: int8 / fp8"
  (cd benchmarks && within 300 $PY quantization.py --device cuda --iterations 20 \
    --json "$WORK/quantization_cuda.json") > "$WORK/bench_quantization.log" 2>&1
  pack
fi

stamp "summary"
$PY tools/gpu_summary.py "$WORK" | tee "$WORK/summary.txt"
pack
