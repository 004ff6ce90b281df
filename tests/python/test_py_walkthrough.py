"""Runs docs/PYTHON.md: every ```python block, in order, in one namespace, in a temporary
folder, then checks what the walk-through made. Needs torch, transformers, pandas and
matplotlib (scripts/hf_env.sh's venv has them); skipped with a message where one is missing."""
import importlib
import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "PYTHON.md"


def test_walkthrough_runs(tmp_path, monkeypatch):
    for name in ("torch", "transformers", "pandas", "matplotlib"):
        try:
            importlib.import_module(name)
        except ImportError:
            pytest.skip(f"{name} is not installed: the walk-through needs torch, transformers, pandas and "
                        "matplotlib (scripts/hf_env.sh)")
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    scope = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} block {i + 1}", "exec"), scope)
    assert sorted(os.listdir(tmp_path)) == ["copy.h5", "error_vs_bits.png", "tiny.h5"]
    assert (tmp_path / "error_vs_bits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = scope["table"]
    assert len(table) == len(scope["presets"])
    err = dict(zip(table.name, table.attn_output_rel_err))
    assert err["fp16"] == min(err.values()) and err["kivi-2"] > err["kivi-4"] > 0
