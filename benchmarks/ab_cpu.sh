#!/usr/bin/env bash
# Side-by-side CPU timings of two builds (e.g. the commit before a refactor and after), run
# alternately so that load hits both alike: eval (7 presets) and sensitivity on a synthetic
# llama3-8b dump, ROUNDS rounds each, then the k-means benchmark once per build; checks that the
# outputs agree (eval JSON but timings, sensitivity CSV byte for byte).
# Usage: benchmarks/ab_cpu.sh BUILD_A BUILD_B [ROUNDS] [OUTDIR]
set -u
A=$1 B=$2 ROUNDS=${3:-3} OUTDIR=${4:-ab_cpu_out}
mkdir -p "$OUTDIR" && cd "$OUTDIR" || exit 1
timed() { { /usr/bin/time -f "%e %U %S" "$@" >/dev/null; } 2>&1 | tail -1; }
for r in $(seq "$ROUNDS"); do
  for side in A B; do
    d=$A; [ $side = B ] && d=$B
    echo "eval $side round $r load $(cut -d' ' -f1 /proc/loadavg) wall/user/sys $(timed "$d/experiments/kvlab" eval \
      synthetic:llama3-8b --queries last:256 --format json --out eval_$side.json --quiet)"
  done
  for side in A B; do
    d=$A; [ $side = B ] && d=$B
    echo "sens $side round $r load $(cut -d' ' -f1 /proc/loadavg) wall/user/sys $(timed "$d/experiments/kvlab" \
      sensitivity synthetic:llama3-8b:tokens=4096 --queries last:256 --threads 2 --quiet --out sens_$side.csv)"
  done
done
for side in A B; do
  d=$A; [ $side = B ] && d=$B
  echo "== kmeans $side"; "$d/benchmarks/kvlab_bench_kmeans_faiss" --repeats 3 --no-faiss 2>&1 | tail -8
done
cmp sens_A.csv sens_B.csv && echo "sensitivity CSVs identical"
python3 - <<'PY'
import json
a, b = json.load(open("eval_A.json")), json.load(open("eval_B.json"))
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if "tim" not in k}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
print("eval JSON equal except timings:", strip(a) == strip(b))
PY
