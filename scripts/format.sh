#!/usr/bin/env bash
# Apply .clang-format to every C++/CUDA source of the project (or check it with --check).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(-i)
[ "${1:-}" = --check ] && mode=(--dry-run --Werror)
git ls-files '*.h' '*.hpp' '*.cpp' '*.cu' '*.cuh' | grep -v '^third_party/' | xargs clang-format "${mode[@]}"
