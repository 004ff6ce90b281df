#!/usr/bin/env bash
# One call on the GPU machine: build KIVI's CUDA extension from its source, run it on
# `kvlab check-attention make` cases (scripts/kivi_check_attention.py), time its kernels at B=8,
# L=32K, kivi-2 and kivi-4 (NCU=1: and profile kivi-2's with ncu), and, given a kvlab-gpu
# binary, kvlab's decode kernel and SDPA on the same shapes.
# The outputs come back in $OUT/kivi_out.tgz; `kvlab check-attention verify CASE OUT` runs anywhere.
#
# KIVI's source is not in this repository; fetch it where there is a network and carry it:
#   git clone https://github.com/jy-yuan/KIVI KIVI_DIR && git -C KIVI_DIR checkout 876b4d2d08e3b1d5f70d0969c299d8c7c42ddfb6
# Usage: KIVI_DIR=DIR [KVLAB_GPU=path/to/kvlab-gpu[.xz]] [NCU=1] bash scripts/gpu_kivi_check.sh CASE.npz ...
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/kivi_out}; mkdir -p "$FINAL"
W=$(mktemp -d)
LOG=$FINAL/kivi.log
PY=$(command -v /opt/torch/.venv/bin/python3 || command -v python3)
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } 2>&1 | tee "$LOG"
t0=$(date +%s)
# the cases first, their outputs packed at once (the timings after them may run out of time)
"$PY" scripts/kivi_check_attention.py --kivi "${KIVI_DIR:?set KIVI_DIR}" --out-dir "$W" "$@" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
echo "kivi_check_attention exit $status after $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
tar -C "$W" -czf "$FINAL/kivi_out.tgz" .
"$PY" scripts/kivi_check_attention.py --kivi "$KIVI_DIR" --out-dir "$W" --bench 2 4 2>&1 | tee -a "$LOG"
if [ "${NCU:-0}" = 1 ]; then  # KIVI's two kernels at B=8, L=32K, kivi-2: launches 2 (q.K) and 4 (p.V)
  ncu -k regex:bgemv --launch-count 4 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    "$PY" scripts/kivi_check_attention.py --kivi "$KIVI_DIR" --out-dir "$W" --bench 2 --reps 1 > "$FINAL/ncu.txt" 2>&1
  echo "ncu exit $?" | tee -a "$LOG"
fi
if [ -n "${KVLAB_GPU:-}" ]; then
  bin=$KVLAB_GPU
  case $bin in *.xz) xz -dc "$bin" > "$W/kvlab-gpu" && chmod +x "$W/kvlab-gpu" && bin=$W/kvlab-gpu;; esac
  "$bin" attend-bench --method kivi-2 --method kivi-4 --batch 8 --length 32768 --reps 20 --csv "$W/bench.csv" 2>&1 | tee -a "$LOG"
  "$PY" scripts/attend_sdpa.py "$W/bench.csv" --reps 20 2>&1 | tee -a "$LOG"
fi
echo "done after $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
rm -rf "$W"
exit "$status"
