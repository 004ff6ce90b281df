#!/usr/bin/env bash
# The whole kvlab-vs-faiss grid (benchmarks/kmeans_faiss_pypi.sh) on an idle many-core machine in
# one go: each job (a thread count and some cases) runs pinned by taskset to its own physical
# cores, several jobs side by side (they share the L3 cache, memory bandwidth and the clock
# budget: docs/PERFORMANCE.md says what that means for the figures). Logs of finished jobs are
# appended to LOG whole, so a run cut short still leaves every finished job's table.
# KVLAB_GRID_BASE=BINARY: each job then also runs that kvlab_bench_kmeans_faiss (an older build)
# on its cases and cores, kvlab only: an A/B of two builds under the same conditions.
# KVLAB_GRID_THREADS="2": only the jobs of these thread counts (default "2 1": all).
# Usage: benchmarks/kmeans_faiss_grid.sh LOG [--build DIR] [--repeats N]
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=$1; shift
ARGS=("$@")
# One logical CPU per physical core (no two threads of a job on hyperthread siblings).
mapfile -t CORES < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | awk -F, '!seen[$2 "," $3]++ {print $1}')
echo "grid: ${#CORES[@]} physical cores (${CORES[*]}); $(date -u)" | tee -a "$LOG"
# 2-thread jobs first (the main table), each list longest first (faiss at k = 4096 and d >= 16
# takes longest), so the short jobs fill the gaps.
JOBS=(2:d32k4096 2:d16k4096 2:cq4c8b,d2k4096 2:1Mx4,100Kx8 2:d32k256,d16k256,d2k256 2:d32k16,d16k16,d2k16
      1:d32k4096 1:d16k4096 1:cq4c8b,d2k4096 1:1Mx4,100Kx8 1:d32k256,d16k256,d2k256 1:d32k16,d16k16,d2k16)
Q=$(mktemp -u); mkfifo "$Q"; exec 3<>"$Q"; rm -f "$Q"  # finished jobs hand their cores back here
free=("${CORES[@]}")
for job in "${JOBS[@]}"; do
  t=${job%%:*} cases=${job#*:}
  [[ " ${KVLAB_GRID_THREADS:-2 1} " == *" $t "* ]] || continue
  while [ ${#free[@]} -lt "$t" ]; do read -r -u 3 line; read -r -a back <<<"$line"; free+=("${back[@]}"); done
  mine=("${free[@]:0:t}"); free=("${free[@]:t}")
  (
    tmp=$(mktemp)
    taskset -c "$(IFS=,; echo "${mine[*]}")" benchmarks/kmeans_faiss_pypi.sh --threads "$t" --cases "$cases" \
      "${ARGS[@]}" >"$tmp" 2>&1 || echo "job $job failed: $?" >>"$tmp"
    if [ -n "${KVLAB_GRID_BASE:-}" ]; then
      echo "base build $KVLAB_GRID_BASE:" >>"$tmp"
      OMP_NUM_THREADS=$t OMP_WAIT_POLICY=passive taskset -c "$(IFS=,; echo "${mine[*]}")" "$KVLAB_GRID_BASE" \
        --no-faiss --repeats 3 --cases "$cases" >>"$tmp" 2>&1 || echo "base failed: $?" >>"$tmp"
    fi
    { echo "== job $t thread(s) on CPU ${mine[*]}: $cases"; cat "$tmp"; } | flock "$LOG" tee -a "$LOG" >/dev/null
    rm -f "$tmp"
    echo "${mine[*]}" >&3
  ) &
done
wait
