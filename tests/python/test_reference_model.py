"""Tests of scripts/train_reference_model.py and scripts/analyze_reference_model.py: a --smoke run
(tiny model, CPU) on a small corpus made from kvlab's own docs, then checks of what it wrote: the
tokenizer's format contract, transformers loading it all, the book split, heldout.txt, the losses.

    .venv-hf/bin/python -m pytest -q tests/python/test_reference_model.py   # needs torch, transformers
"""
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))
from refmodel import corpus, data  # noqa: E402
from refmodel import tokenizer as toklib  # noqa: E402

DOCS = sorted(REPO.glob("docs/*.md"))
DUPLICATE = "docs__architecture_42"  # a second edition of docs__architecture: never held out


def gutenberg(title, body):
    return (f"\ufeffThe Project Gutenberg eBook of {title}\r\n\r\nTitle: {title}\r\nLanguage: English\r\n\r\n"
            f"*** START OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\r\n{body}\r\n"
            f"*** END OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\r\nLicence text.\r\n")


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """A .tar.xz of 'books' (kvlab's docs in Gutenberg dress) and {name: body} as the script sees them."""
    d = tmp_path_factory.mktemp("corpus")
    folder = d / "gutenberg"
    folder.mkdir()
    bodies = {f"docs__{p.stem.lower()}": p.read_text(encoding="utf-8").strip() for p in DOCS}
    bodies[DUPLICATE] = bodies["docs__architecture"]
    for name, body in bodies.items():
        (folder / f"{name}.txt").write_bytes(gutenberg(name, body.replace("\n", "\r\n")).encode("utf-8"))
    with tarfile.open(d / "books.tar.xz", "w:xz") as tar:
        tar.add(folder, arcname="gutenberg")
    return d / "books.tar.xz", {n: b + "\n" for n, b in bodies.items()}


def run_script(name, *args):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke(books, tmp_path_factory):
    """One --smoke run; its time guard is lifted so that a busy machine cannot cut it short."""
    out = tmp_path_factory.mktemp("smoke") / "model"
    res = run_script("train_reference_model.py", "--corpus", books[0], "--out", out, "--smoke",
                     "--max-books", 0, "--heldout-books", 2, "--seed", 7, "--time-limit-s", 3000)
    assert res.returncode == 0, res.stdout + res.stderr
    return out, json.loads((out / "train_info.json").read_text())


