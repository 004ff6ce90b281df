#!/usr/bin/env bash
# One call on the GPU machine for the Python package: the full CMake build with CUDA for the
# machine's own Python (its torch and pybind11), the package's tests with CUDA tensors, and,
# on that machine's otherwise idle CPU cores, kvlab.quantize against the C++ benchmark
# (benchmarks/python_quantize.py, alternating runs); kvlab.hf with the model on the GPU (its
# CUDA test and benchmarks/hf_score_time.py). Needs the HDF5, Eigen, zlib, CLI11,
# nlohmann-json and Google Benchmark development files; PREFIX_PATH (environment) adds CMake
# prefixes for any of them that the machine lacks. Logs go to $OUT (or ./gpu_python_out).
# Usage: bash scripts/gpu_python_check.sh [--no-bench]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_python_out}
mkdir -p "$OUT"
BENCH=1
[ "${1:-}" = --no-bench ] && BENCH=0
export PATH=/usr/local/cuda/bin:$PATH
PY=${KVLAB_PY:-$(command -v python3)}
B=build-gpu-python
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  "$PY" -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__)"
  lscpu | grep -E "Model name|^CPU\(s\)"; } 2>&1 | tee "$OUT/machine.log"

if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DKVLAB_PYTHON="$PY" -DKVLAB_BUILD_TESTS=OFF \
  -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
  -DCMAKE_PREFIX_PATH="${PREFIX_PATH:-}" >"$OUT/build.log" 2>&1; then
  echo "configure FAILED"; tail -40 "$OUT/build.log"; exit 3
fi
grep -E "kvlab:" "$OUT/build.log"
cmake --build $B -j"$(nproc)" --target _kvlab kvlab kvlab_bench_quantize >>"$OUT/build.log" 2>&1 ||
  { echo "build FAILED"; grep -E "error" "$OUT/build.log" | head -30; exit 3; }
echo "build ok"

status=0
export PYTHONPATH=$PWD/$B/bindings/python KVLAB_CLI=$PWD/$B/experiments/kvlab
"$PY" -c "import kvlab; print('kvlab.has_gpu() =', kvlab.has_gpu())" | tee -a "$OUT/pytest.log"
# -rs: every skip with its reason, so a silently skipped GPU test shows in the log.
"$PY" -m pytest -q -rs -p no:cacheprovider tests/python/test_py_gpu.py tests/python/test_py_torch.py \
  tests/python/test_py_quantize.py tests/python/test_py_methods.py tests/python/test_py_gpu_attention.py 2>&1 | tee -a "$OUT/pytest.log" | tail -15
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# kvlab.hf with the model on the GPU: the CUDA-vs-CPU test, then the 7 presets' timing split
"$PY" -m pytest -q -rs -p no:cacheprovider tests/python/test_hf_sim.py -k cuda 2>&1 | tee -a "$OUT/pytest.log" | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || status=1

if [ $BENCH = 1 ]; then
  "$PY" benchmarks/hf_score_time.py --reps 3 2>&1 | grep -v "Loading weights" | tee "$OUT/hf.log" || status=1
  "$PY" benchmarks/python_quantize.py --bench $B/benchmarks/kvlab_bench_quantize \
    --presets kivi-2/K,kivi-2/V,kitty/K --threads 1,2 --reps 15 2>&1 | tee -a "$OUT/bench.log" || status=1
fi
exit $status
