#!/usr/bin/env bash
# Pack fuzz.sh's build (build-fuzz/: the fuzz_* binaries, their corpora and seeds) with the shared
# libraries they load into one .tar.xz, for a long run on a many-core machine that lacks Debian's
# packages (the GPU machine's host): unpack it there and run `bundle/run.sh SECONDS`.
#   scripts/fuzz_bundle.sh OUT.tar.xz      (run scripts/fuzz.sh first; docs/RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/fuzz_bundle.sh OUT.tar.xz}
src=build-fuzz
[ -x $src/fuzz/fuzz_npy ] || { echo "fuzz_bundle.sh: no $src/fuzz/fuzz_npy; run scripts/fuzz.sh first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
b=$tmp/bundle
mkdir -p $b/bin $b/lib $b/dict
cp $src/fuzz/fuzz_{npy,zip,npz,dump,codebook,llama2c,tokenizer,spec,hf_checkpoint} $b/bin/
cp fuzz/dict_*.txt $b/dict/
cp -r $src/corpus $src/seeds $b/
cp scripts/fuzz_bundle_run.sh $b/run.sh
# Every library outside glibc itself: the target machine may have other versions or none.
for f in $b/bin/*; do ldd "$f" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -vE '/(libc|libm|libresolv|libpthread|libdl|librt)\.so' | xargs -I{} cp -L {} $b/lib/
tar -C $tmp -cf - bundle | xz -6 -T"$(nproc)" > "$out.tmp.$$"
mv "$out.tmp.$$" "$out"
echo "fuzz_bundle.sh: $out ($(du -h "$out" | cut -f1))"
