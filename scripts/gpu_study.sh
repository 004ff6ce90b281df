#!/usr/bin/env bash
# One call on the GPU machine for the GPU studies (issue 18): the full build with CUDA, the
# --device cuda tests, and the timings of docs/PERFORMANCE.md ("eval --device cuda",
# "sensitivity --device cuda").
# Usage: bash scripts/gpu_study.sh [--test] [--bench TOKENS] [--cpu-layer] [--sens TOKENS]
#                                  [--methods-ab TOKENS]
#   --test        eval_gpu_test, sensitivity_gpu_test, codec_gpu_test, the CLI comparisons (CPU
#                 vs GPU: eval JSON, sensitivity CSV) and MPI with the GPU (tests/eval_gpu/mpi_device.sh)
#   --bench T     kvlab synth --preset llama3-8b --tokens T (timed), then eval --device cuda on
#                 every query of the 32 layers, 7 presets (timed, end to end)
#   --cpu-layer   layer 0 of that dump on the CPU (all cores) and on the GPU, JSON compared; with
#                 --sens, layer 0's sensitivity on the CPU too, CSV compared
#   --sens T      sensitivity --device cuda, synthetic llama3-8b at T tokens generated in memory,
#                 all layers, last 1024 queries (timed)
#   --methods-ab T  eval --device cuda on layers 0-1 of that synthetic dump (in memory), every
#                 query, with the methods applied on the CPU and by the GPU kernels (timed, JSON compared)
# The build goes to $KVLAB_GPU_BUILD (default /tmp/kvlab-gpu-study); with $KVLAB_GPU_PREBUILT
# (a folder holding kvlab, eval_gpu_test, sensitivity_gpu_test and codec_gpu_test built from these
# sources) nothing is built. Logs to $OUT/study.log.
set -u -o pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_study_out}; mkdir -p "$FINAL"
LOG=$FINAL/study.log
B=${KVLAB_GPU_BUILD:-/tmp/kvlab-gpu-study}
DATA=${KVLAB_GPU_DATA:-/tmp/kvlab-gpu-study-data}; mkdir -p "$DATA"
export PATH=/usr/local/cuda/bin:$PATH OMP_WAIT_POLICY=passive
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=python3
TEST=0; BENCH=0; CPULAYER=0; SENS=0; AB=0
while [ $# -gt 0 ]; do case $1 in --test) TEST=1;; --bench) BENCH=$2; shift;; --cpu-layer) CPULAYER=1;;
  --sens) SENS=$2; shift;; --methods-ab) AB=$2; shift;; esac; shift; done
exec > >(tee -a "$LOG") 2>&1
status=0
t() { /usr/bin/time -f "  [%e s wall, %U s user, %S s sys, %M KiB max RSS] $*" "$@"; }

echo "== machine $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1; cmake --version | head -1; g++ --version | head -1; nproc; free -g | head -2; df -h /tmp | tail -1
dpkg -l libhdf5-dev libeigen3-dev zlib1g-dev libcli11-dev libgtest-dev nlohmann-json3-dev 2>&1 | grep -E "^(ii|un)|no packages" | awk '{print $1, $2, $3}'

if [ -n "${KVLAB_GPU_PREBUILT:-}" ]; then
  echo "== prebuilt binaries in $KVLAB_GPU_PREBUILT"
  K=$KVLAB_GPU_PREBUILT/kvlab; T=$KVLAB_GPU_PREBUILT
  $K --help > /dev/null || { echo "prebuilt kvlab does not run"; exit 3; }
else
  echo "== build (full, CUDA) in $B"
  if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DKVLAB_BUILD_BENCHMARKS=OFF -DKVLAB_BUILD_PYTHON=OFF \
       -DKVLAB_WITH_TORCH=OFF -DKVLAB_PYTHON=$PY -DCMAKE_CUDA_COMPILER=$(command -v nvcc) > "$FINAL/configure.log" 2>&1; then
    echo "configure FAILED"; tail -40 "$FINAL/configure.log"; exit 3
  fi
  grep -E "^-- kvlab" "$FINAL/configure.log"
  t cmake --build $B -j"$(nproc)" --target kvlab eval_gpu_test sensitivity_gpu_test codec_gpu_test > "$FINAL/build.log" 2>&1 ||
    { echo "build FAILED"; grep -E "error|Error" "$FINAL/build.log" | head -40; exit 3; }
  tail -1 "$FINAL/build.log"
  K=$B/experiments/kvlab; T=$B/tests/eval_gpu
