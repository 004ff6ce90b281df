#!/usr/bin/env bash
# Install what is missing, build, and run every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall and CPU time (user + sys, its children included) on stderr: CPU seconds carry
# over to another machine, wall time on a shared one does not (docs/RELIABILITY.md, "CI cost").
step() { local TIMEFORMAT="test.sh: $1: %R s wall, %U s user, %S s sys"; shift; time "$@"; }
step install_deps scripts/install_deps.sh
# ccache (install_deps.sh installs it): the pip build below compiles the libraries with build/'s
# flags and paths, so even an empty cache serves it build/'s objects. KVLAB_PCH: the unit tests'
# precompiled GoogleTest header (KVLAB_PCH=OFF where ccache should cache the tests instead).
step build scripts/build.sh -DKVLAB_PCH="${KVLAB_PCH:-ON}"
# The Hugging Face hook's tests need torch + transformers from PyPI (2.6 GB, ~2 min once);
# KVLAB_SKIP_HF=1 skips them, and so does a machine without PyPI (ctest then reports "skipped").
if [ "${KVLAB_SKIP_HF:-0}" != 1 ]; then
  step hf_env scripts/hf_env.sh || echo "test.sh: could not set up .venv-hf; the capture hook test will be skipped" >&2
fi
step ctest bash -c 'cd build && exec ctest --output-on-failure -j"$(nproc)" --timeout 600'
# `pip install .` of the Python package, once, and its tests on the installed copy (KVLAB_SKIP_PIP=1 skips).
if [ "${KVLAB_SKIP_PIP:-0}" != 1 ]; then
  step pip scripts/pip_check.sh
fi
# Every libFuzzer target (clang, ASan + UBSan; build-fuzz/) for KVLAB_FUZZ_SECONDS each (default
# 30), nproc at a time: any crash, sanitizer report, leak or timeout fails (docs/RELIABILITY.md).
# KVLAB_SKIP_FUZZ=1 skips it.
if [ "${KVLAB_SKIP_FUZZ:-0}" != 1 ]; then
  step fuzz scripts/fuzz.sh "${KVLAB_FUZZ_SECONDS:-30}" "$(nproc)"
fi
# The whole test suite under ASan + UBSan (gcc, build-asan/; scope and cold cost:
# docs/RELIABILITY.md): any sanitizer report fails. KVLAB_SKIP_SANITIZE=1 skips it;
# KVLAB_SANITIZE=inputs runs only the input parsing and arithmetic (~785 CPU-s less).
if [ "${KVLAB_SKIP_SANITIZE:-0}" != 1 ]; then
  if [ "${KVLAB_SANITIZE:-all}" = inputs ]; then
    step sanitize scripts/sanitize.sh --inputs
  else
    step sanitize scripts/sanitize.sh
  fi
fi
