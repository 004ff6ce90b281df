#!/bin/sh
# kvlab sensitivity --device cuda against --device cpu: the CSV row by row (attn_score_mse within
# 1e-6 relative, every other column identical). Exits 77 without a GPU.
# Usage: sensitivity_device_csv.sh KVLAB PYTHON DIR [sensitivity arguments]
set -u
kvlab=$1 py=$2 dir=$3; shift 3
mkdir -p "$dir"
if ! "$kvlab" sensitivity --quiet --device cuda --out "$dir/sens_cuda.csv" "$@" >/dev/null 2>"$dir/sens_cuda.err"; then
  if grep -qE "no CUDA device is usable|built without CUDA" "$dir/sens_cuda.err"; then
    echo "skipped: $(cat "$dir/sens_cuda.err")"; exit 77
  fi
  cat "$dir/sens_cuda.err"; exit 1
fi
"$kvlab" sensitivity --quiet --out "$dir/sens_cpu.csv" "$@" >/dev/null || exit 1
exec "$py" - "$dir/sens_cpu.csv" "$dir/sens_cuda.csv" <<'PY'
import csv, sys
a = list(csv.DictReader(open(sys.argv[1])))
b = list(csv.DictReader(open(sys.argv[2])))
assert len(a) == len(b) and len(a) > 0, f"{len(a)} CPU rows, {len(b)} GPU rows"
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    for k in x:
        if k != "attn_score_mse":
            assert x[k] == y[k], f"row {i + 2}, {k}: cpu {x[k]}, gpu {y[k]}"
    u, v = float(x["attn_score_mse"]), float(y["attn_score_mse"])
    m = max(abs(u), abs(v))
    r = abs(u - v) / m if m else 0.0
    worst = max(worst, r)
    assert r <= 1e-6, f"row {i + 2} (layer {x['layer']}, q_head {x['q_head']}, channel {x['channel']}): cpu {u}, gpu {v}"
print(f"{len(a)} rows, attn_score_mse max relative difference {worst:.3g}")
PY
