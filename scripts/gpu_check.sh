#!/usr/bin/env bash
# One call on the GPU machine: build core/ + gpu/ (GPU-only), validate against the CPU
# reference, run the GPU tests, compute-sanitizer memcheck + racecheck, then bench.
# Logs go to $OUT (or ./gpu_check_out).
# Usage: bash scripts/gpu_check.sh [--no-bench] [--no-sanitize] [--exhaustive-div] [--dev-bench] [--bench-args "ARGS"]
#   --exhaustive-div: validate's fastdiv row sweeps all 2^46 significand pairs (~1 minute)
#   --dev-bench: also time the runner-up kernels of gpu/dev/ (each file's --bench)
#   SAN_TIMEOUT=S (environment): seconds per compute-sanitizer run (default 240)
set -u -o pipefail
cd "$(dirname "$0")/.."
# Every step logs into a scratch folder; on exit the logs are joined into $OUT/all.log and the
# key ones copied (validate.log, bench.log, ptxas.log): few files, so they all come back.
FINAL=${OUT:-$PWD/gpu_check_out}; mkdir -p "$FINAL"
OUT=$(mktemp -d)
trap 'for f in machine build ptxas validate dev gpu_*_test sanitizer san_* bench dev_bench; do for g in "$OUT"/$f.log; do [ -f "$g" ] && { echo "===== $(basename $g)"; cat "$g"; }; done; done > "$FINAL/all.log"; cp "$OUT"/validate.log "$OUT"/dev.log "$OUT"/bench.log "$OUT"/ptxas.log "$FINAL"/ 2>/dev/null; rm -rf "$OUT"' EXIT
BENCH=1; SAN=1; DEVBENCH=0; VARGS=(); BARGS=""
while [ $# -gt 0 ]; do case $1 in --no-bench) BENCH=0;; --no-sanitize) SAN=0;; --exhaustive-div) VARGS+=(--exhaustive-div);;
  --dev-bench) DEVBENCH=1;;
  --bench-args) BARGS=$2; shift;; esac; shift; done
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu-check
status=0
{ echo "== machine"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1
  cmake --version | head -1; g++ --version | head -1; nproc; } 2>&1 | tee "$OUT/machine.log"

echo "== build" | tee "$OUT/build.log"
GT=""; [ -f .deps/googletest/CMakeLists.txt ] && GT="-DKVLAB_GTEST_SOURCE=$PWD/.deps/googletest"
if ! cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DKVLAB_GPU_PTXAS_VERBOSE=ON -DCMAKE_CUDA_COMPILER=$(command -v nvcc) $GT \
     >>"$OUT/build.log" 2>&1; then
  echo "cmake configure FAILED (see build.log)"; tail -30 "$OUT/build.log"; exit 3
fi
cmake --build $B -j"$(nproc)" >>"$OUT/build.log" 2>&1 || { echo "build FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 3; }
grep -E "ptxas info.*(Compiling|Used)|spill" "$OUT/build.log" | sed 's/_GLOBAL__N__[0-9a-f_]*//' > "$OUT/ptxas.log"
echo "build ok"

echo "== validate"
# The default dump's keys and values too: this build has no HDF5, so h5py (on the GPU machine)
# extracts them to raw float32 files for kvlab-gpu --raw.
RAW=()
if [ -f data/stories260K.h5 ] && python3 -c "import h5py" 2>/dev/null; then
  for role in k v; do
    shape=$(python3 - "$OUT/dump_$role.f32" $role <<'PY'
import sys, h5py, numpy as np
f = h5py.File("data/stories260K.h5", "r")
x = np.stack([f[f"layers/{i}/{sys.argv[2]}"][...] for i in range(f.attrs["num_layers"])]).astype("<f4")
x.tofile(sys.argv[1]); print(",".join(map(str, x.shape)))
PY
)
    RAW+=(--raw "dump-$role:$shape:$OUT/dump_$role.f32")
  done
fi
$B/gpu/kvlab-gpu validate "${VARGS[@]}" "${RAW[@]}" 2>&1 | tee "$OUT/validate.log" | awk '$0 ~ /validate:/ || ($7+0 > 0 && NR > 2) {print}'
rc=${PIPESTATUS[0]}; echo "validate exit $rc"; [ $rc -ne 0 ] && status=1

echo "== gpu/dev exploration files (runner-up kernels vs the CPU reference)"
for d in $B/gpu/dev/*; do
  [ -x "$d" ] && [ -f "$d" ] || continue
  case $(basename "$d") in kvlab_gpu_dev_*) continue;; esac
  "$d" --validate >> "$OUT/dev.log" 2>&1; rc=$?; echo "$(basename $d) --validate: exit $rc, $(grep -E '^validate:' "$OUT/dev.log" | tail -1)"
  [ $rc -ne 0 ] && status=1
done

echo "== gtest"
for t in $B/tests/gpu/gpu_*_test; do
  [ -x "$t" ] || continue
  "$t" > "$OUT/$(basename $t).log" 2>&1; rc=$?; echo "$(basename $t): exit $rc, $(grep -E '^\[  (PASSED|FAILED)|SKIPPED' "$OUT/$(basename $t).log" | tr '\n' ' ')"
  [ $rc -ne 0 ] && status=1
done

if [ $SAN -eq 1 ]; then
  echo "== compute-sanitizer (small data)"
  for tool in memcheck racecheck; do
    for t in $B/tests/gpu/gpu_token_test $B/tests/gpu/gpu_boost_test $B/tests/gpu/gpu_channel_test $B/tests/gpu/gpu_float_test; do
      [ -x "$t" ] || continue
      # default (the production memory access patterns); fallback was checked before (as v3),
      # ieee-div and order-key-minmax change arithmetic only
      KVLAB_GPU_TEST_PRESETS=default timeout "${SAN_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 "$t" \
        > "$OUT/san_${tool}_$(basename $t).log" 2>&1; rc=$?
      echo "$tool $(basename $t): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_$(basename $t).log" | tr '\n' ' ')"
      [ $rc -ne 0 ] && status=1
    done
    # the gpu/dev runner-up kernels (their small --validate data)
    for d in $B/gpu/dev/*; do
      [ -x "$d" ] && [ -f "$d" ] || continue
      case $(basename "$d") in kvlab_gpu_dev_*) continue;; esac
      timeout "${SAN_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 "$d" --validate \
        > "$OUT/san_${tool}_dev_$(basename $d).log" 2>&1; rc=$?
      echo "$tool dev/$(basename $d): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${tool}_dev_$(basename $d).log" | tr '\n' ' ')"
      [ $rc -ne 0 ] && status=1
    done
  done 2>&1 | tee "$OUT/sanitizer.log"
fi

if [ $BENCH -eq 1 ]; then
  echo "== bench"
  $B/gpu/kvlab-gpu bench $BARGS 2>&1 | tee "$OUT/bench.log"
fi
if [ $DEVBENCH -eq 1 ]; then
  echo "== gpu/dev bench"
  for d in $B/gpu/dev/*; do
    [ -x "$d" ] && [ -f "$d" ] || continue
    case $(basename "$d") in kvlab_gpu_dev_*) continue;; esac
    echo "-- $(basename $d)"; "$d" --bench
  done 2>&1 | tee "$OUT/dev_bench.log"
fi
exit $status
