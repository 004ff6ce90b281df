#!/usr/bin/env bash
# Make .venv-hf/: a venv from Debian's /usr/bin/python3 with torch, transformers, h5py and pytest,
# enough to run tests/python/test_hf_capture.py on the CPU (and pandas + matplotlib for the
# kvlab package's walk-through, docs/PYTHON.md). Idempotent: an env made from the same
# package list is left alone (a stamp file records it).
#   scripts/hf_env.sh && .venv-hf/bin/python -m pytest tests/python/test_hf_capture.py
# Cost (2-core build VM, PyPI, empty pip cache): 2.6 GB download, 4.6 GB on disk, 1.5-2.5 min.
# A second run returns at once.
# PyPI has only the CUDA build of torch for Linux, and it links its CUDA libraries at load time, so
# they are installed too (about 3 GB) even though the tests run on the CPU; triton (1 GB, only for
# torch.compile) is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KVLAB_HF_VENV:-.venv-hf}
TORCH=torch==2.15.0
OTHERS=(transformers==5.23.0 h5py==3.16.0 pytest==9.2.0)
OTHERS+=(pandas==3.1.1 matplotlib==3.11.2)  # docs/PYTHON.md's walk-through (tests/python/test_py_walkthrough.py)
STAMP="$VENV/.kvlab-hf-env"
WANT="$TORCH ${OTHERS[*]} (no triton)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "$VENV: ready ($WANT)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "$TORCH"
# torch's own requirements (CUDA libraries included), minus triton and the optional extras
mapfile -t DEPS < <("$PY" -c 'import importlib.metadata as m
print("\n".join(r for r in m.requires("torch") if "extra ==" not in r and not r.startswith("triton")))')
"$PY" -m pip install --quiet --disable-pip-version-check --no-warn-conflicts "${DEPS[@]}" "${OTHERS[@]}"
"$PY" -c 'import torch, transformers, h5py, pytest
x = torch.randn(1, 2, 4, 8)
torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)  # the CPU kernels load
print(f"torch {torch.__version__}, transformers {transformers.__version__}, h5py {h5py.__version__}")'
echo "$WANT" >"$STAMP"
echo "$VENV: ready ($(du -sh "$VENV" | cut -f1))"
