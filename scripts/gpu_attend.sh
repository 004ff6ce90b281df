#!/usr/bin/env bash
# One call on the GPU machine for decode attention: GPU-only build of kvlab-gpu and its attention
# test, attend-validate (reference + debug byte check), the test, compute-sanitizer memcheck and
# racecheck on small cases, then attend-bench joined with torch SDPA (scripts/attend_sdpa.py).
# Logs and the table go to $OUT (or ./gpu_attend_out).
# --ncu: Nsight Compute of the split and streaming kernels (fp16, kivi-2; B=8, L=32K) -> ncu.log.
# KVLAB_GPU_BIN=DIR: use DIR/kvlab-gpu (a build made elsewhere) instead of building; the gtest too
# when DIR/gpu_attention_test exists.
# NCU_KERNELS, NCU_METHODS, SAN_TOOLS, SAN_METHODS: override the lists below. --stop-on-fail: nothing after a
# failed attend-validate.
# Usage: bash scripts/gpu_attend.sh [--no-sanitize] [--no-bench] [--ncu] [--bench-args "ARGS"]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-$PWD/gpu_attend_out}; mkdir -p "$OUTDIR"
SAN=1; BENCH=1; NCU=0; BARGS=""; STOP=0
while [ $# -gt 0 ]; do case $1 in --no-sanitize) SAN=0;; --no-bench) BENCH=0;; --ncu) NCU=1;; --bench-args) BARGS=$2; shift;; --stop-on-fail) STOP=1;; esac; shift; done
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu-attend
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1; } 2>&1 | tee "$OUTDIR/machine.log"
if [ -n "${KVLAB_GPU_BIN:-}" ]; then
  mkdir -p $B/gpu $B/tests/gpu && cp "$KVLAB_GPU_BIN/kvlab-gpu" $B/gpu/ && echo "prebuilt $KVLAB_GPU_BIN/kvlab-gpu"
  [ -f "$KVLAB_GPU_BIN/gpu_attention_test" ] && cp "$KVLAB_GPU_BIN/gpu_attention_test" $B/tests/gpu/
else
  GT=""; [ -f .deps/googletest/CMakeLists.txt ] && GT="-DKVLAB_GTEST_SOURCE=$PWD/.deps/googletest"
  cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DKVLAB_GPU_PTXAS_VERBOSE=ON -DCMAKE_CUDA_COMPILER=$(command -v nvcc) $GT >"$OUTDIR/build.log" 2>&1 &&
    cmake --build $B -j"$(nproc)" --target kvlab-gpu gpu_attention_test >>"$OUTDIR/build.log" 2>&1 ||
    { echo "build FAILED"; grep -E "error" "$OUTDIR/build.log" | head -30; exit 3; }
  grep -A2 "decode_s" "$OUTDIR/build.log" | grep -E "Compiling|Used|spill" | sed 's/_ZN5kvlab3gpu4attn1[23]decode_s//' > "$OUTDIR/ptxas_attn.log"
  echo "build ok"
fi
$B/gpu/kvlab-gpu attend-validate 2>&1 | tee "$OUTDIR/validate.log"; rc=${PIPESTATUS[0]}; echo "attend-validate exit $rc"; [ $rc -ne 0 ] && status=1
[ $STOP -eq 1 ] && [ $status -ne 0 ] && { grep FAIL "$OUTDIR/validate.log" | head -20; exit 1; }
if [ -x $B/tests/gpu/gpu_attention_test ]; then
  $B/tests/gpu/gpu_attention_test > "$OUTDIR/gtest.log" 2>&1; rc=$?; echo "gpu_attention_test exit $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUTDIR/gtest.log" | tr '\n' ' ')"; [ $rc -ne 0 ] && status=1
fi
if [ $NCU -eq 1 ]; then
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$NCU_BIN" ]; then echo "ncu: not found" | tee "$OUTDIR/ncu.log"; else
    for k in ${NCU_KERNELS:-split stream}; do for m in ${NCU_METHODS:-fp16 kivi-2}; do
      echo "=== $k $m B=8 L=32768" >> "$OUTDIR/ncu.log"
      timeout 180 "$NCU_BIN" --kernel-name regex:decode_s --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
        $B/gpu/kvlab-gpu attend-bench --method $m --batch 8 --length 32768 --reps 1 --kernel $k >> "$OUTDIR/ncu.log" 2>&1
      echo "ncu $k $m: exit $?"
    done; done
  fi
fi
if [ $SAN -eq 1 ]; then
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    for m in ${SAN_METHODS:-fp16 int8 kivi-4 kivi-2-sink kitty}; do
      timeout "${SAN_TIMEOUT:-120}" compute-sanitizer --tool $tool --error-exitcode 9 $B/gpu/kvlab-gpu attend-validate --small --method $m ${SAN_ARGS:-} \
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
