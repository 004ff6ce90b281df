#!/usr/bin/env bash
# Install what is missing, build, and run every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
# The Hugging Face hook's tests need torch + transformers from PyPI (2.6 GB, ~2 min once);
# KVLAB_SKIP_HF=1 skips them, and so does a machine without PyPI (ctest then reports "skipped").
if [ "${KVLAB_SKIP_HF:-0}" != 1 ]; then
  scripts/hf_env.sh || echo "test.sh: could not set up .venv-hf; the capture hook test will be skipped" >&2
fi
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
# `pip install .` of the Python package, once, and its tests on the installed copy (KVLAB_SKIP_PIP=1 skips).
if [ "${KVLAB_SKIP_PIP:-0}" != 1 ]; then
  scripts/pip_check.sh
fi
# Every libFuzzer target (clang, ASan + UBSan; build-fuzz/) for KVLAB_FUZZ_SECONDS each (default
# 30), nproc at a time: any crash, sanitizer report, leak or timeout fails (docs/RELIABILITY.md).
# KVLAB_SKIP_FUZZ=1 skips it.
if [ "${KVLAB_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh "${KVLAB_FUZZ_SECONDS:-30}" "$(nproc)"
fi
# The test suite's input parsing and arithmetic under ASan + UBSan (gcc, build-asan/; scope and
# cold cost: docs/RELIABILITY.md): any sanitizer report fails. KVLAB_SKIP_SANITIZE=1 skips it;
# KVLAB_SANITIZE=all runs the whole suite instead (too slow for CI on 2 cores).
if [ "${KVLAB_SKIP_SANITIZE:-0}" != 1 ]; then
  if [ "${KVLAB_SANITIZE:-inputs}" = all ]; then
    scripts/sanitize.sh
  else
    scripts/sanitize.sh --inputs
  fi
fi
