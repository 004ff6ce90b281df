#!/bin/sh
# MPI with GPUs: `mpirun -np 2 ... --device cuda --share-gpu` (both ranks on GPU 0 when the
# machine has one: sharing is allowed for this test) writes the bytes of one process with
# --device cuda (eval JSON minus its threads, ranks and timing lines; sensitivity CSV); without
# --share-gpu, more ranks than GPUs is an error naming the rank and host, and no file is left.
# Usage: mpi_device.sh KVLAB MPIRUN DIR. Exits 77 without a GPU or without MPI.
set -u
kvlab=$1 mpirun=$2 dir=$3
mkdir -p "$dir"
command -v "$mpirun" >/dev/null 2>&1 || { echo "skipped: no mpirun"; exit 77; }
dump=synthetic:llama3-8b:tokens=1024,layers=2
e="eval $dump --queries stride:5 --format json --quiet"
s="sensitivity $dump --queries last:64 --quiet"
if ! "$kvlab" $e --device cuda --out "$dir/e1.json" 2>"$dir/e1.err"; then
  grep -qE "no CUDA device is usable|built without CUDA" "$dir/e1.err" && { echo "skipped: $(cat "$dir/e1.err")"; exit 77; }
  cat "$dir/e1.err"; exit 1
fi
"$kvlab" $s --device cuda --out "$dir/s1.csv" >/dev/null || exit 1
m="$mpirun --allow-run-as-root --oversubscribe -np 2 $kvlab"
$m $e --device cuda --share-gpu --out "$dir/e2.json" || exit 1
grep -q '"ranks": 2,' "$dir/e2.json" || { echo "eval did not run on 2 ranks"; exit 1; }
$m $s --device cuda --share-gpu --out "$dir/s2.csv" >/dev/null || exit 1
strip() { grep -vE '^  "(threads|ranks|timing_s)": ' "$1"; }
strip "$dir/e1.json" >"$dir/e1.cmp"; strip "$dir/e2.json" >"$dir/e2.cmp"
cmp "$dir/e1.cmp" "$dir/e2.cmp" || { echo "eval JSON differs between 1 process and 2 ranks"; exit 1; }
cmp "$dir/s1.csv" "$dir/s2.csv" || { echo "sensitivity CSV differs between 1 process and 2 ranks"; exit 1; }
for f in s2_ranking.csv s2_heatmap.svg; do
  cmp "$dir/s1_${f#s2_}" "$dir/$f" || { echo "$f differs"; exit 1; }
done
gpus=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
np=$((gpus + 1))
rm -f "$dir/e3.json"
if $mpirun --allow-run-as-root --oversubscribe -np $np $kvlab $e --device cuda --out "$dir/e3.json" >"$dir/e3.log" 2>&1; then
  echo "$np ranks on $gpus GPUs without --share-gpu did not fail"; exit 1
fi
grep -qE "local rank [0-9]+ \(OMPI_COMM_WORLD_LOCAL_RANK\) on host .* has no GPU of its own" "$dir/e3.log" ||
  { cat "$dir/e3.log"; echo "no message naming the rank and host"; exit 1; }
[ ! -e "$dir/e3.json" ] || { echo "a failed job left $dir/e3.json"; exit 1; }
echo "mpirun -np 2 --device cuda --share-gpu: same bytes as one process; $np ranks on $gpus GPUs refused"
