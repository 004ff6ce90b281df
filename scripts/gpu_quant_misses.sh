#!/usr/bin/env bash
# One call on the GPU machine for the quantize kernels that missed 85% of copy (whole-axis INT8,
# Kitty pages) and the decode-attention stall breakdown: validate and time the new kernels beside
# their predecessors (presets two-pass, cluster-1/2, boost-single), ncu of each, ncu stall reasons
# of the tensor-core kivi-2 attention kernel. Logs go to $OUT (or ./gpu_quant_out).
# KVLAB_GPU_BIN=DIR: DIR/kvlab-gpu (and DIR/gpu_fastq_test if present) built elsewhere; else build here.
# STEP_TIMEOUT: seconds per step (60); BENCH_ARGS: extra bench arguments (e.g. --elements N);
# NCU_ELEMENTS: elements of the ncu runs (2^27); NCU_OLD=0, NCU_ATTN=0: skip the predecessor's and
# the attention profile.
# Usage: bash scripts/gpu_quant_misses.sh [--no-ncu]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-$PWD/gpu_quant_out}; mkdir -p "$OUTDIR"
NCU=1; [ "${1:-}" = "--no-ncu" ] && NCU=0
export PATH=/usr/local/cuda/bin:$PATH
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } 2>&1 | tee "$OUTDIR/machine.log"
if [ -n "${KVLAB_GPU_BIN:-}" ]; then
  BIN=$KVLAB_GPU_BIN
else
  B=build-gpu-quant
  GT=""; [ -f .deps/googletest/CMakeLists.txt ] && GT="-DKVLAB_GTEST_SOURCE=$PWD/.deps/googletest"
  cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" $GT >"$OUTDIR/build.log" 2>&1 &&
    cmake --build $B -j"$(nproc)" --target kvlab-gpu gpu_fastq_test >>"$OUTDIR/build.log" 2>&1 ||
    { echo "build FAILED"; grep -E "error" "$OUTDIR/build.log" | head -30; exit 3; }
  mkdir -p $B/bin && cp $B/gpu/kvlab-gpu $B/tests/gpu/gpu_fastq_test $B/bin/ && BIN=$B/bin
fi
G=$BIN/kvlab-gpu
T=${STEP_TIMEOUT:-60}
# every kernel variant on the small data (validate --small), then the timings, ncu, full-size validate
if [ -x "$BIN/gpu_fastq_test" ]; then
  timeout $T "$BIN/gpu_fastq_test" > "$OUTDIR/gtest.log" 2>&1; rc=$?
  echo "gpu_fastq_test exit $rc: $(grep -E '^\[  (PASSED|FAILED)' "$OUTDIR/gtest.log" | tr '\n' ' ')"; [ $rc -ne 0 ] && status=1
fi
E=${BENCH_ARGS:-}
{
  timeout $T $G bench $E --only int8-ch --preset default --preset two-pass --preset cluster-1 --preset cluster-2
  timeout $T $G bench $E --only kitty --preset default --preset boost-single
} 2>&1 | tee "$OUTDIR/bench.log"
NCU_BIN=""
[ $NCU -eq 1 ] && NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M="smsp__inst_executed.sum,dram__bytes.sum,gpu__time_duration.sum"
M="$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
S="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats"
q() {  # kernel-name regex, then bench arguments: the f16-in and f32-in quantize launches
  echo "=== $*" >> "$OUTDIR/ncu.log"
  timeout $T "$NCU_BIN" --kernel-name "regex:$1" --launch-count 2 $S --metrics "$M" \
    $G bench --elements ${NCU_ELEMENTS:-134217728} --reps 1 --warmup 0 "${@:2}" >> "$OUTDIR/ncu.log" 2>&1
  echo "ncu $*: exit $?"
}
if [ -n "$NCU_BIN" ]; then
  q channel_quant_cluster --only int8-ch --preset default
  q boost_quant_radix --only kitty-k2 --preset default
  [ "${NCU_OLD:-1}" = 1 ] && q boost_quant_radix --only kitty-k2 --preset boost-single
fi
timeout $T $G validate --only axis=channel --preset default > "$OUTDIR/validate.log" 2>&1; rc=$?
echo "validate --only axis=channel --preset default: exit $rc"; tail -2 "$OUTDIR/validate.log"; [ $rc -ne 0 ] && status=1
if [ -n "$NCU_BIN" ] && [ "${NCU_ATTN:-1}" = 1 ]; then
  echo "=== attention stream kivi-2 B=8 L=32768" >> "$OUTDIR/ncu.log"
  timeout $T "$NCU_BIN" --kernel-name regex:decode_s --launch-skip 1 --launch-count 1 $S --metrics "$M" \
    $G attend-bench --method kivi-2 --batch 8 --length 32768 --reps 1 --kernel stream >> "$OUTDIR/ncu.log" 2>&1
  echo "ncu attention kivi-2: exit $?"
fi
exit $status
