#!/usr/bin/env bash
# Install what is missing, build, and run every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600
