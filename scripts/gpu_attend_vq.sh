#!/usr/bin/env bash
# One call on the GPU machine for the codebook (VQ / CQ) decode kernel, with binaries built
# elsewhere (the full `kvlab`: its attend-validate writes codebook files and checks K_hat / V_hat
# against the vq method's apply, which the GPU-only kvlab-gpu cannot read):
#   attend-validate --kernel codebook (the vq methods), attend-bench of CQ-4c8b joined with torch
#   SDPA (scripts/attend_sdpa.py), compute-sanitizer memcheck + racecheck over `--small --kernel
#   codebook`, Nsight Compute of the codebook kernel at B=8, L=32K, attend-validate --small (every
#   method: the shared host code) and gpu_attention_test, in that order (most valuable first).
# Usage: KVLAB_BIN=DIR bash scripts/gpu_attend_vq.sh   (DIR/kvlab, DIR/gpu_attention_test)
# Logs and the table go to $OUT (or ./gpu_attend_vq_out). PY: the torch interpreter.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-$PWD/gpu_attend_vq_out}; mkdir -p "$OUTDIR"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
K=$KVLAB_BIN/kvlab
PY=${PY:-/opt/torch/.venv/bin/python3}
status=0
step() { echo "== $1 ($(date -u +%T))"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } 2>&1 | tee "$OUTDIR/machine.log"
if ldd "$K" | grep -q "not found"; then ldd "$K" | grep "not found"; echo "missing libraries"; exit 3; fi
step validate-codebook
$K gpu attend-validate --kernel codebook > "$OUTDIR/validate_vq.log" 2>&1; rc=$?
echo "exit $rc"; grep -c " ok$" "$OUTDIR/validate_vq.log"; grep -E "FAIL|rror" "$OUTDIR/validate_vq.log" | head; [ $rc -ne 0 ] && status=1
step bench
$K gpu attend-bench --method CQ-4c8b ${BENCH_ARGS:-} --csv "$OUTDIR/attend_bench.csv" > "$OUTDIR/bench.log" 2>&1 || status=1
cat "$OUTDIR/bench.log"
PYTHONUNBUFFERED=1 $PY scripts/attend_sdpa.py "$OUTDIR/attend_bench.csv" --out "$OUTDIR/attend_table.md" > "$OUTDIR/sdpa.log" 2>&1 || status=1
tail -20 "$OUTDIR/sdpa.log"
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU_BIN" ] && [ "${NCU:-1}" = 1 ]; then
  step ncu
  timeout "${NCU_TIMEOUT:-90}" "$NCU_BIN" --kernel-name regex:"decode_(vq|cq)" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis_Tables --print-details all \
    $K gpu attend-bench --method CQ-4c8b --batch 8 --length 32768 --reps 1 > "$OUTDIR/ncu.log" 2>&1
  echo "ncu: exit $?"
fi
for tool in memcheck racecheck; do
  step "$tool"
  timeout "${SAN_TIMEOUT:-150}" compute-sanitizer --tool $tool --error-exitcode 9 $K gpu attend-validate --small --kernel codebook \
    > "$OUTDIR/san_$tool.log" 2>&1; rc=$?
  echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/san_$tool.log" | tr '\n' ' ')" | tee -a "$OUTDIR/sanitizer.log"
  [ $rc -ne 0 ] && status=1
done
step validate-small-all
$K gpu attend-validate --small > "$OUTDIR/validate_small.log" 2>&1; rc=$?
echo "exit $rc"; grep -c " ok$" "$OUTDIR/validate_small.log"; grep -E "FAIL|rror" "$OUTDIR/validate_small.log" | head; [ $rc -ne 0 ] && status=1
if [ -x "$KVLAB_BIN/gpu_attention_test" ]; then
  step gtest
  "$KVLAB_BIN/gpu_attention_test" > "$OUTDIR/gtest.log" 2>&1; rc=$?
  echo "exit $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUTDIR/gtest.log" | tr '\n' ' ')"; [ $rc -ne 0 ] && status=1
fi
step done
exit $status
