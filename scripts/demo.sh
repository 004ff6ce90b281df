#!/usr/bin/env bash
# Install what is missing, build, and run the main job on the built-in input.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh >/dev/null
echo
build/experiments/kvlab demo
