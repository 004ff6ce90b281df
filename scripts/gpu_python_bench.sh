#!/usr/bin/env bash
# Issue 13's speed line on the GPU machine's host CPU, with binaries built elsewhere (a build
# there does not fit a short lease). DIR holds DIR/kvlab_bench_quantize, DIR/python/kvlab/ (the
# package with _kvlab for the host's Python), DIR/lib (libraries the host lacks) and DIR/lib-hdf5
# (HDF5 and its codecs, used only where the host has none), DIR/cpu_pairs (benchmarks/cpu_pairs.c,
# optional: which vCPUs slow each other down). First what
# tells OpenMP runtimes and settings apart: each side's OpenMP settings as its libgomp reads them
# (OMP_DISPLAY_ENV), the OpenMP/BLAS libraries each maps; then benchmarks/python_quantize.py at
# 1 and 2 threads, alternating, for at most SECONDS (default 70), every repetition logged; last,
# the OpenMP runtime torch ships (its soname decides whether a process that imports torch first
# holds one runtime or two). Logs go to $OUT (or ./python_bench_out).
# Usage: bash scripts/gpu_python_bench.sh DIR [SECONDS] [python_quantize.py options...]
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
D=$(cd "$1" && pwd) || exit 1
SECS=${2:-70}
shift $(($# < 2 ? $# : 2))
OUT=${OUT:-$PWD/python_bench_out}
mkdir -p "$OUT"
PY=${KVLAB_PY:-$(command -v python3)}
export LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1 PYTHONPATH=$D/python
ldd "$D"/python/kvlab/_kvlab*.so | grep -qE "(hdf5|sz|aec).*not found" && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$D/lib-hdf5
{ date -u; uname -r; nproc; lscpu | grep -E "Model name|Thread\(s\)|NUMA node\(s\)"
  env | grep -E "^(OMP|GOMP|KMP|OPENBLAS|MKL)_"
  ldd "$D/kvlab_bench_quantize" "$D"/python/kvlab/_kvlab*.so | grep -E "not found|gomp|omp\.|blas"; } 2>&1 |
  tee "$OUT/machine.log"

# OpenMP settings as each side's runtime reads them at start (no benchmark runs: the filter matches none)
OMP_DISPLAY_ENV=VERBOSE "$D/kvlab_bench_quantize" --benchmark_filter=^none$ 2>&1 | grep -E "^ +(\[[a-z]+\] )?[A-Z_]+ = " >"$OUT/omp_cpp.txt"
OMP_DISPLAY_ENV=VERBOSE "$PY" -c "from kvlab._ext import ext" 2>&1 | grep -E "^ +(\[[a-z]+\] )?[A-Z_]+ = " >"$OUT/omp_py.txt"
if cmp -s "$OUT/omp_cpp.txt" "$OUT/omp_py.txt"; then echo "OpenMP settings: the same on both sides"
else echo "OpenMP settings differ:"; diff "$OUT/omp_cpp.txt" "$OUT/omp_py.txt"; fi | tee -a "$OUT/machine.log"

[ -x "$D/cpu_pairs" ] && "$D/cpu_pairs" | tee -a "$OUT/machine.log"
"$PY" benchmarks/python_quantize.py --bench "$D/kvlab_bench_quantize" --threads 1,2 --reps 40 \
  --max-seconds "$SECS" --log "$OUT/reps.jsonl" "$@" 2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}

# torch's own OpenMP runtime: with the soname libgomp.so.1, kvlab uses that one once torch is loaded
T=$("$PY" -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])" 2>/dev/null)
[ -n "$T" ] && for f in "$T"/lib/*omp*; do
  [ -e "$f" ] && echo "torch ships $f: $(readelf -d "$f" 2>/dev/null | grep -o 'SONAME.*')"
done | tee -a "$OUT/machine.log"
exit "$status"
