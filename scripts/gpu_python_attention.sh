#!/usr/bin/env bash
# kvlab.gpu.decode_attention on the GPU machine in one short call, with the package built
# elsewhere (a CUDA build of the package there takes longer than a short lease): DIR/python holds
# the package with _kvlab built with CUDA for the host's Python (or _kvlab*.so.xz, unpacked here:
# the CUDA build is ~31 MB, over what a call carries), DIR/lib any library the host lacks. Runs
# the CUDA-tensor tests (test_py_gpu_attention.py, test_py_gpu.py); then, given BUILD_SECONDS > 0,
# times the package's own CUDA build there (-j$(nproc), target _kvlab) for at
# most that long and logs how far it got. Logs go to $OUT (or ./gpu_python_attention_out).
# Usage: bash scripts/gpu_python_attention.sh DIR [BUILD_SECONDS]
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
D=$(cd "$1" && pwd) || exit 1
SECS=${2:-0}
OUT=${OUT:-$PWD/gpu_python_attention_out}
mkdir -p "$OUT"
PY=${KVLAB_PY:-$(command -v python3)}
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
# built against the VM's HDF5 1.10.8 headers; the host's library may be another 1.10
export HDF5_DISABLE_VERSION_CHECK=2
for x in "$D"/python/kvlab/_kvlab*.so.xz; do
  [ -e "$x" ] && "$PY" -c "import lzma, sys; open(sys.argv[1][:-3], 'wb').write(lzma.open(sys.argv[1]).read())" "$x"
done
# cuBLAS 13 (eval_gpu): the toolkit's, else the one torch's wheels bring
LIBS=$D/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib
if LD_LIBRARY_PATH=$LIBS ldd "$D"/python/kvlab/_kvlab*.so | grep -q "cublas.*not found"; then
  LIBS=$LIBS:$(dirname "$(find "$("$PY" -c 'import site; print(site.getsitepackages()[0])')" -name 'libcublas.so.13*' | head -1)")
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  "$PY" -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__)"
  LD_LIBRARY_PATH=$LIBS ldd "$D"/python/kvlab/_kvlab*.so | grep "not found"; } 2>&1 | tee "$OUT/machine.log"

status=0
(export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONPATH=$D/python
 "$PY" -c "import kvlab; print(kvlab.__file__, 'has_gpu', kvlab.has_gpu())"
 # -rs: every skip with its reason, so a silently skipped GPU test shows in the log
 "$PY" -m pytest -q -rs -p no:cacheprovider --durations=5 tests/python/test_py_gpu_attention.py \
   tests/python/test_py_gpu.py) 2>&1 | tee "$OUT/pytest.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

if [ "$SECS" -gt 0 ]; then
  B=build-gpu-python
  t0=$(date +%s)
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DKVLAB_PYTHON="$PY" -DKVLAB_BUILD_TESTS=OFF \
    -DKVLAB_BUILD_BENCHMARKS=OFF -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >"$OUT/build.log" 2>&1 || echo "configure FAILED"
  t1=$(date +%s)
  timeout "$SECS" cmake --build $B -j"$(nproc)" --target _kvlab >>"$OUT/build.log" 2>&1
  rc=$?
  t2=$(date +%s)
  { grep -E "^-- kvlab" "$OUT/build.log"
    echo "configure $((t1 - t0)) s; build -j$(nproc) --target _kvlab: exit $rc after $((t2 - t1)) s" \
      "(124: stopped at the limit of $SECS s); last step: $(grep -oE '^\[ *[0-9]+%\]' "$OUT/build.log" | tail -1)"
  } | tee -a "$OUT/machine.log"
fi
exit $status
