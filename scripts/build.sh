#!/usr/bin/env bash
# Configure and build kvlab in build/ (Release). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
# nvcc is optional; look where the CUDA toolkit installs it if it is not on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# ccache, where installed, makes rebuilds (and other checkouts of the tree) cheap.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# The tests call numpy through Debian's interpreter, not whatever python3 comes first on PATH.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVLAB_PYTHON=/usr/bin/python3 "${launcher[@]}" "$@" >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
grep -E "^-- kvlab" build.configure.log || true
cmake --build build -j"$(nproc)"
