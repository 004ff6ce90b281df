#!/usr/bin/env bash
# One call on the GPU machine for the GPU studies (issue 18): the full build with CUDA, the
# eval --device cuda tests, and the timings of docs/PERFORMANCE.md ("eval --device cuda").
# Usage: bash scripts/gpu_study.sh [--test] [--bench TOKENS] [--cpu-layer] [--sens]
#   --test        eval_gpu_test and the CLI JSON comparisons (CPU vs GPU)
#   --bench T     kvlab synth --preset llama3-8b --tokens T (timed), then eval --device cuda on
#                 every query of the 32 layers, 7 presets (timed, end to end)
#   --cpu-layer   layer 0 of that dump on the CPU (all cores) and on the GPU, JSON compared
# The build goes to $KVLAB_GPU_BUILD (default /tmp/kvlab-gpu-study); logs to $OUT/study.log.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_study_out}; mkdir -p "$FINAL"
LOG=$FINAL/study.log
B=${KVLAB_GPU_BUILD:-/tmp/kvlab-gpu-study}
DATA=${KVLAB_GPU_DATA:-/tmp/kvlab-gpu-study-data}; mkdir -p "$DATA"
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=python3
TEST=0; BENCH=0; CPULAYER=0
while [ $# -gt 0 ]; do case $1 in --test) TEST=1;; --bench) BENCH=$2; shift;; --cpu-layer) CPULAYER=1;; esac; shift; done
exec > >(tee -a "$LOG") 2>&1
status=0
t() { /usr/bin/time -f "  [%e s wall, %U s user, %S s sys, %M KiB max RSS] $*" "$@"; }

echo "== machine $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1; cmake --version | head -1; g++ --version | head -1; nproc; free -g | head -2; df -h /tmp | tail -1
dpkg -l libhdf5-dev libeigen3-dev zlib1g-dev libcli11-dev libgtest-dev nlohmann-json3-dev 2>&1 | grep -E "^(ii|un)|no packages" | awk '{print $1, $2, $3}'

echo "== build (full, CUDA) in $B"
if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DKVLAB_BUILD_BENCHMARKS=OFF -DKVLAB_BUILD_PYTHON=OFF \
     -DKVLAB_WITH_TORCH=OFF -DKVLAB_PYTHON=$PY -DCMAKE_CUDA_COMPILER=$(command -v nvcc) > "$FINAL/configure.log" 2>&1; then
  echo "configure FAILED"; tail -40 "$FINAL/configure.log"; exit 3
fi
grep -E "^-- kvlab" "$FINAL/configure.log"
t cmake --build $B -j"$(nproc)" --target kvlab eval_gpu_test > "$FINAL/build.log" 2>&1 ||
  { echo "build FAILED"; grep -E "error|Error" "$FINAL/build.log" | head -40; exit 3; }
tail -1 "$FINAL/build.log"
K=$B/experiments/kvlab

if [ $TEST -eq 1 ]; then
  echo "== eval_gpu_test"
  t $B/tests/eval_gpu/eval_gpu_test; rc=$?; [ $rc -ne 0 ] && status=1
  echo "== CLI JSON: shipped dump, then synthetic llama3-8b 2048 tokens x 2 layers (stride:4)"
  sh tests/eval_gpu/eval_device_json.sh $K $PY $DATA/shipped || status=1
  sh tests/eval_gpu/eval_device_json.sh $K $PY $DATA/synthetic synthetic:llama3-8b:tokens=2048,layers=2 --queries stride:4 || status=1
  echo "== error without a visible GPU"
  CUDA_VISIBLE_DEVICES= $K eval --quiet --device cuda; echo "exit $?"
fi

if [ "$BENCH" -gt 0 ]; then
  D=$DATA/llama3-8b-$BENCH.h5
  echo "== synth llama3-8b, $BENCH tokens ($(nproc) cores)"
  rm -f "$D"; t $K synth --preset llama3-8b --tokens $BENCH --quiet --out "$D" || status=1
  ls -l "$D"
  echo "== eval --device cuda, all queries, 32 layers, 7 presets (end to end, reading the dump)"
  t timeout 330 $K eval "$D" --device cuda --queries all --format json --out $DATA/gpu_all.json || status=1
  $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print('timing_s', d['timing_s']); [print(m['name'], {k: m[k] for k in ('score_mse','out_rel_err','kl','topk_overlap') if k in m}) for m in d['methods']]" $DATA/gpu_all.json
  cp $DATA/gpu_all.json "$FINAL/gpu_all_$BENCH.json"
  if [ $CPULAYER -eq 1 ] && [ $SECONDS -gt ${CPU_LAYER_AFTER_S:-430} ]; then
    echo "== one layer on the CPU: skipped, $SECONDS s into the call"
  elif [ $CPULAYER -eq 1 ]; then
    echo "== one layer (0): GPU, then CPU on $(nproc) threads"
    t $K eval "$D" --device cuda --layers 0-0 --queries all --format json --out $DATA/gpu_l0.json || status=1
    t timeout 150 $K eval "$D" --layers 0-0 --queries all --format json --out $DATA/cpu_l0.json --quiet || status=1
    $PY -c "import json,sys; [print(p, json.load(open(p))['timing_s']) for p in sys.argv[1:]]" $DATA/gpu_l0.json $DATA/cpu_l0.json
    $PY tests/eval_gpu/compare_eval_json.py $DATA/cpu_l0.json $DATA/gpu_l0.json || status=1
    cp $DATA/cpu_l0.json "$FINAL/cpu_l0_$BENCH.json"
  fi
fi
echo "== done, status $status"
exit $status
