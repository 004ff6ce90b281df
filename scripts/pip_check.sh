#!/usr/bin/env bash
# The Python package as README installs it: `pip install .` into a venv (.venv-pip/, from Debian's
# python3 with its numpy, h5py and pytest), then `import kvlab` from outside the checkout and the
# package tests against the installed copy (KVLAB_CLI: the CLI they compare with).
# The CMake build stays in build-pip/ and ccache shares objects with build/: a rerun is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KVLAB_PIP_VENV:-.venv-pip}
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  # The compiler by build/'s name: scikit-build-core would take Python's x86_64-linux-gnu-g++, the
  # same gcc, but ccache keys on the name and then reuses none of build/'s objects.
  export CC=${CC:-cc} CXX=${CXX:-c++}
fi
PY="$(cd "$VENV" && pwd)/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check . mypy  # mypy: the type stubs' test
(cd / && "$PY" -c "import kvlab; print(kvlab.__file__); print(kvlab.methods())")
KVLAB_CLI=${KVLAB_CLI:-build/experiments/kvlab} "$PY" -m pytest -q -p no:cacheprovider \
  tests/python/test_py_quantize.py tests/python/test_py_methods.py tests/python/test_py_dumps.py \
  tests/python/test_py_stubs.py
