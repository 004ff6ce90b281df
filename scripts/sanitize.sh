#!/usr/bin/env bash
# The CPU test suite under ASan + UBSan (gcc) in build-asan/: any sanitizer report fails the
# test that triggered it. Extra arguments go to ctest (e.g. -R io).
#   scripts/sanitize.sh            the whole suite but the Python package's tests (see below)
#   scripts/sanitize.sh --inputs   only what parses outside input and does the arithmetic: the
#                                  core, io, models and vq unit tests, and the command line on
#                                  hostile input (ctest label "inputs"); what test.sh runs in CI
# Build and test times: docs/RELIABILITY.md, "Sanitizer build of the test suite".
set -euo pipefail
cd "$(dirname "$0")/.."
scope=all
if [ "${1:-}" = --inputs ]; then
  scope=inputs
  shift
fi
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# No Python extension: the interpreter is not built with ASan, so it could not load it.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVLAB_PYTHON=/usr/bin/python3 -DKVLAB_WITH_CUDA=OFF \
  -DKVLAB_BUILD_BENCHMARKS=OFF -DKVLAB_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
  -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_MODULE_LINKER_FLAGS="$san" "${launcher[@]}" >build-asan.configure.log 2>&1 ||
  { cat build-asan.configure.log; exit 1; }
# libtorch (the .pt plugin) is not instrumented: its new/delete pairs look mismatched to ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:-alloc_dealloc_mismatch=0:detect_leaks=1} UBSAN_OPTIONS=print_stacktrace=1
if [ $scope = inputs ]; then
  targets=(kvlab $(for t in npy zip npz dump codebook llama2c tokenizer spec; do echo fuzz_$t; done)
           $(ls tests/{core,io,models,vq}/*_test.cpp | xargs -n1 basename | sed 's/\.cpp$//'))
  cmake --build build-asan -j"$(nproc)" --target "${targets[@]}"
  cd build-asan
  ctest --output-on-failure -j"$(nproc)" --timeout 1200 -L '^(core|io|models|vq|inputs)$' "$@"
else
  cmake --build build-asan -j"$(nproc)"
  cd build-asan
  ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
fi
