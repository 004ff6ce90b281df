#!/usr/bin/env bash
# Issue 13's Python/C++ quantize comparison on the GPU machine's host CPU with binaries built
# elsewhere (the machine's start and a build there do not fit a short lease). DIR holds one build:
# DIR/kvlab_bench_quantize, DIR/python/kvlab/ (the package with _kvlab for the host's Python),
# DIR/lib (libraries the host lacks; DIR/lib-hdf5 is added only where it has no HDF5) and
# DIR/scratch_offset.so (benchmarks/scratch_offset.c). In order of value: python_quantize.py at
# 1 and 2 threads; where each process's scratch blocks land (mod 64); the C++ benchmark with its
# scratch placed at 0/16/32/48 mod 64. Logs go to $OUT (or ./scratch_ab_out).
# Usage: bash scripts/gpu_python_scratch_ab.sh DIR [REPS]
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
D=$(cd "$1" && pwd)
REPS=${2:-7}
OUT=${OUT:-$PWD/scratch_ab_out}
mkdir -p "$OUT"
PY=${KVLAB_PY:-$(command -v python3)}
export LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1 PYTHONPATH=$D/python
ldd "$D"/python/kvlab/_kvlab*.so | grep -q "hdf5.*not found" && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$D/lib-hdf5
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)"; "$PY" -c "import sys, numpy; print(sys.version.split()[0], numpy.__version__)"
  ldd "$D/kvlab_bench_quantize" "$D"/python/kvlab/_kvlab*.so | grep "not found"; } 2>&1 | tee "$OUT/machine.log"
for t in 1 2; do
  "$PY" benchmarks/python_quantize.py --bench "$D/kvlab_bench_quantize" --presets kivi-2/K,kivi-2/V,kitty/K \
    --threads $t --reps "$REPS" --min-time 0.2 2>&1 | tee -a "$OUT/bench.log"
done

# Where each process's scratch lands, and the C++ benchmark's speed with it placed by hand.
X=$(mktemp -d)/x.npy
KVLAB_SCRATCH_LOG=1 LD_PRELOAD=$D/scratch_offset.so OMP_NUM_THREADS=1 "$PY" -c "
import sys, numpy as np, kvlab
x = np.random.default_rng(1).standard_normal((32, 32768, 128), dtype=np.float32).astype(np.float16)
np.save(sys.argv[1], x)
print('input at', x.ctypes.data % 64, 'mod 64', file=sys.stderr)
kvlab.quantize(x, kvlab.Method('kivi-2').key_quantizer)" "$X" 2>&1 | sed 's/^/python /' | tee -a "$OUT/scratch.log"
KVLAB_BENCH_INPUT=$X KVLAB_SCRATCH_LOG=1 LD_PRELOAD=$D/scratch_offset.so "$D/kvlab_bench_quantize" \
  --benchmark_filter='^quantize/kivi-2/K/1/' --benchmark_min_time=0.01 2>&1 | grep scratch | sed 's/^/C++ /' |
  tee -a "$OUT/scratch.log"
for off in natural 0 16 32 48; do
  o=$off
  [ "$off" = natural ] && o=""  # the library passes malloc through
  KVLAB_BENCH_INPUT=$X KVLAB_SCRATCH_OFFSET=$o LD_PRELOAD=$D/scratch_offset.so "$D/kvlab_bench_quantize" \
    --benchmark_filter='^quantize/kivi-2/(K|V)/1/' --benchmark_min_time=0.2 --benchmark_repetitions=3 \
    --benchmark_format=csv 2>/dev/null | grep 'real_time",' |
    awk -F, -v o="$off" '{printf "offset %s: %s wall %.0f ms, CPU %.0f ms\n", o, $1, $3, $4}' | tee -a "$OUT/scratch.log"
done
rm -rf "$(dirname "$X")"
