#!/bin/bash
# A long libFuzzer run from scripts/fuzz_bundle.sh's bundle on a many-core machine: each corpus
# with one or two processes (two for the targets with slow inputs), the flags of fuzz.sh. Logs,
# artifacts and a summary under $OUT (default /tmp/fuzz-out). Usage: run.sh SECONDS
set -u
secs=${1:-300}
cd "$(dirname "$0")"
O=${OUT:-/tmp/fuzz-out}; mkdir -p $O/logs
export LD_LIBRARY_PATH=$PWD/lib HDF5_DISABLE_VERSION_CHECK=2 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
export ASAN_OPTIONS=alloc_dealloc_mismatch=0:detect_leaks=1
nproc; lscpu | grep "Model name"; date -u +%FT%TZ
declare -A bin=([npy]=npy [zip]=zip [npz]=npz [dump_hdf5]=dump [dump_npz]=dump [codebook]=codebook [llama2c]=llama2c [tokenizer]=tokenizer [spec]=spec [hf_checkpoint]=hf_checkpoint)
declare -A dict=([npy]=dict_npy.txt [zip]=dict_zip.txt [npz]=dict_zip.txt [dump_npz]=dict_zip.txt [spec]=dict_spec.txt)
# dump_torch is left out: the libtorch plugin is too large to carry.
declare -A workers=([npy]=1 [zip]=2 [npz]=2 [dump_hdf5]=2 [dump_npz]=2 [codebook]=2 [llama2c]=1 [tokenizer]=1 [spec]=1 [hf_checkpoint]=1)
# FUZZ_WORKERS="npy=2 spec=2 ..." changes the processes per target (0 leaves a target out).
for kv in ${FUZZ_WORKERS:-}; do workers[${kv%%=*}]=${kv#*=}; done
P=$PWD
for t in "${!bin[@]}"; do
  for w in $(seq 1 ${workers[$t]}); do
    d=(); [ -n "${dict[$t]:-}" ] && d=(-dict=$P/dict/${dict[$t]})
    mkdir -p $P/corpus/$t
    ( /usr/bin/time -f "$t.$w cpu %U user %S sys %e wall" $P/bin/fuzz_${bin[$t]} $P/corpus/$t $P/seeds/$t "${d[@]}" \
        -max_total_time=$secs -timeout=30 -malloc_limit_mb=256 -rss_limit_mb=2048 \
        -artifact_prefix=$O/crash_${t}_ -print_final_stats=1 > $O/logs/$t.$w.log 2>&1; echo "$t.$w exit $?" >> $O/exits.txt ) &
  done
done
wait
cat $O/exits.txt | sort
for f in $O/logs/*.log; do n=$(basename $f .log); echo "$n $(grep -o 'stat::number_of_executed_units: *[0-9]*' $f | grep -o '[0-9]*$') execs; $(grep 'cpu .* user' $f)"; done
# A process that exits non-zero is a finding (its input is $O/crash_<target>_*). ASan reports
# of the isolated libhdf5 child do not stop the fuzzer (the parent turns them into a clean error);
# counted here to see how often libhdf5 fails.
grep -v " exit 0$" $O/exits.txt && echo "FINDING: the processes above stopped (see their logs)" || echo "every process ran its time"
echo "ASan reports in the logs (isolated children, plus the one that stopped any process above): $(grep -h 'ERROR: AddressSanitizer' $O/logs/*.log | wc -l)"
ls $O | grep crash_ || true
date -u +%FT%TZ
