"""kvlab.evaluate, sensitivity, boost_sweep, kmeans and vq against the CLI: the same numbers;
arrays in memory as a source; progress, Ctrl-C and the GIL."""
import csv
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import kvlab

METHODS = "kivi-2,kivi-2-sink,kitty,kitty-pro,int8,fp8-e4m3,kivi:kbits=3,vbits=2,group=64"


def without_timing(r):
    return {k: v for k, v in r.items() if k != "timing_s"}


def test_evaluate_equals_cli_json(tmp_path, cli, stories):
    cli("eval", stories, "--methods", METHODS, "--queries", "stride:7", "--format", "json", "--out",
        tmp_path / "r.json", "--quiet")
    want = json.loads((tmp_path / "r.json").read_text())
    got = kvlab.evaluate(stories, methods=["kivi-2", "kivi-2-sink", "kitty", "kitty-pro", "int8", "fp8-e4m3",
                                           "kivi:kbits=3,vbits=2,group=64"], queries="stride:7")
    assert without_timing(got) == without_timing(want)
    assert set(got["timing_s"]) == set(want["timing_s"])
    by_method = kvlab.evaluate(stories, methods=kvlab.Method("kitty-pro"), queries="stride:7")["methods"][0]
    by_name = next(m for m in got["methods"] if m["name"] == "kitty-pro")
    assert by_method["name"] == by_method["spec"] == by_name["spec"]  # a Method is named by its spec
    assert {**by_method, "name": "kitty-pro"} == by_name


def test_evaluate_defaults_and_layers(cli):
    # No dump: both use the reference model's dump, cached ($KVLAB_CACHE_DIR; ctest's fixture
    # eval_default_dump_make has made it once for the run).
    want = json.loads(cli("eval", "--layers", "1-2", "--queries", "last:40", "--format", "json", "--quiet").stdout)
    got = kvlab.evaluate(layers="1-2", queries="last:40")
    assert without_timing(got) == without_timing(want)
    assert got["dump"]["path"] == kvlab.default_eval_dump()
    assert (got["dump"]["num_layers"], got["dump"]["head_dim"], got["dump"]["tokens"]) == (6, 128, 2048)


def test_arrays_source_gives_the_dumps_numbers(stories):
    d = kvlab.open_dump(stories)
    n = d.info["num_layers"]
    arrays = {r: np.stack([d.read(i, r) for i in range(n)]) for r in "qkv"}
    a = kvlab.evaluate(arrays, methods="kitty", queries="last:64")
    b = kvlab.evaluate(d, methods="kitty", queries="last:64")
    assert a["methods"] == b["methods"] and a["dump"]["path"] == "<arrays>"
    half = {r: x.astype(np.float16) for r, x in arrays.items()}
    c = kvlab.evaluate(half, methods="kitty", queries="last:64")
    assert c["methods"][0]["bits_per_element"] == b["methods"][0]["bits_per_element"]
    with pytest.raises(ValueError, match="must both be"):
        kvlab.evaluate({"q": arrays["q"], "k": arrays["k"], "v": np.ascontiguousarray(arrays["v"][:, :, :10])})
    with pytest.raises(ValueError, match="missing v"):
        kvlab.evaluate({"q": arrays["q"], "k": arrays["k"]})


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def same(value, text):
    if text == "":
        return value is None or value != value  # NaN is written as an empty field
    return value == (float(text) if isinstance(value, float) else type(value)(text))


def test_sensitivity_equals_cli_csv(tmp_path, cli, stories):
    cli("sensitivity", stories, "--queries", "last:64", "--group", "32", "--sink", "4", "--out", tmp_path / "s.csv",
        "--quiet")
    r = kvlab.sensitivity(stories, queries="last:64", group=32, sink=4)
    rows = read_csv(tmp_path / "s.csv")
    assert len(rows) == len(r["rows"]["channel"]) > 0
    for i, row in enumerate(rows):
        for col, text in row.items():
            assert same(r["rows"][col][i], text), (i, col)
    ranking = read_csv(tmp_path / "s_ranking.csv")
    assert len(ranking) == len(r["ranking"])
    for got, row in zip(r["ranking"], ranking):
        for col, text in row.items():
            assert same(got[col], text), col


