"""kvlab.open_dump and kvlab.DumpWriter: the shipped dump as h5py reads it, lazy head reads,
dumps written in Python read by the CLI and the reverse, file errors as OSErrors."""
import os

import numpy as np
import pytest

import kvlab

h5py = pytest.importorskip("h5py")


def test_open_dump_equals_h5py(stories):
    d = kvlab.open_dump(stories)
    info = d.info
    with h5py.File(stories, "r") as f:
        assert info["num_layers"] == f.attrs["num_layers"] and info["tokens"] == f.attrs["num_tokens"]
        assert info["model"] == f.attrs["model"] and info["head_dim"] == f.attrs["head_dim"]
        assert info["token_ids"] == list(f["token_ids"][()])
        for layer in range(info["num_layers"]):
            for role in "qkv":
                x = d.read(layer, role)
                assert x.dtype == np.float32
                np.testing.assert_array_equal(x, f[f"layers/{layer}/{role}"][()].astype(np.float32))
        np.testing.assert_array_equal(d.read(2, "k", head=1), d.read(2, "k")[1:2])
    assert d.path == stories
    with pytest.raises(IndexError, match="layer 9"):
        d.read(9, "k")
    with pytest.raises(ValueError, match="role"):
        d.read(0, "x")


def test_npz_and_npy_readers(tmp_path, stories):
    d = kvlab.open_dump(stories)
    layers = range(d.info["num_layers"])
    np.savez(tmp_path / "d.npz", **{f"{r}": np.stack([d.read(i, r) for i in layers]) for r in "qkv"})
    n = kvlab.open_dump(tmp_path / "d.npz")
    np.testing.assert_array_equal(n.read(3, "v"), d.read(3, "v"))


def write_dump(path, d, dtype="float32"):
    i = d.info
    with kvlab.DumpWriter(path, model="copy", num_layers=i["num_layers"], num_q_heads=i["num_q_heads"],
                          num_kv_heads=i["num_kv_heads"], head_dim=i["head_dim"], tokens=i["tokens"],
                          rope_theta=i["rope_theta"], rope_style=i["rope_style"], dtype=dtype,
                          token_ids=i["token_ids"], text=i["text"]) as w:
        for layer in range(i["num_layers"]):
            for role in "qkv":
                w.write(layer, role, d.read(layer, role))


def test_python_written_dump_is_read_by_the_cli(tmp_path, cli, stories):
    write_dump(tmp_path / "py.h5", kvlab.open_dump(stories))
    assert sorted(os.listdir(tmp_path)) == ["py.h5"]
    a = cli("eval", stories, "--methods", "kivi-2,kitty", "--queries", "last:32", "--format", "csv", "--quiet").stdout
    b = cli("eval", tmp_path / "py.h5", "--methods", "kivi-2,kitty", "--queries", "last:32", "--format", "csv",
            "--quiet").stdout
    assert a == b
    assert "copy" in cli("info", tmp_path / "py.h5").stdout


def test_cli_written_dump_is_read_by_python(tmp_path, cli):
    cli("synth", "--preset", "tiny", "--tokens", "200", "--seed", "7", "--quiet", "--out", tmp_path / "s.h5")
    d, s = kvlab.open_dump(tmp_path / "s.h5"), kvlab.synthetic("tiny", tokens=200, seed=7)
    assert d.info["tokens"] == s.info["tokens"] == 200
    for layer in range(s.info["num_layers"]):
        for role in "qkv":
            np.testing.assert_array_equal(d.read(layer, role), s.read(layer, role))


def test_writer_errors_leave_no_file(tmp_path):
    kw = dict(model="m", num_layers=1, num_q_heads=2, num_kv_heads=1, head_dim=4, tokens=3)
    with pytest.raises(ValueError, match=r"\(1, 3, 4\)"):
        with kvlab.DumpWriter(tmp_path / "w.h5", **kw) as w:
            w.write(0, "k", np.zeros((1, 3, 5), np.float32))
    with pytest.raises(OSError, match="never written"):
        with kvlab.DumpWriter(tmp_path / "w.h5", **kw) as w:
            w.write(0, "k", np.zeros((1, 3, 4), np.float32))
    assert os.listdir(tmp_path) == []
    w = kvlab.DumpWriter(tmp_path / "w.h5", **kw)
    w.discard()
    with pytest.raises(ValueError, match="already committed or discarded"):
        w.write(0, "q", np.zeros((2, 3, 4), np.float32))
    assert os.listdir(tmp_path) == []


def test_file_errors_are_oserrors_with_the_cli_message(tmp_path, cli):
    missing = tmp_path / "nope.h5"
    with pytest.raises(kvlab.MissingFileError) as e:
        kvlab.open_dump(missing)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, kvlab.FileError)
    r = cli("info", missing, check=False)
    assert r.returncode == 1 and r.stderr.strip() == f"kvlab: error: {e.value}"
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not a dump at all")
    with pytest.raises(kvlab.FileError) as e:
        kvlab.open_dump(bad)
    assert isinstance(e.value, OSError) and not isinstance(e.value, FileNotFoundError)
    assert cli("info", bad, check=False).stderr.strip() == f"kvlab: error: {e.value}"
