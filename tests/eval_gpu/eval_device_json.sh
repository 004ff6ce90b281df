#!/bin/sh
# kvlab eval --device cuda against --device cpu, JSON number by number (compare_eval_json.py).
# Usage: eval_device_json.sh KVLAB PYTHON DIR [eval arguments]; exits 77 (skipped) without a GPU.
set -u
kvlab=$1 py=$2 dir=$3; shift 3
here=$(dirname "$0")
mkdir -p "$dir"
if ! "$kvlab" eval --quiet --device cuda --format json --out "$dir/eval_cuda.json" "$@" 2>"$dir/eval_cuda.err"; then
  if grep -qE "no CUDA device is usable|built without CUDA" "$dir/eval_cuda.err"; then
    echo "skipped: $(cat "$dir/eval_cuda.err")"; exit 77
  fi
  cat "$dir/eval_cuda.err"; exit 1
fi
"$kvlab" eval --quiet --format json --out "$dir/eval_cpu.json" "$@" || exit 1
exec "$py" "$here/compare_eval_json.py" "$dir/eval_cpu.json" "$dir/eval_cuda.json"