def test_outputs_and_config(smoke):
    out, info = smoke
    names = {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
             "tokenizer_config.json", "train_info.json", "loss_curve.csv", "heldout.txt"}
    assert {p.name for p in out.iterdir()} == names
    hp = info["hyperparameters"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["head_dim"] == hp["head_dim"]
    assert cfg["num_attention_heads"] == hp["heads"] and cfg["num_key_value_heads"] == hp["kv_heads"]
    assert cfg["vocab_size"] == hp["vocab"] and cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2
    for key in ("train", "heldout"):
        assert info["split"][key], key
    assert info["versions"]["torch"] == torch.__version__ and info["wall_s"]["total"] > 0
    assert info["model_safetensors_sha256"] == hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def test_split_holds_out_whole_books(smoke, books):
    _, info = smoke
    train, heldout = set(info["split"]["train"]), set(info["split"]["heldout"])
    assert len(heldout) == 2 and not train & heldout and train | heldout == set(books[1])
    assert {DUPLICATE, "docs__architecture"} <= train  # a work with two editions stays in training
    tar = tarfile.open(books[0])
    files = {Path(m.name).stem: hashlib.sha256(tar.extractfile(m).read()).hexdigest()[:16]
             for m in tar.getmembers() if m.isfile()}
    assert info["split"]["file_sha256_16"] == files


def test_split_rule_is_seeded(books):
    bodies = books[1]
    langs = dict.fromkeys(bodies, "English")
    a = corpus.split_books(bodies, langs, 2, 7, 0, 10**9)
    assert a == corpus.split_books(bodies, langs, 2, 7, 0, 10**9)
    assert any(corpus.split_books(bodies, langs, 2, s, 0, 10**9) != a for s in range(8, 20))
    with pytest.raises(corpus.CorpusError, match="eligible"):
        corpus.split_books(bodies, langs, len(bodies), 7, 0, 10**9)


def test_tokenizer_contract_and_autotokenizer(smoke):
    out, info = smoke
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert toklib.layout_errors(tok) == []
    assert [tok.id_to_token(i) for i in (0, 1, 2, 3, 258)] == ["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"]
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    text = (out / "heldout.txt").read_text(encoding="utf-8")
    unusual = "Z\u00fcrich \u20ac5 \u6f22\u5b57 \U0001F600\tend"  # characters the docs lack: byte fallback
    for s in (text, unusual, " leading space", "a\n\nb"):
        ids = tok.encode(s).ids
        assert ids[0] == toklib.BOS and auto(s)["input_ids"] == ids, repr(s[:40])
    ids = tok.encode(unusual).ids
    assert any(3 <= i <= 258 for i in ids), "no byte-fallback token"
    assert toklib.UNK not in ids
    assert tok.decode(ids) == unusual and auto.decode(ids, skip_special_tokens=True) == unusual
    assert tok.decode(tok.encode(text).ids) == text


def test_tokenizer_training_is_deterministic(books):
    texts = list(books[1].values())[:4]
    a = toklib.train_tokenizer(texts, 600).to_str()
    assert toklib.train_tokenizer(texts, 600).to_str() == a
    # 26 letters tie for the last places of a 10-character alphabet: tokenizers' own limit_alphabet
    # picks among them in hash-map order (a different pick nearly every run); ours by code point.
    tie = [" ".join(c * 5 for c in "abcdefghijklmnopqrstuvwxyz") + " zz"]
    assert toklib.alphabet(tie, 10) == ["\u2581", "z", "a", "b", "c", "d", "e", "f", "g", "h"]
    runs = {toklib.train_tokenizer(tie, 300, limit_alphabet=10).to_str() for _ in range(5)}
    assert len(runs) == 1
    pieces = json.loads(runs.pop())["model"]["vocab"]
    assert sorted(p for p in pieces if len(p) == 1) == ["a", "b", "c", "d", "e", "f", "g", "h", "z", "\u2581"]


def test_heldout_txt_is_the_named_excerpt(smoke, books):
    out, info = smoke
    h = info["heldout_txt"]
    text = (out / "heldout.txt").read_text(encoding="utf-8")
    assert h["book"] in info["split"]["heldout"]
    assert text == books[1][h["book"]][h["char_offset"]:h["char_offset"] + h["chars"]]
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert len(tok.encode(text).ids) == h["tokens_with_bos"] >= info["hyperparameters"]["heldout_txt_tokens"]


def test_model_loads_in_fp16_and_learned(smoke):
    out, info = smoke
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert all(p.dtype == torch.float16 for p in model.parameters())
    r = info["results"]
    assert not r["stopped_early"] and r["steps_done"] == info["hyperparameters"]["steps"]
    uniform = math.log(info["hyperparameters"]["vocab"])
    assert r["heldout_loss"] < uniform - 0.5 and r["train_loss"] < uniform - 0.5, r
    rows = (out / "loss_curve.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) - 1 == info["hyperparameters"]["steps"] // 5
    # the saved fp16 model scores held-out text about as the training run measured
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    ctx = info["hyperparameters"]["context"]
    ids = torch.tensor([tok.encode((out / "heldout.txt").read_text(encoding="utf-8")).ids[:ctx]])
    with torch.no_grad():
        loss = model.float()(input_ids=ids, labels=ids).loss.item()
    assert abs(loss - r["heldout_loss"]) < 1.0, (loss, r["heldout_loss"])


def test_training_order_is_seeded_and_covers_epochs():
    a = data.training_order(10_000, 128, 4, 50, seed=3)
    assert a.shape == (50, 4) and np.array_equal(a, data.training_order(10_000, 128, 4, 50, seed=3))
    assert not np.array_equal(a, data.training_order(10_000, 128, 4, 50, seed=4))
    per_epoch = len(data.window_starts(10_000, 128))
    first = a.reshape(-1)[:per_epoch]
    assert len(set(first.tolist())) == per_epoch  # an epoch uses each window once
    w = data.windows(np.arange(10_000, dtype=np.int32), a[0], 128)
    assert (w[:, 0] == toklib.BOS).all() and (w[:, 1] == a[0]).all() and (np.diff(w[:, 1:]) == 1).all()


def test_bad_inputs_are_named(books, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "no_markers.txt").write_text("just text\n")
    res = run_script("train_reference_model.py", "--corpus", folder, "--out", tmp_path / "o", "--smoke")
    assert res.returncode != 0 and "no_markers.txt" in res.stderr, res.stderr
    res = run_script("train_reference_model.py", "--corpus", books[0], "--out", folder, "--smoke")
    assert res.returncode != 0 and "exists" in res.stderr, res.stderr
    res = run_script("train_reference_model.py", "--corpus", books[0], "--out", tmp_path / "o", "--heads", 3)
    assert res.returncode != 0 and "--kv-heads" in res.stderr, res.stderr


def test_analysis(smoke, tmp_path):
    out, info = smoke
    d = tmp_path / "model"
    shutil.copytree(out, d)
    (d / "README.md").write_text("# model\n\n<!-- measured:begin -->\nold\n<!-- measured:end -->\n\nafter\n")
    res = run_script("analyze_reference_model.py", d, "--windows", 2, "--induction-len", 20, "--write-readme")
    assert res.returncode == 0, res.stdout + res.stderr
    a = json.loads((d / "analysis.json").read_text())
    hp = info["hyperparameters"]
    assert a["tokenizer"] == {"layout_errors": [], "autotokenizer_same_ids_on_heldout_txt": True,
                              "decode_round_trip_heldout_txt": True}
    assert len(a["attention_sink"]["per_layer_mean"]) == hp["layers"]
    assert all(0 < m < 1 for m in a["attention_sink"]["per_layer_mean"])
    for role in ("key_channels", "key_channels_pre_rope", "value_channels"):
        rows = a[role]
        assert len(rows) == hp["layers"] * hp["kv_heads"], role
        assert all(r["top_ratio"][0] >= 1 and 0 <= r["top_channels"][0] < hp["head_dim"] for r in rows), role
    ind = a["induction"]["random_tokens"]
    assert ind["span"] == 20 and math.isfinite(ind["first_copy_loss"]) and math.isfinite(ind["second_copy_loss"])
    assert abs(a["heldout_cpu"]["loss"] - info["results"]["heldout_loss"]) < 1.0
    assert (d / "loss_curve.svg").read_text().startswith("<svg")
    readme = (d / "README.md").read_text()
    assert "old" not in readme and "| held-out loss |" in readme and readme.endswith("after\n")
    res = run_script("analyze_reference_model.py", tmp_path)
    assert res.returncode != 0 and "lacks" in res.stderr, res.stderr
