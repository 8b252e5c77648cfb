#!/usr/bin/env bash
# One command for a GPU machine: build with every core, run the `cuda` tests
# (each test file in its own process, so a sticky CUDA error only ends its
# own file), compute-sanitizer memcheck on our kernels with small shapes, the
# GPU benchmarks, then a short table (tools/gpu_summary.py). Logs and JUnit
# files go to $OUT (the device tool brings that folder back).
#
#   tools/gpu_check.sh                 # all phases: build test sanitize bench
#   tools/gpu_check.sh build test      # some of them (a warm machine keeps the build)
#
# The GPU machine has no network: run tools/gpu_wheels.sh on the development
# machine first and carry .whl (run(carry=[".whl"], ...)). Record the run in
# docs/gpu-runs/ (commit, GPU, driver, the table).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
phases=${*:-build test sanitize bench}
stamp() { echo "[gpu_check] $(date +%H:%M:%S) $*" | tee -a "$OUT/phases.log"; }
has() { [[ " $phases " == *" $1 "* ]]; }

{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
  $PY -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, torch.version.cuda)"
  nvcc --version | tail -1
  cat .gpu_commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo "commit: unknown (write it to .gpu_commit)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if has build; then
  stamp "build"
  if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile .whl/*.whl >> "$OUT/build.log" 2>&1
  fi
  # All cores, sm_90 only; --no-build-isolation: the machine has the build
  # requirements installed and no network to fetch them.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) TWINFER_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" \
    $PY -m pip install --no-build-isolation --no-deps -v . >> "$OUT/build.log" 2>&1
  rc=$?
  stamp "build exit $rc"
  [ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit $rc; }
  (cd /tmp && $PY -c "import twinfer, json; print(json.dumps({k: v for k, v in twinfer.build_info().items() if k != 'ops'}))") \
    > "$OUT/build_info.json" 2>&1
  cat "$OUT/build_info.json"
fi

if has test; then
  stamp "cuda tests"
  # Every test file with a cuda test, one process each.
  for f in $(grep -l "cuda" tests/test_*.py); do
    name=$(basename "$f" .py)
    timeout 300 $PY -m pytest -q -m cuda -p no:cacheprovider "$f" --junitxml="$OUT/$name.xml" > "$OUT/$name.log" 2>&1
    echo "$name exit $?" >> "$OUT/phases.log"
  done
fi

if has sanitize; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  stamp "compute-sanitizer memcheck (our kernels: namespace twinfer_gpu)"
  timeout 400 "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 --kernel-name kns=twinfer_gpu \
    $PY -m pytest -q -m cuda -p no:cacheprovider tests/test_device_kernels.py tests/test_device_runtime.py \
    -k "not 2_to_the_31 and not out_of_memory" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?" >> "$OUT/phases.log"
fi

if has bench; then
  stamp "benchmarks"
  timeout 200 $PY benchmarks/overhead.py --devices cpu cuda > "$OUT/bench_overhead.log" 2>&1
  timeout 300 $PY benchmarks/gpu_runtime.py > "$OUT/bench_gpu_runtime.log" 2>&1
  # The full comparison with torch.compile takes longer: run it on its own
  # (python benchmarks/gpu_vs_torch.py); here the eager peers only.
  timeout 400 $PY benchmarks/gpu_vs_torch.py --no-compile --iterations 20 > "$OUT/bench_gpu_vs_torch.log" 2>&1
  # Two models at once (issue 13): pairs, one graph, torch two-stream, priorities; one timeline.
  (cd benchmarks && timeout 400 $PY dual_model.py --device cuda --no-compile --iterations 50 \
    --json "$OUT/dual_model_cuda.json" --plot "$OUT/dual_timeline.png") > "$OUT/bench_dual_model.log" 2>&1
  # INT8 / FP8 against FP16 (issue 14): ResNet-50 b256, EfficientNet-Lite0, BERT-base b64, MiniLM.
  (cd benchmarks && timeout 400 $PY quantization.py --device cuda --iterations 20 \
    --json "$OUT/quantization_cuda.json") > "$OUT/bench_quantization.log" 2>&1
fi

stamp "summary"
$PY tools/gpu_summary.py "$OUT" | tee "$OUT/summary.txt"
