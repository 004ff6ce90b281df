#!/usr/bin/env bash
# One call on the GPU machine for the GPU k-means: build core/ + gpu/ (GPU-only, the CPU's
# k-means compiled from vq/src/kmeans*.cpp), validate against the CPU bit for bit, benchmark.
# Log: $OUT/kmeans.log (or ./gpu_kmeans_out/kmeans.log). Usage: bash scripts/gpu_kmeans_check.sh [--no-bench] [--layers N]
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_kmeans_out}; mkdir -p "$FINAL"
BENCH=(--bench); LAYERS=32
while [ $# -gt 0 ]; do case $1 in --no-bench) BENCH=();; --layers) LAYERS=$2; shift;; esac; shift; done
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu-kmeans
{
  echo "== machine"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -1; nproc
  echo "== build"
  mkdir -p $B; cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DKVLAB_GPU_PTXAS_VERBOSE=ON -DCMAKE_CUDA_COMPILER=$(command -v nvcc) >$B/build.log 2>&1 &&
    cmake --build $B -j"$(nproc)" --target kvlab-gpu-kmeans >>$B/build.log 2>&1 || { echo "build FAILED"; grep -E "error" $B/build.log | head -30; exit 3; }
  grep -E "ptxas info.*(Compiling|Used)" $B/build.log | sed 's/_GLOBAL__N__[0-9a-f_]*//' | head -44
  echo "== kvlab-gpu-kmeans --validate ${BENCH[*]} --layers $LAYERS"
  $B/gpu/kvlab-gpu-kmeans --validate "${BENCH[@]}" --layers "$LAYERS"
} 2>&1 | tee "$FINAL/kmeans.log"
exit "${PIPESTATUS[0]}"
