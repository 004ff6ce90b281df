#!/usr/bin/env bash
# One call on the GPU machine for decode attention: GPU-only build of kvlab-gpu and its attention
# test, attend-validate (reference + debug byte check), the test, compute-sanitizer memcheck and
# racecheck on small cases, then attend-bench joined with torch SDPA (scripts/attend_sdpa.py).
# Logs and the table go to $OUT (or ./gpu_attend_out).
# Usage: bash scripts/gpu_attend.sh [--no-sanitize] [--no-bench] [--bench-args "ARGS"]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-$PWD/gpu_attend_out}; mkdir -p "$OUTDIR"
SAN=1; BENCH=1; BARGS=""
while [ $# -gt 0 ]; do case $1 in --no-sanitize) SAN=0;; --no-bench) BENCH=0;; --bench-args) BARGS=$2; shift;; esac; shift; done
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu-attend
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1; } 2>&1 | tee "$OUTDIR/machine.log"
GT=""; [ -f .deps/googletest/CMakeLists.txt ] && GT="-DKVLAB_GTEST_SOURCE=$PWD/.deps/googletest"
cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DKVLAB_GPU_PTXAS_VERBOSE=ON -DCMAKE_CUDA_COMPILER=$(command -v nvcc) $GT >"$OUTDIR/build.log" 2>&1 &&
  cmake --build $B -j"$(nproc)" --target kvlab-gpu gpu_attention_test >>"$OUTDIR/build.log" 2>&1 ||
  { echo "build FAILED"; grep -E "error" "$OUTDIR/build.log" | head -30; exit 3; }
grep -A2 "decode_split" "$OUTDIR/build.log" | grep -E "Compiling|Used|spill" | sed 's/_ZN5kvlab3gpu4attn12decode_split//' > "$OUTDIR/ptxas_attn.log"
echo "build ok"
$B/gpu/kvlab-gpu attend-validate 2>&1 | tee "$OUTDIR/validate.log"; rc=${PIPESTATUS[0]}; echo "attend-validate exit $rc"; [ $rc -ne 0 ] && status=1
$B/tests/gpu/gpu_attention_test > "$OUTDIR/gtest.log" 2>&1; rc=$?; echo "gpu_attention_test exit $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUTDIR/gtest.log" | tr '\n' ' ')"; [ $rc -ne 0 ] && status=1
if [ $SAN -eq 1 ]; then
  for tool in memcheck racecheck; do
    for m in fp16 int8 kivi-4 kivi-2-sink kitty; do
      timeout "${SAN_TIMEOUT:-120}" compute-sanitizer --tool $tool --error-exitcode 9 $B/gpu/kvlab-gpu attend-validate --small --method $m \
        > "$OUTDIR/san.log.tmp" 2>&1; rc=$?
      echo "$tool $m: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/san.log.tmp" | tr '\n' ' ')" | tee -a "$OUTDIR/sanitizer.log"
      [ $rc -ne 0 ] && { status=1; tail -20 "$OUTDIR/san.log.tmp" >> "$OUTDIR/sanitizer.log"; }
    done
  done
  rm -f "$OUTDIR/san.log.tmp"
fi
if [ $BENCH -eq 1 ]; then
  $B/gpu/kvlab-gpu attend-bench --csv "$OUTDIR/attend_bench.csv" $BARGS 2>&1 | tee "$OUTDIR/bench.log"
  PYTHONUNBUFFERED=1 python3 scripts/attend_sdpa.py "$OUTDIR/attend_bench.csv" --out "$OUTDIR/attend_table.md" 2>&1 | tee -a "$OUTDIR/bench.log"
fi
exit $status
