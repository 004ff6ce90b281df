#!/usr/bin/env bash
# The CPU test suite under ASan + UBSan (gcc) in build-asan/: any sanitizer report fails the
# test that triggered it. Extra arguments go to ctest (e.g. -R io).
set -euo pipefail
cd "$(dirname "$0")/.."
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVLAB_PYTHON=/usr/bin/python3 -DKVLAB_WITH_CUDA=OFF \
  -DKVLAB_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
  -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_MODULE_LINKER_FLAGS="$san" "${launcher[@]}" >build-asan.configure.log 2>&1 ||
  { cat build-asan.configure.log; exit 1; }
cmake --build build-asan -j"$(nproc)"
# libtorch (the .pt plugin) is not instrumented: its new/delete pairs look mismatched to ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:-alloc_dealloc_mismatch=0:detect_leaks=1} UBSAN_OPTIONS=print_stacktrace=1
cd build-asan
ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
