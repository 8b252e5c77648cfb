#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, ASan + UBSan), makes their seed
# corpora from the test models, and runs each target.
#   fuzz/run.sh --seconds 20            each target for 20 s (CI)
#   fuzz/run.sh --runs 10000000 onnx    10 million inputs into the ONNX reader
# Targets: onnx (onnx_reader_fuzzer), engine (engine_file_fuzzer); both when
# none is named. Engine seeds are saved engines, so twinfer must be importable
# (pip install, or PYTHONPATH=build/dev-NAME/pkg). Exits non-zero on a
# finding; the input that caused it is in build/fuzz/artifacts/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=$root/build/fuzz
py=${PYTHON:-python3}
limit=(-max_total_time=20)
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    onnx|engine) targets+=("$1"); shift ;;
    *) echo "usage: fuzz/run.sh [--seconds N | --runs N] [onnx] [engine]" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(onnx engine)

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (libFuzzer comes with clang): apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi
cmake -S "$root/fuzz" -B "$bdir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$bdir" -j"${JOBS:-2}" >"$bdir/ninja.log" 2>&1 || { tail -40 "$bdir/ninja.log"; exit 1; }
[ -d "$bdir/seeds/onnx" ] || "$py" "$root/fuzz/make_seeds.py" "$bdir/seeds"

# A finding is any sanitizer report, an exception other than twinfer::Error,
# an input slower than 10 s, or a single allocation over 2 GiB.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mkdir -p "$bdir/artifacts"
for t in "${targets[@]}"; do
  case $t in
    # Most ONNX seeds are node models of a few hundred bytes; inputs up to
    # 4 KiB reach every message type the reader knows at ~30k inputs/s
    # (with 64 KiB, large inputs dominate and it runs 10x slower).
    onnx) bin=onnx_reader_fuzzer; seeds=onnx; extra=(-max_len=4096) ;;
    engine) bin=engine_file_fuzzer; seeds=engine; extra=() ;;
  esac
  mkdir -p "$bdir/corpus/$t"
  [ -d "$bdir/seeds/$seeds" ] || { echo "fuzz: no $seeds seeds (is twinfer importable?)" >&2; exit 1; }
  echo "fuzz: $bin ${limit[*]}"
  log=$bdir/$t.log
  status=0
  "$bdir/$bin" "${limit[@]}" "${extra[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$bdir/artifacts/$t-" "$bdir/corpus/$t" "$bdir/seeds/$seeds" >"$log" 2>&1 || status=$?
  grep -E "INITED|stat::(number_of_executed_units|average_exec_per_sec)|^Done " "$log" || true
  if [ $status -ne 0 ]; then
    grep -E -A30 "ERROR|runtime error|deadly signal" "$log" | head -60 >&2
    echo "fuzz: $bin found a problem (exit $status; log $log, input in $bdir/artifacts/)" >&2
    exit 1
  fi
done
