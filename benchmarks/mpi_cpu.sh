#!/usr/bin/env bash
# 2-rank CPU MPI against 1 rank x 1 thread on the same work (docs/PERFORMANCE.md, "MPI on the CPU").
# Usage: benchmarks/mpi_cpu.sh [REPEATS] [DUMP]   (default 5; a synthetic llama3-8b dump, 2 layers,
# 2048 tokens, written once to /tmp). Runs the two alternately, checks that the results are the
# same bits, and prints each run's wall and CPU seconds (eval's JSON timing_s) and the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/experiments/kvlab
n=${1:-5}
dump=${2:-/tmp/kvlab_mpi_bench_l8b.h5}
[ -f "$dump" ] || $K synth --preset llama3-8b --tokens 2048 --layers 2 --quiet --out "$dump"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
args=(eval "$dump" --queries last:256 --threads 1 --quiet --format json)
fields() { /usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['timing_s']; print(t['total'], t['cpu']['total'])" "$1"; }
for i in $(seq "$n"); do
  s=$(date +%s.%N); $K "${args[@]}" --out "$out/one.json"; w1=$(echo "$(date +%s.%N) - $s" | bc)
  s=$(date +%s.%N); mpirun -np 2 "$K" "${args[@]}" --out "$out/two.json"; w2=$(echo "$(date +%s.%N) - $s" | bc)
  cmp <(grep -vE '"(threads|ranks|timing_s)"' "$out/one.json") <(grep -vE '"(threads|ranks|timing_s)"' "$out/two.json") ||
    { echo "results differ" >&2; exit 1; }
  echo "run $i: 1x1 $w1 s (json wall/cpu $(fields "$out/one.json"))  2 ranks $w2 s (json wall/cpu-sum $(fields "$out/two.json"))  load $(cut -d' ' -f1 /proc/loadavg)"
done | tee "$out/log"
/usr/bin/python3 - "$out/log" <<'PY'
import re, statistics, sys
one, two = [], []
for line in open(sys.argv[1]):
    m = re.search(r"1x1 ([\d.]+) s .*?2 ranks ([\d.]+) s", line)
    one.append(float(m.group(1))); two.append(float(m.group(2)))
a, b = statistics.median(one), statistics.median(two)
print(f"median wall (process start to exit): 1 rank x 1 thread {a:.2f} s, 2 ranks x 1 thread {b:.2f} s: {a / b:.2f}x")
PY
rm -rf "$out"