def test_boost_sweep_equals_cli_csv(tmp_path, cli, stories):
    cli("boost-sweep", stories, "--rates", "0.5,0,0.25", "--seeds", "2", "--out", tmp_path / "w.csv", "--quiet")
    r = kvlab.boost_sweep(stories, rates=[0.5, 0, 0.25], seeds=2)
    for got_rows, name in ((r["rows"], "w.csv"), (r["summary"], "w_summary.csv")):
        want = read_csv(tmp_path / name)
        assert len(want) == len(got_rows) > 0
        for got, row in zip(got_rows, want):
            for col, text in row.items():
                assert same(got[col], text), (name, col)


def test_kmeans_equals_cli(tmp_path, cli):
    x = np.random.default_rng(5).standard_normal((2000, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cli("kmeans", "--input", tmp_path / "x.npy", "--k", 16, "--iters", 7, "--init", "kmeans++", "--seed", 3,
        "--out", tmp_path / "c.npz")
    want = np.load(tmp_path / "c.npz")
    got = kvlab.kmeans(x, 16, iters=7, init="kmeans++", seed=3)
    assert got["centroids"].tobytes() == want["centroids"].tobytes()
    assert got["assign"].tobytes() == want["assign"].tobytes()
    np.testing.assert_array_equal(np.float32([i["objective"] for i in got["iterations"]]), want["objective"])
    with pytest.raises(ValueError, match="k"):
        kvlab.kmeans(x[:5], 16)
    with pytest.raises(ValueError, match="2-D float32"):
        kvlab.kmeans(x[0], 2)


def test_vq_train_equals_cli_codebooks(tmp_path, cli, stories):
    h5py = pytest.importorskip("h5py")
    cli("vq", "train", stories, "--spec", "CQ-2c4b", "--role", "k", "--layers", "1", "--iters", 5,
        "--out", tmp_path / "cb.h5")
    k = kvlab.open_dump(stories).read(1, "k")
    books = [kvlab.vq.train(np.ascontiguousarray(k[h]), "CQ-2c4b", iters=5) for h in range(k.shape[0])]
    with h5py.File(tmp_path / "cb.h5", "r") as f:
        stored = f["k/codebooks"][()]  # (layers, kv heads, stages, groups, entries, vec)
    assert stored.dtype == np.float32 and stored.shape[1:] == (len(books), *books[0].data.shape)
    assert np.stack([b.data for b in books]).tobytes() == stored[0].tobytes()
    cb = books[0]
    codes = cb.encode(np.ascontiguousarray(k[0]))
    assert codes.shape == (k.shape[1], 1, k.shape[2] // 2) and codes.dtype == np.uint8
    r = kvlab.vq.reorder(cb, codes, reg_bytes=8, smem_bytes=16)
    np.testing.assert_array_equal(r["codebooks"].decode(r["codes"]), cb.decode(codes))  # decoding unchanged
    assert (np.diff(r["usage"], axis=-1) <= 0).all() and len(r["levels"]) == codes.shape[2]


def test_progress_callback_and_ctrl_c():
    dump = kvlab.synthetic("tiny", tokens=128, layers=3)
    seen = []
    kvlab.evaluate(dump, methods="kivi-2", progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]

    calls = []

    def interrupt(done, total):
        calls.append(done)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during the run
    with pytest.raises(KeyboardInterrupt):
        kvlab.evaluate(dump, methods="kivi-2", progress=interrupt)
    assert calls == [1]  # stopped before the next layer

    def boom(done, total):
        raise RuntimeError("from the callback")
    with pytest.raises(RuntimeError, match="from the callback"):
        kvlab.sensitivity(dump, group=32, sink=4, progress=boom)


def test_long_calls_release_the_gil():
    dump = kvlab.synthetic("tiny", tokens=2048, layers=2)
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)
    t = threading.Thread(target=tick)
    t.start()
    start = time.perf_counter()
    kvlab.evaluate(dump, methods=["kivi-2", "kitty"], threads=1)
    end = time.perf_counter()
    done.set()
    t.join()
    inside = [x for x in ticks if start < x < end]
    assert end - start > 0.05 and len(inside) > 10, (end - start, len(inside))
