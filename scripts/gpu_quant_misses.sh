#!/usr/bin/env bash
# One call on the GPU machine for the quantize kernels that missed 85% of copy (whole-axis INT8,
# Kitty pages): time the default kernels beside their predecessors and A/B presets (cluster-narrow, cluster-wide,
# cluster-l2 and two-pass; boost-staged) in one process each, validate the default on the small data plus a
# 4096-token raw set (the bench's group and page shapes), ncu of the new kernels, and
# compute-sanitizer memcheck + racecheck of them on the small data. Logs go to $OUT (or
# ./gpu_quant_out); the bench table is printed last.
# KVLAB_GPU_BIN=DIR: DIR/kvlab-gpu built elsewhere (else built here, GPU-only).
# OLD_GPU_BIN=DIR: also time (and ncu) DIR/kvlab-gpu's default int8-ch, an earlier commit's binary.
# ONLY=int8-ch: the whole-axis INT8 rows alone (no Kitty bench, ncu or sanitizer runs).
# CHECK_PRESETS: the presets that validate, ncu and compute-sanitizer run (default: --preset default).
# STEP_TIMEOUT: seconds per step (60); BENCH_ARGS: extra bench arguments (e.g. --elements N);
# NCU_ELEMENTS: elements of the ncu run (2^26); PY: a python3 with numpy (the raw data set).
# Usage: bash scripts/gpu_quant_misses.sh [--no-ncu] [--no-sanitize]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-$PWD/gpu_quant_out}; mkdir -p "$OUTDIR"
NCU=1; SAN=1
for a in "$@"; do case $a in --no-ncu) NCU=0;; --no-sanitize) SAN=0;; esac; done
export PATH=/usr/local/cuda/bin:$PATH
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } 2>&1 | tee "$OUTDIR/machine.log"
if [ -n "${KVLAB_GPU_BIN:-}" ]; then
  BIN=$KVLAB_GPU_BIN
else
  B=build-gpu-quant
  cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >"$OUTDIR/build.log" 2>&1 &&
    cmake --build $B -j"$(nproc)" --target kvlab-gpu >>"$OUTDIR/build.log" 2>&1 ||
    { echo "build FAILED"; grep -E "error" "$OUTDIR/build.log" | head -30; exit 3; }
  BIN=$B/gpu
fi
G=$BIN/kvlab-gpu
T=${STEP_TIMEOUT:-60}
E=${BENCH_ARGS:-}
{
  timeout $T $G bench $E --only int8-ch --preset default --preset cluster-narrow --preset cluster-wide --preset cluster-l2 --preset two-pass
  [ -n "${OLD_GPU_BIN:-}" ] && { echo "# OLD_GPU_BIN: $OLD_GPU_BIN"; timeout $T "$OLD_GPU_BIN/kvlab-gpu" bench $E --only int8-ch --preset default; }
  [ "${ONLY:-}" = int8-ch ] || timeout $T $G bench $E --only kitty --preset default --preset boost-staged
} > "$OUTDIR/bench.log" 2>&1 || status=1
# A 4096-token set with outlier channels, exact zeros and repeated values (raw float32).
RAW=$(mktemp -d)/llama-like.f32
"${PY:-/opt/torch/.venv/bin/python3}" - "$RAW" <<'PY'
import sys, numpy as np
r = np.random.default_rng(7)
x = r.standard_normal((1, 2, 4096, 128)).astype(np.float32) * np.where(r.random(128) < 0.06, 12.0, 1.0).astype(np.float32)
x[..., ::97, :] = 0.0; x[..., 5::211, 3] = -0.0; x[..., 40:60, 9] = 1.5
x.astype("<f4").tofile(sys.argv[1])
PY
V="--raw llama-like:1,2,4096,128:$RAW"
[ -s "$RAW" ] || V=""
P=${CHECK_PRESETS:---preset default}
timeout $T $G validate --small $V --only axis=channel $P > "$OUTDIR/validate.log" 2>&1; rc=$?
echo "validate --small ${V:+(+4096-token raw set) }--only axis=channel $P: exit $rc; $(tail -1 "$OUTDIR/validate.log")"
awk '$7+0 > 0 && NR > 2' "$OUTDIR/validate.log" | head -5; [ $rc -ne 0 ] && status=1
NCU_BIN=""
[ $NCU -eq 1 ] && NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU_BIN" ]; then
  M="smsp__inst_executed.sum,dram__bytes.sum,gpu__time_duration.sum"
  M="$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
  S="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats"
  # int8-ch and both Kitty formats (f16 and f32 in): 6 launches of the two new kernels
  K="regex:channel_quant_cluster_smem|boost_quant_radix"; LC=6
  [ "${ONLY:-}" = int8-ch ] && { K="regex:channel_quant_cluster_smem"; LC=$((2 * $(echo "$P" | grep -o -- --preset | wc -l))); }
  timeout $T "$NCU_BIN" --kernel-name "$K" --launch-count $LC $S \
    --metrics "$M" $G bench --elements ${NCU_ELEMENTS:-67108864} --reps 1 --warmup 0 --only axis=channel \
    $P > "$OUTDIR/ncu.log" 2>&1
  echo "ncu: exit $?"
  if [ -n "${OLD_GPU_BIN:-}" ]; then  # the earlier kernel, f16 in (its first launch)
    timeout $T "$NCU_BIN" --kernel-name regex:channel_quant_cluster_smem --launch-count 1 $S --metrics "$M" \
      "$OLD_GPU_BIN/kvlab-gpu" bench --elements ${NCU_ELEMENTS:-67108864} --reps 1 --warmup 0 --only int8-ch \
      --preset default > "$OUTDIR/ncu_old.log" 2>&1
    echo "ncu (OLD_GPU_BIN): exit $?"
  fi
fi
if [ $SAN -eq 1 ]; then
  for tool in memcheck racecheck; do
    for only in $([ "${ONLY:-}" = int8-ch ] && echo int8-ch || echo kitty-k int8-ch); do
      timeout $T compute-sanitizer --tool $tool --error-exitcode 9 $G validate --small --only $only $P \
        > "$OUTDIR/san_${tool}_$only.log" 2>&1; rc=$?
      echo "$tool $only: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/san_${tool}_$only.log" | tr '\n' ' ')"
      [ $rc -ne 0 ] && status=1
    done
  done
fi
cat "$OUTDIR/bench.log"
exit $status
