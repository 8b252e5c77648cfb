#!/usr/bin/env bash
# One command for a GPU machine: build with every core, check the build is a
# working CUDA one, run the `cuda` tests (each test file in its own process,
# so a sticky CUDA error only ends its own file), the GPU benchmarks,
# compute-sanitizer memcheck on our kernels with small shapes, then a short
# table (tools/gpu_summary.py).
#
#   tools/gpu_check.sh                 # all steps: build test bench sanitize
#   tools/gpu_check.sh build bench     # some of them
#   steps: build test bench (= bench_runtime bench_dual bench_quant) sanitize; and
#   profile (benchmarks/gpu_profile.py: per-op times), probe_int8 (benchmarks/
#   int8_gemm_probe.py: the int8 GEMMs alone), compile (the torch.compile
#   peers: gpu_vs_torch's max-autotune column, dual_model's two compiled
#   streams), detectors (benchmarks/detectors.py --device cuda) and loops
#   (benchmarks/unrolled_loops.py --device cuda), asked for by name only
#   GPU_CHECK_FILES="tests/a.py tests/b.py": `test` runs these files' cuda tests only
#   GPU_QUANT_ARGS="--qoperator --only resnet50": more arguments for bench_quant
#
# The device tool allows 600 s a command, keeps a machine warm 30 s after a
# call, and brings back 8 files from $OUT. So the script
#   - stops starting work GPU_CHECK_BUDGET seconds (default 570) after it
#     began and cuts each step's timeout to what is left;
#   - keeps its logs in $WORK and marks each finished step ($WORK/done/):
#     a second call on the warm machine skips what is done and goes on;
#   - builds whenever twinfer does not import (a fresh machine), whatever
#     steps were asked for, and refuses to go on with a build that has no
#     working CUDA backend (every cuda test would skip: a false green);
#   - packs the logs after every step into $OUT/gpu_check_logs.tar.gz, beside
#     phases.log, summary.txt, env.txt and the timeline.
# A session's plan: 15 minutes of device time in all (each machine start, a
# minute or two, and each idle wait count), so two calls: call 1
# `GPU_CHECK_BUDGET=520 tools/gpu_check.sh build test` (run's timeout_s 570),
# call 2 at once on the warm machine, about 200 s of whatever call 1 left
# most to learn (`test` again for the files not reached, `bench_runtime`, or
# `sanitize`), then give the machine back (docs/gpu-runs/README.md).
#
# The GPU machine has no network: run tools/gpu_wheels.sh on the development
# machine first and carry .whl and .gpu_commit (run(carry=[".whl", ".gpu_commit"])).
# Record the run in docs/gpu-runs/ (commit, GPU, driver, the table).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${WORK:-/tmp/gpu-check}
mkdir -p "$OUT" "$WORK/done"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1
PY=${PYTHON:-python3}
steps=${*:-build test bench sanitize}
deadline=$(( $(date +%s) + ${GPU_CHECK_BUDGET:-570} ))
stamp() { echo "[gpu_check] $(date +%H:%M:%S) $*" | tee -a "$WORK/phases.log"; }
wants() { [[ " $steps " == *" $1 "* ]] || { [[ $1 == bench_* ]] && [[ " $steps " == *" bench "* ]]; }; }
done_already() { [ -f "$WORK/done/$1" ]; }
mark_done() { touch "$WORK/done/$1"; }
left() { echo $(( deadline - $(date +%s) - 15 )); }  # 15 s kept for packing
# within SECONDS CMD...: CMD under `timeout`, cut to the time left. SIGINT
# first, so pytest still writes its JUnit file for the tests that finished.
# Not started (exit 124, noted) when under 20 s are left.
within() {
  local want=$1 l; l=$(left); shift
  if [ "$l" -lt 20 ]; then echo "skipped, out of time: $*" >> "$WORK/phases.log"; return 124; fi
  timeout -s INT -k 15 $(( want < l ? want : l )) "$@"
}
# What comes back: the logs packed, and the few files read first.
pack() {
  tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$WORK" . 2>/dev/null
  for f in phases.log summary.txt env.txt dual_timeline.png; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
  return 0
}
# pytest's per-test limit where the image has pytest-timeout: a hung test
# fails alone instead of eating its file's whole budget.
pytest_limits=(-o faulthandler_timeout=60)
$PY -c "import pytest_timeout" 2>/dev/null && pytest_limits+=(--timeout=120)

