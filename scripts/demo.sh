#!/usr/bin/env bash
# Install what is missing, build, and run the main job: kvlab's reference model (data/kvlab-ref-18m,
# a Llama with head_dim 128 and GQA, trained by scripts/train_reference_model.py) run by the C++
# runner on 2048 held-out tokens, its q/k/v dumped, and every KV-method preset replayed on that
# dump: model -> dump -> error against bits.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh >/dev/null
KVLAB=build/experiments/kvlab
MODEL=data/kvlab-ref-18m
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The first 2048 tokens of the held-out text (a book the model never saw; see $MODEL/README.md).
$KVLAB tokenize --model $MODEL --prompt-file $MODEL/heldout.txt --out "$WORK/ids.txt"
tr -s ', \n' '\n' <"$WORK/ids.txt" | awk 'NF && n++ < 2048' >"$WORK/ids2048.txt"
echo
$KVLAB dump --model $MODEL --tokens "$WORK/ids2048.txt" --steps 0 --out "$WORK/ref.h5"
echo
$KVLAB eval "$WORK/ref.h5" --quiet
