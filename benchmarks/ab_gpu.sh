#!/usr/bin/env bash
# On the GPU machine: the GPU kernels of an older tree (OLD, holding its CMakeLists.txt, core/,
# gpu/; e.g. `git archive REV CMakeLists.txt core gpu | tar -x -C OLD`) against this checkout,
# both built GPU-only, benched alternately twice with their default kernels. Logs to $OUT.
# Usage: bash benchmarks/ab_gpu.sh OLD [OLD_PRESET]   (OLD_PRESET: the old default's name, e.g. v4)
set -u -o pipefail
OLD=$1 OLD_PRESET=${2:-v4} OUT=${OUT:-ab_gpu_out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
(cd "$OLD" && cmake -S . -B b -DKVLAB_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build b -j"$(nproc)" --target kvlab-gpu >/dev/null) || { echo "old build failed"; exit 3; }
(cmake -S . -B build-ab -DKVLAB_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-ab -j"$(nproc)" --target kvlab-gpu >/dev/null) || { echo "new build failed"; exit 3; }
for round in 1 2; do
  echo "== round $round old"; "$OLD/b/gpu/kvlab-gpu" bench --preset "$OLD_PRESET" 2>&1 | tee -a "$OUT/bench_old.log" | tail -14
  echo "== round $round new"; build-ab/gpu/kvlab-gpu bench --preset default 2>&1 | tee -a "$OUT/bench_new.log" | tail -14
done
