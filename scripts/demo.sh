#!/usr/bin/env bash
# Install what is missing, build, and run the main job: every KV-method preset replayed on the
# shipped dump (stories260K, a real llama2.c model; data/README.md), error against bits.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh >/dev/null
echo
build/experiments/kvlab info data/stories260K.h5 | head -9 || true  # the dump: model, shapes, text
echo
build/experiments/kvlab eval --quiet
