"""Fixtures of the kvlab package tests (test_py_*.py): the kvlab CLI they compare against and
the shipped dump. ctest passes KVLAB_CLI and puts the built package on PYTHONPATH."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """Runs `kvlab ARGS...`; returns the CompletedProcess (text), failing on a non-zero exit
    unless check=False."""
    exe = os.environ.get("KVLAB_CLI", str(REPO / "build" / "experiments" / "kvlab"))
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no kvlab CLI at {exe} (set KVLAB_CLI)")

    def run(*args, check=True):
        r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600)
        if check:
            assert r.returncode == 0, f"kvlab {' '.join(map(str, args))}: {r.stderr}"
        return r
    return run


@pytest.fixture(scope="session")
def stories():
    return str(REPO / "data" / "stories260K.h5")
