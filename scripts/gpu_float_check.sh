#!/usr/bin/env bash
# The scaled floating-point formats on the GPU machine, in one call (about 5 minutes on an H100):
# build kvlab-gpu (GPU-only, as scripts/gpu_check.sh does), then
#   1. kvlab-gpu validate --only fmt= : the device-arithmetic rows, among them fp8-cvt (the
#      hardware FP8 conversion vs the integer reference on every fp16 value, all 2^32 floats but
#      NaN and all 256 codes, e4m3 and e5m2), and every kFloatFormats entry against the CPU
#      reference (dynamic and, for FP8, 99.9th-percentile scales), byte for byte;
#   2. the gtest gpu_float_test when GoogleTest sources are at .deps/googletest;
#   3. kvlab-gpu bench --only fmt= --preset default: bandwidth against cudaMemcpy D2D.
# Logs go to $OUT (or ./gpu_float_check_out). Exit 1 on any mismatch.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_float_check_out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu-float
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } | tee "$OUT/machine.log"
GT=""; [ -f .deps/googletest/CMakeLists.txt ] && GT="-DKVLAB_GTEST_SOURCE=$PWD/.deps/googletest"
targets=(kvlab-gpu); [ -n "$GT" ] && targets+=(gpu_float_test)
if ! { cmake -S . -B $B -DKVLAB_GPU_ONLY=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" $GT &&
       cmake --build $B -j"$(nproc)" --target "${targets[@]}"; } > "$OUT/build.log" 2>&1; then
  echo "build FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 3
fi
echo "build ok"
$B/gpu/kvlab-gpu validate --only fmt= 2>&1 | tee "$OUT/validate.log" | awk '$0 ~ /validate:|exhaustive/ || ($7+0 > 0 && NR > 2) {print}'
rc=${PIPESTATUS[0]}; echo "validate exit $rc"; [ $rc -ne 0 ] && status=1
if [ -x $B/tests/gpu/gpu_float_test ]; then
  $B/tests/gpu/gpu_float_test > "$OUT/gpu_float_test.log" 2>&1; rc=$?
  echo "gpu_float_test: exit $rc, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gpu_float_test.log" | tr '\n' ' ')"
  [ $rc -ne 0 ] && status=1
fi
$B/gpu/kvlab-gpu bench --only fmt= --preset default 2>&1 | tee "$OUT/bench.log"
exit $status
