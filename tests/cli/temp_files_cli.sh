#!/bin/bash
# ctest cli_temp_files: SIGINT and SIGTERM remove the temporary file of a write in progress and
# end kvlab by that signal; a leftover of a run killed by SIGKILL is removed by the next write
# of the same file, with a message naming it; a leftover whose process still runs stops the
# write, named. Run as bash temp_files_cli.sh KVLAB DIR
set -u
set -m  # job control: a background job of a script otherwise ignores SIGINT
K=$1
d=$2/temp_files_cli
rm -rf "$d" && mkdir -p "$d"
out=$d/big.h5
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# A dump large enough (32 layers, ~690 MB) to be caught while it is written.
start_synth() {
  "$K" synth --preset llama3-8b --tokens 4096 --no-compress --quiet --out "$out" 2>"$d/err" &
  pid=$!
  for _ in $(seq 600); do
    [ -e "$out.tmp.$pid" ] && return
    sleep 0.1
  done
  fail "no temporary file $out.tmp.$pid after 60 s"
}

for sig in INT TERM; do
  start_synth
  sleep 0.5
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq $((128 + $(kill -l "$sig"))) ] || fail "synth ended with status $rc after SIG$sig, not by the signal"
  [ -e "$out.tmp.$pid" ] && fail "SIG$sig left $out.tmp.$pid"
  [ -e "$out" ] && fail "SIG$sig left a partial $out"
done

# SIGKILL cannot be caught: the temporary file stays, and the next write of $out removes it.
start_synth
kill -KILL "$pid"
wait "$pid" 2>/dev/null
[ -e "$out.tmp.$pid" ] || fail "SIGKILL left no temporary file (the premise of this test)"
"$K" synth --preset tiny --tokens 64 --quiet --out "$out" 2>"$d/err" || fail "synth after SIGKILL: $(cat "$d/err")"
grep -qF "removed '$out.tmp.$pid', left by an interrupted run (process $pid is gone)" "$d/err" ||
  fail "no message naming the leftover: $(cat "$d/err")"
[ -e "$out.tmp.$pid" ] && fail "the leftover $out.tmp.$pid is still there"
[ -e "$out" ] || fail "no $out after the leftover was removed"

# A leftover named after a running process (this shell) may be another writer's: refused, named.
touch "$out.tmp.$$"
"$K" synth --preset tiny --tokens 64 --quiet --out "$out" 2>"$d/err" &&
  fail "synth wrote $out although $out.tmp.$$ belongs to a running process"
grep -qF "'$out.tmp.$$' exists: process $$ may be writing '$out' now" "$d/err" ||
  fail "the error does not name the leftover: $(cat "$d/err")"
rm -rf "$d"
