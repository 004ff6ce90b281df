#!/usr/bin/env bash
# kvlab's k-means against the current faiss-cpu from PyPI, on the same data, starting centroids,
# iterations and thread count (docs/PERFORMANCE.md). Installs faiss-cpu and numpy into a venv
# (KVLAB_FAISS_VENV, default build/venv-faiss) with Debian's python3; where that fails (no
# network, no python3-venv) it says so and times kvlab alone.
# Usage: benchmarks/kmeans_faiss_pypi.sh [--repeats N] [--cases a,b] [--threads T] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=3; CASES=""; THREADS=$(nproc); BUILD=build
while [ $# -gt 0 ]; do case $1 in
  --repeats) REPEATS=$2; shift;; --cases) CASES=$2; shift;; --threads) THREADS=$2; shift;;
  --build) BUILD=$2; shift;; *) echo "unknown argument $1" >&2; exit 2;; esac; shift; done
BENCH=$BUILD/benchmarks/kvlab_bench_kmeans_faiss
[ -x "$BENCH" ] || { echo "$BENCH not built (cmake --build $BUILD --target kvlab_bench_kmeans_faiss)" >&2; exit 2; }
VENV=${KVLAB_FAISS_VENV:-$BUILD/venv-faiss}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import faiss, numpy" 2>/dev/null; then
  { /usr/bin/python3 -m venv "$VENV" && "$VENV/bin/pip" install -q faiss-cpu numpy; } >"$BUILD/venv-faiss.log" 2>&1 || true
fi
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_WAIT_POLICY=passive
CARGS=(); [ -n "$CASES" ] && CARGS=(--cases "$CASES")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
if ! "$VENV/bin/python" -c "import faiss, numpy" 2>/dev/null; then
  echo "faiss-cpu could not be installed from PyPI (see $BUILD/venv-faiss.log): skipping faiss, kvlab only"
  exec "$BENCH" --repeats "$REPEATS" --no-faiss "${CARGS[@]}"
fi
echo "faiss-cpu $("$VENV/bin/python" -c 'import faiss; print(faiss.__version__)') (PyPI, $VENV), numpy $("$VENV/bin/python" -c 'import numpy; print(numpy.__version__)')"
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
"$BENCH" --write "$DIR" "${CARGS[@]}" >/dev/null
"$VENV/bin/python" benchmarks/kmeans_faiss_pypi.py "$DIR" --threads "$THREADS" --repeats "$REPEATS"
"$BENCH" --repeats "$REPEATS" --faiss-dir "$DIR" "${CARGS[@]}"