{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
  $PY -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, torch.version.cuda)"
  nvcc --version | tail -1
  cat .gpu_commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo "commit: unknown (write it to .gpu_commit)"
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt"

# ---- build (always on a machine where twinfer does not import yet) --------------
if wants build || ! (cd /tmp && $PY -c "import twinfer" 2>/dev/null); then
  stamp "build"
  if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-deps --no-compile .whl/*.whl >> "$WORK/build.log" 2>&1
  fi
  # All cores, sm_90 only; --no-build-isolation: the machine has the build
  # requirements installed and no network to fetch them. pyproject's
  # build-dir (build/, kept on a warm machine): a rebuild compiles only what changed.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) TWINFER_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" \
    within 540 $PY -m pip install --no-build-isolation --no-deps -v . >> "$WORK/build.log" 2>&1
  rc=$?
  stamp "build exit $rc"
  [ $rc -eq 0 ] || { tail -40 "$WORK/build.log"; pack; exit $rc; }
  # A build whose CUDA backend cannot run (no GPU seen, cuBLASLt / cuDNN not
  # found, a missing symbol) would skip every cuda test or run the models on
  # the CPU: stop here, saying which.
  (cd /tmp && $PY - > "$WORK/build_info.json" 2>&1) <<'EOF'
import json, sys
import twinfer
from twinfer import _core
info = {k: v for k, v in twinfer.build_info().items() if k != "ops"}
print(json.dumps(info, default=str))
problems = []
if not twinfer.cuda_available():
    problems.append("twinfer.cuda_available() is False")
why = info.get("cuda_libraries") or {}  # why a library was not found
for lib in ("cublaslt", "cudnn"):
    if not info.get(lib):
        problems.append(f"{lib} not loaded: {why.get('cublasLt' if lib == 'cublaslt' else lib, '?')}")
if not info.get("cudnn_frontend"):
    problems.append("built without cuDNN's frontend (is .whl's nvidia-cudnn-frontend installed?)")
if not info.get("cutlass_gemm"):
    problems.append("built without the CUTLASS int8 / fp8 kernels (is .whl's nvidia-cutlass installed?)")
for op in ("Conv", "MatMul", "Gemm"):
    if op not in (info.get("cuda_ops") or []):
        problems.append(f"no CUDA kernel registered for {op}")
symbols = _core.cuda_symbol_problems()
if symbols:
    problems.append(f"missing CUDA symbols: {symbols}")
for p in problems:
    print("BUILD NOT USABLE:", p)
sys.exit(1 if problems else 0)
EOF
  rc=$?
  cat "$WORK/build_info.json"
  stamp "build check exit $rc"
  [ $rc -eq 0 ] || { pack; exit 3; }
  pack
fi

# ---- the cuda tests ---------------------------------------------------------------
if wants test; then
  stamp "cuda tests"
  # Every file with a cuda test, as pytest sees them (the conftest `device`
  # fixture marks its cuda param too), one process each; a file with a
  # JUnit file from an earlier call on this machine is not run again.
  $PY -m pytest --collect-only -q -rs -m cuda -p no:cacheprovider tests > "$WORK/collect.log" 2>&1
  files=$(grep '::' "$WORK/collect.log" | cut -d: -f1 | sort -u)
  if [ -n "${GPU_CHECK_FILES:-}" ]; then  # the files asked for, those with cuda tests
    files=$(echo "$files" | grep -Fx -f <(tr ' ' '\n' <<< "$GPU_CHECK_FILES"))
  fi
  [ -n "$files" ] || echo "no cuda tests collected (see: pytest --collect-only -m cuda tests)" >> "$WORK/phases.log"
  # A file that fails to import or skips itself (a missing package) has no
  # tests in the list: say so, instead of leaving its cuda tests unrun without a word.
  grep -E '^(ERROR|SKIPPED) ' "$WORK/collect.log" | sed 's/^/not collected: /' >> "$WORK/phases.log"
  # Several files at once (GPU_CHECK_JOBS, default 6): most of a cuda test's
  # time is host work (exports, references, plan building), and one file at a
  # time did not fit the budget. The GPU has room for them all (the largest
  # single test holds about 4 GB); the OOM test asks for 1 TiB, which fails at
  # once without taking memory. Each process gets its share of the cores.
  # test_models (ten exports) and the conformance count start first, then the
  # files with most tests.
  jobs_n=${GPU_CHECK_JOBS:-6}
  threads=$(( $(nproc) / jobs_n )); [ "$threads" -ge 1 ] || threads=1
  ordered=$( (echo "tests/test_models.py 999999"; grep '::' "$WORK/collect.log" | cut -d: -f1 | sort | uniq -c |
              awk '{print $2, $1}') | sort -k2,2nr | awk '!seen[$1]++ {print $1}' | grep -Fx -f <(echo "$files"))
  run_file() {  # run_file FILE: one file in its own process, its exit and seconds logged
    local f=$1 name budget t0
    name=$(basename "$f" .py); budget=300; t0=$(date +%s)
    [ "$name" = test_models ] && budget=540  # ten exports, dynamo ones too
    OMP_NUM_THREADS=$threads within $budget $PY -m pytest -q -m cuda -p no:cacheprovider "${pytest_limits[@]}" "$f" \
      --junitxml="$WORK/$name.xml" > "$WORK/$name.log" 2>&1
    echo "$name exit $? ($(( $(date +%s) - t0 )) s)" >> "$WORK/phases.log"
  }
  # The ONNX node cases with every node on a CUDA kernel (allow_cpu_fallback=False):
  # the issue's count of cases that pass on CUDA, into a copy of docs/conformance.md's block.
  run_conformance() {
    cp docs/conformance.md "$WORK/conformance.md"
    OMP_NUM_THREADS=$threads within 240 $PY tools/conformance.py --cuda-kernels gpu --markdown "$WORK/conformance.md" \
      > "$WORK/conformance_cuda.log" 2>&1
    local rc=$?
    echo "conformance_cuda exit $rc" >> "$WORK/phases.log"
    [ $rc -eq 0 ] && mark_done conformance_cuda
  }
  started=0
  for f in $ordered; do
    name=$(basename "$f" .py)
    [ -f "$WORK/$name.xml" ] && continue
    [ "$(left)" -lt 20 ] && { echo "skipped, out of time: $name" >> "$WORK/phases.log"; continue; }
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_n" ]; do wait -n; done
    run_file "$f" &
    started=$(( started + 1 ))
    # The conformance count goes in right after test_models.
    if [ $started -eq 1 ] && ! done_already conformance_cuda && [ "$(left)" -ge 20 ]; then run_conformance & fi
  done
  if [ $started -eq 0 ] && ! done_already conformance_cuda && [ "$(left)" -ge 20 ]; then run_conformance & fi
  wait
  pack
fi

# ---- benchmarks (each part once per machine) ---------------------------------------
bench() {  # bench NAME SECONDS CMD...: a part, its exit code logged, done when it exits 0
  local name=$1 secs=$2; shift 2
  done_already "$name" && return 0
  [ "$(left)" -lt 20 ] && { echo "skipped, out of time: $name" >> "$WORK/phases.log"; return 0; }
  within "$secs" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  echo "$name exit $rc" >> "$WORK/phases.log"
  [ $rc -eq 0 ] && mark_done "$name"
  pack
}
if wants bench_runtime; then
  stamp "benchmarks: runtime overhead, GPU runtime, against PyTorch eager"
  bench bench_overhead 120 $PY benchmarks/call_overhead.py --devices cpu cuda
  bench bench_gpu_runtime 180 $PY benchmarks/gpu_runtime.py
  # The full comparison with torch.compile takes longer: run it on its own
  # (python benchmarks/gpu_vs_torch.py); here the eager peers only.
  bench bench_gpu_vs_torch 300 $PY benchmarks/gpu_vs_torch.py --no-compile --iterations 20
  # The CNNs once more on cuDNN's legacy API, to set beside the graph API's
  # numbers just above (conv.cc chooses the graph API by default).
  TWINFER_CUDNN_CONV=legacy bench bench_gpu_vs_torch_legacy_conv 200 $PY benchmarks/gpu_vs_torch.py --no-compile \
    --iterations 20 --models resnet50 mobilenet_v2 efficientnet_b0
  # And NCHW (channels_last pass off), to set beside the NHWC default of fp16/bf16.
  TWINFER_CHANNELS_LAST=0 bench bench_gpu_vs_torch_nchw 200 $PY benchmarks/gpu_vs_torch.py --no-compile \
    --iterations 20 --models resnet50 mobilenet_v2 efficientnet_b0
  # The transformers with the copies around attention back (attention_views off).
  TWINFER_ATTENTION_VIEWS=0 bench bench_gpu_vs_torch_no_views 150 $PY benchmarks/gpu_vs_torch.py --no-compile \
    --iterations 20 --models vit_b_16 bert_base minilm
fi
if wants bench_dual; then
  # Two models at once (issue 13): pairs, one graph, torch two-stream, priorities; one timeline.
  stamp "benchmarks: two models at once"
  (cd benchmarks && bench bench_dual_model 300 $PY dual_model.py --device cuda --no-compile --iterations 50 \
    --json "$WORK/dual_model_cuda.json" --plot "$WORK/dual_timeline.png")
fi
if wants bench_quant; then
  # INT8 / FP8 against FP16 (issue 14): ResNet-50 b256, EfficientNet-Lite0, BERT-base b64, MiniLM.
  stamp "benchmarks: int8 / fp8"
  # GPU_QUANT_ARGS adds arguments (say "--qoperator --only resnet50": onnxruntime's QOperator file too).
  (cd benchmarks && bench bench_quantization 300 $PY quantization.py --device cuda --iterations 20 \
    --json "$WORK/quantization_cuda.json" ${GPU_QUANT_ARGS:-})
fi

# ---- where the time goes (not in the default steps: `tools/gpu_check.sh profile`) ----
if [[ " $steps " == *" profile "* ]]; then
  # GPU_PROFILE_MODELS / GPU_PROFILE_PRECISIONS narrow it (the profiles print as tables into the log);
  # GPU_PROFILE_KERNELS=0 leaves the kernel tables out.
  models=${GPU_PROFILE_MODELS:-resnet50 mobilenet_v2 vit_b_16 bert_base}
  precisions=${GPU_PROFILE_PRECISIONS:-fp16 int8}
  stamp "profile: per-op kernel times of $models ($precisions)"
  # shellcheck disable=SC2086
  # --kernels: each profile's costliest kernels by name too (CUPTI), so an
  # op's time splits into its kernels (im2col / GEMM / epilogue apart).
  (cd benchmarks && bench bench_profile 240 $PY gpu_profile.py --models $models --precisions $precisions \
    --kernels "${GPU_PROFILE_KERNELS:-20}" --json "$WORK/profile.json")
fi

# ---- the torch.compile peers (only when named: `tools/gpu_check.sh compile`) -------
if [[ " $steps " == *" compile "* ]]; then
  # max-autotune tunes for minutes per model and batch: the models go one at a
  # time within the budget (GPU_COMPILE_MODELS), each row printed as it ends,
  # so a cut call still brings back the rows it finished. Inductor's cache
  # stays on a warm machine: a second call recompiles faster.
  stamp "torch.compile peers: gpu_vs_torch max-autotune, dual_model two compiled streams"
  # shellcheck disable=SC2086
  (cd benchmarks && bench bench_dual_compile 240 $PY dual_model.py --device cuda --iterations 30 \
    --json "$WORK/dual_model_compile.json")
  # shellcheck disable=SC2086
  (cd benchmarks && bench bench_gpu_vs_compile $(( $(left) > 60 ? $(left) - 10 : 50 )) $PY gpu_vs_torch.py \
    --compile-only --iterations 20 --budget $(( $(left) > 120 ? $(left) - 120 : 0 )) \
    --models ${GPU_COMPILE_MODELS:-bert_base minilm vit_b_16 resnet50 efficientnet_b0 mobilenet_v2} \
    --json "$WORK/gpu_vs_compile.json")
fi

# ---- detectors on the GPU (only when named: `tools/gpu_check.sh detectors`) --------
if [[ " $steps " == *" detectors "* ]]; then
  # SSDlite320 and Faster R-CNN: the value-dependent tail staged on the device,
  # the same through the host evaluator (TWINFER_STAGED_TAIL=0), torch eager.
  stamp "detectors: staged tail, host tail, torch eager"
  (cd benchmarks && bench bench_detectors 200 $PY detectors.py --device cuda --blocks 5)
fi

# ---- loops unrolled on the GPU (only when named: `tools/gpu_check.sh loops`) -------
if [[ " $steps " == *" loops "* ]]; then
  # LinearAttention's Scan unrolled into the plan, against the loop kernel on
  # the host between copies (TWINFER_UNROLL_LOOPS=0) and onnxruntime (CPU).
  stamp "loops: unrolled, loop kernel, onnxruntime"
  (cd benchmarks && bench bench_unrolled_loops 120 $PY unrolled_loops.py --device cuda --calls 30)
fi

# ---- int8 GEMMs alone (only when named: `tools/gpu_check.sh probe_int8`) -----------
if [[ " $steps " == *" probe_int8 "* ]]; then
  # BERT's and ResNet-50's int8 GEMM shapes in every form twinfer and torch have
  # (fp16, torch._int_mm, fp8 _scaled_mm, twinfer's int8-output and int32 forms),
  # with the cuBLASLt kernel names CUPTI saw: why int8 ran as slowly as fp32.
  stamp "probe: int8 GEMMs alone"
  (cd benchmarks && bench bench_int8_gemm_probe 200 $PY int8_gemm_probe.py --iterations 20 \
    --json "$WORK/int8_gemm_probe.json")
fi

# ---- compute-sanitizer last: the slowest per test, and the least likely to fit ------
if wants sanitize && ! done_already sanitize; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  stamp "compute-sanitizer memcheck (our kernels: namespace twinfer_gpu)"
  within 240 "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 --kernel-name kns=twinfer_gpu \
    $PY -m pytest -q -x -m cuda -p no:cacheprovider tests/test_device_kernels.py \
    -k "not 2_to_the_31 and not out_of_memory" > "$WORK/memcheck.log" 2>&1
  rc=$?
  echo "memcheck exit $rc" >> "$WORK/phases.log"
  [ $rc -eq 0 ] && mark_done sanitize
  pack
fi
# The kernels written without a GPU since the last run (fused chains, losses,
# scatters, vision, attention variants, quantization, depthwise, CUTLASS's
# GEMMs), in a second pass. Its filter is "twinfer", not "twinfer_gpu": the
# CUTLASS kernels are cutlass::device_kernel<...> instantiated on our
# twinfer::cuda::cutlass_gemm types, the only part of their names that is ours.
if wants sanitize && ! done_already sanitize_new; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  new_files=$(ls tests/test_fuse_elementwise.py tests/test_loss_cuda.py tests/test_scatter_cuda.py \
    tests/test_vision_cuda.py tests/test_attention_cuda.py tests/test_quant_cuda.py tests/test_attention_views.py \
    tests/test_fuse_residual.py tests/test_cutlass_gemm.py tests/test_depthwise_conv.py tests/test_device_int8.py \
    tests/test_fp8.py tests/test_staged_tail.py 2>/dev/null)
  stamp "compute-sanitizer memcheck of the newer kernels"
  within 240 "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 --kernel-name kns=twinfer \
    $PY -m pytest -q -m cuda -p no:cacheprovider $new_files > "$WORK/memcheck_new.log" 2>&1
  rc=$?
  echo "memcheck_new exit $rc" >> "$WORK/phases.log"
  [ $rc -eq 0 ] && mark_done sanitize_new
  pack
fi

stamp "summary"
$PY tools/gpu_summary.py "$WORK" | tee "$WORK/summary.txt"
pack
