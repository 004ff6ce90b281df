#!/usr/bin/env bash
# Make data/stories260K.h5, the dump that ships with kvlab: the stories260K llama2.c checkpoint
# (data/stories260K/, shipped) telling a greedy story from "Once upon a time" until it ends
# itself with BOS (346 tokens). Builds the `kvlab` target in build/ if it is not there yet;
# set KVLAB=/path/to/kvlab to use another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=data/stories260K
for f in "$MODEL_DIR/stories260K.bin" "$MODEL_DIR/tok512.bin"; do
  [ -f "$f" ] || { echo "make_default_dump.sh: $f not found" >&2; exit 1; }
done
KVLAB=${KVLAB:-build/experiments/kvlab}
if [ ! -x "$KVLAB" ]; then
  if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVLAB_PYTHON=/usr/bin/python3 >build.configure.log 2>&1 ||
      { cat build.configure.log; exit 1; }
  fi
  cmake --build build -j"$(nproc)" --target kvlab
fi
mkdir -p data
"$KVLAB" dump --llama2c "$MODEL_DIR/stories260K.bin" --tokenizer "$MODEL_DIR/tok512.bin" \
  --prompt "Once upon a time" --steps 400 --temperature 0 --model-name stories260K --out data/stories260K.h5