fi
MPIRUN=$(command -v mpirun || echo mpirun)

if [ $TEST -eq 1 ]; then
  for g in eval_gpu_test sensitivity_gpu_test codec_gpu_test; do
    echo "== $g"
    t $T/$g > "$FINAL/$g.log" 2>&1; rc=$?; [ $rc -ne 0 ] && status=1
    grep -E "^\[  (PASSED|FAILED|SKIPPED)|max relative|FAILED  \]" "$FINAL/$g.log"
  done
  echo "== CLI JSON: shipped dump, then synthetic llama3-8b 2048 tokens x 2 layers (stride:4)"
  sh tests/eval_gpu/eval_device_json.sh $K $PY $DATA/shipped || status=1
  sh tests/eval_gpu/eval_device_json.sh $K $PY $DATA/synthetic synthetic:llama3-8b:tokens=2048,layers=2 --queries stride:4 || status=1
  echo "== CLI sensitivity CSV: shipped dump, then synthetic llama3-8b 1024 tokens x 2 layers"
  sh tests/eval_gpu/sensitivity_device_csv.sh $K $PY $DATA/sens_shipped || status=1
  sh tests/eval_gpu/sensitivity_device_csv.sh $K $PY $DATA/sens_synthetic synthetic:llama3-8b:tokens=1024,layers=2 --queries last:100 || status=1
  echo "== MPI with the GPU"
  t sh tests/eval_gpu/mpi_device.sh $K $MPIRUN $DATA/mpi || status=1
  echo "== error without a visible GPU"
  CUDA_VISIBLE_DEVICES= $K eval --quiet --device cuda; echo "exit $?"
fi

if [ "$SENS" -gt 0 ]; then
  S=synthetic:llama3-8b:tokens=$SENS
  echo "== sensitivity --device cuda, $S (in memory), all layers, last 1024 queries"
  t timeout 200 $K sensitivity $S --device cuda --queries last:1024 --out $DATA/sens_gpu.csv | tail -2 || status=1
  if [ $CPULAYER -eq 1 ] && [ $SECONDS -gt ${CPU_LAYER_AFTER_S:-150} ]; then
    echo "== sensitivity of one layer on the CPU: skipped, $SECONDS s into the call"
  elif [ $CPULAYER -eq 1 ]; then
    echo "== sensitivity layer 0: GPU, then CPU on $(nproc) threads, CSV compared"
    t $K sensitivity $S --device cuda --layers 0-0 --queries last:1024 --quiet --out $DATA/sens_l0_gpu.csv || status=1
    t timeout 90 $K sensitivity $S --layers 0-0 --queries last:1024 --quiet --out $DATA/sens_l0_cpu.csv || status=1
    $PY - $DATA/sens_l0_cpu.csv $DATA/sens_l0_gpu.csv <<'PY' || status=1
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b) > 0
r = [abs(float(x["attn_score_mse"]) - float(y["attn_score_mse"])) / max(abs(float(x["attn_score_mse"])), abs(float(y["attn_score_mse"])), 1e-300) for x, y in zip(a, b)]
print(f"layer 0: {len(a)} rows, attn_score_mse max relative difference {max(r):.3g}, median {sorted(r)[len(r)//2]:.3g}")
PY
  fi
fi

if [ "$AB" -gt 0 ]; then
  S=synthetic:llama3-8b:tokens=$AB
  for on in cpu cuda; do
    echo "== eval --device cuda --methods-on $on, $S (in memory), layers 0-1, every query"
    t $K eval $S --device cuda --methods-on $on --layers 0-1 --queries all --format json --out $DATA/ab_$on.json || status=1
  done
  grep -vE '^  "(timing_s|threads)"' $DATA/ab_cpu.json > $DATA/ab_cpu.cmp
  grep -vE '^  "(timing_s|threads)"' $DATA/ab_cuda.json > $DATA/ab_cuda.cmp
  if cmp $DATA/ab_cpu.cmp $DATA/ab_cuda.cmp; then echo "methods on cpu and cuda: identical JSON"; else echo "JSON differs"; status=1; fi
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
