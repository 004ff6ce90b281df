"""The type stubs (kvlab/__init__.pyi, vq.pyi) as mypy reads them: correct calls pass, wrong
ones are reported. Skipped without mypy (scripts/pip_check.sh installs it in its venv)."""
import sys
from pathlib import Path

import pytest

GOOD = '''
import numpy as np
import kvlab
x = np.zeros((2, 256, 64), np.float16)
q: kvlab.Quantized = kvlab.quantize(x, "bits=2", boost_channels=None)
codes: np.ndarray = q.codes
m = kvlab.Method("kitty-pro")
b: float = m.bits(4096, 128)["both"]
k_hat, v_hat = m.apply(x, x, layer=0)
r = kvlab.evaluate("d.h5", methods=["kivi-2", m], queries="last:8", progress=True)
d: kvlab.Dump = kvlab.open_dump("d.h5")
cb = kvlab.vq.train(x[0].astype(np.float32), "CQ-4c8b", iters=3)
codes8 = cb.encode(x[0])
cache = kvlab.gpu.DecodeCache("kivi-2", [x], [x], device=0)
out, run = kvlab.gpu.decode_attention(x, cache, "split", 4, return_run=True)
bound: np.ndarray = run.error_bound(x, [x], [x])
'''
BAD = '''
import kvlab
kvlab.quantize([1.0])
kvlab.Method("kivi-2").bits("long", 128)
kvlab.evaluate(methods=["kivi-2"], queriez="all")
kvlab.open_dump(3)
kvlab.gpu.decode_attention(None, "kivi-2")
'''


@pytest.fixture
def mypy(tmp_path, monkeypatch):
    api = pytest.importorskip("mypy.api")
    import kvlab
    root = Path(kvlab.__file__).parents[1]
    if root.name != "site-packages":  # a build tree on PYTHONPATH: mypy finds installed packages alone
        monkeypatch.setenv("MYPYPATH", str(root))

    def run(code):
        (tmp_path / "use.py").write_text(code)
        out, err, status = api.run(["--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                                    "--python-executable", sys.executable, str(tmp_path / "use.py")])
        return status, out + err
    return run


def test_stubs_accept_correct_calls(mypy):
    status, out = mypy(GOOD)
    assert status == 0, out


def test_stubs_report_wrong_calls(mypy):
    status, out = mypy(BAD)
    assert status == 1
    for line in (3, 4, 5, 6, 7):
        assert f"use.py:{line}: error" in out, out
