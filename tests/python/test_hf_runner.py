"""kvlab's C++ runner on Hugging Face checkpoints against transformers (no downloads): tiny random
Llama, Mistral and Qwen2 models saved with save_pretrained (fp32, sharded, fp16, bf16), their
logits from `kvlab dump --logits` and their q/k/v from `kvlab dump` against transformers and the
capture hook; the tokenizer.json contract against the tokenizers library; kvlab's reference
model (data/<name>/) when present.

Bound: for each compared tensor (all positions' logits; each layer's q, k, k_pre_rope, v),
max |kvlab - reference| / max |reference| <= 1e-4.

    KVLAB_BIN=build/experiments/kvlab .venv-hf/bin/python -m pytest tests/python/test_hf_runner.py
    .venv-hf/bin/python tests/python/test_hf_runner.py    # without pytest: exit 0 passed, 1 failed, 77 skipped
KVLAB_REF_MODEL=DIR points at the reference model (default: the first data/*/ holding
tokenizer.json and heldout.txt); without one those tests skip.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_hf_capture as hc  # noqa: E402  (skips, the plain runner, h5py/torch/transformers)
from test_hf_capture import h5py, np, params, skip, torch, transformers  # noqa: E402

REPO = hc.REPO
KVLAB = Path(os.environ.get("KVLAB_BIN", REPO / "build" / "experiments" / "kvlab"))
BOUND = 1e-4
T = 40


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def kvlab(*args, ok=True):
    if not KVLAB.exists():
        skip(f"{KVLAB} not built (set KVLAB_BIN)")
    run = subprocess.run([str(KVLAB), *map(str, args)], capture_output=True, text=True, timeout=600)
    if ok:
        assert run.returncode == 0, run.stderr[-3000:]
    return run


COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(rope_theta=500000.0, rms_norm_eps=1e-5, **COMMON),
    # explicit head_dim (32, not 64 / 4), biases everywhere, tied embeddings, GQA 4:1
    "llama-biased-tied": lambda: transformers.LlamaConfig(
        **{**COMMON, "num_key_value_heads": 1}, head_dim=32, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=True),
    "mistral": lambda: transformers.MistralConfig(sliding_window=64, rope_theta=1000000.0, **COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),  # q/k/v biases
}


def make_model(kind, seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[kind](), attn_implementation="sdpa")
    with torch.no_grad():  # norms around 1 and non-zero biases, so every weight matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.2)
    return model.eval()


def ids(n=T, seed=1):
    return torch.randint(0, COMMON["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed))


def token_file(path, tokens):
    path.write_text(" ".join(str(int(t)) for t in tokens.flatten()))
    return path


def kvlab_logits(tmp_path, model_dir, tokens, *extra):
    out = tmp_path / "kvlab_logits.npy"
    kvlab("dump", "--model", model_dir, "--tokens", token_file(tmp_path / "ids.txt", tokens), "--steps", 0,
          "--logits", out, "--out", tmp_path / "kvlab.h5", *extra)
    return np.load(out)


def reference_logits(model_dir, tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(tokens).logits[0].numpy()


@params("kind", list(CONFIGS))
def test_logits_match_transformers(tmp_path, kind):
    model = make_model(kind)
    model.save_pretrained(tmp_path / "m")
    tokens = ids()
    with torch.no_grad():
        ref = model(tokens).logits[0].numpy()
    err = rel_err(kvlab_logits(tmp_path, tmp_path / "m", tokens), ref)
    print(f"{kind}: logits max|diff|/max|ref| = {err:.2e}")
    assert err <= BOUND, err


def test_sharded_checkpoint(tmp_path):
    model = make_model("qwen2")
    model.save_pretrained(tmp_path / "m", max_shard_size="40KB")
    shards = sorted(p.name for p in (tmp_path / "m").glob("*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "m" / "model.safetensors.index.json").exists(), shards
    tokens = ids()
    with torch.no_grad():
        ref = model(tokens).logits[0].numpy()
    err = rel_err(kvlab_logits(tmp_path, tmp_path / "m", tokens), ref)
    print(f"sharded ({len(shards)} files): {err:.2e}")
    assert err <= BOUND, err


@params("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoint(tmp_path, dtype):
    make_model("llama").to(getattr(torch, dtype)).save_pretrained(tmp_path / "m")
    header = (tmp_path / "m" / "model.safetensors").read_bytes()
    n = int.from_bytes(header[:8], "little")
    dtypes = {v["dtype"] for k, v in json.loads(header[8:8 + n]).items() if k != "__metadata__"}
    assert dtypes == {"F16" if dtype == "float16" else "BF16"}, dtypes
    tokens = ids()
    # the reference: transformers on the same stored weights, widened to fp32 as kvlab does
    err = rel_err(kvlab_logits(tmp_path, tmp_path / "m", tokens), reference_logits(tmp_path / "m", tokens))
    print(f"{dtype}: {err:.2e}")
    assert err <= BOUND, err


@params("kind", list(CONFIGS))
def test_qkv_match_the_capture_hook(tmp_path, kind):
    model = make_model(kind)
    model.save_pretrained(tmp_path / "m")
    tokens = ids()
    hc.capture(model, tokens, tmp_path / "py.h5", store_pre_rope=True)
    kvlab("dump", "--model", tmp_path / "m", "--tokens", token_file(tmp_path / "ids.txt", tokens), "--steps", 0,
          "--out", tmp_path / "cpp.h5")
    worst = 0.0
    with h5py.File(tmp_path / "py.h5", "r") as py, h5py.File(tmp_path / "cpp.h5", "r") as cpp:
        for name in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "num_tokens", "rope_theta"):
            assert py.attrs[name] == cpp.attrs[name], (name, py.attrs[name], cpp.attrs[name])
        assert cpp.attrs["rope_style"] == "halves"
        assert np.array_equal(py["token_ids"][()], cpp["token_ids"][()])
        for i in range(model.config.num_hidden_layers):
            for role in ("q", "k", "k_pre_rope", "v"):
                err = rel_err(cpp[f"layers/{i}/{role}"][()], py[f"layers/{i}/{role}"][()])
                assert err <= BOUND, (i, role, err)
                worst = max(worst, err)
            # a head or layer mix-up would be far outside the bound
            q = cpp[f"layers/{i}/q"][()]
            assert rel_err(np.roll(q, 1, axis=0), py[f"layers/{i}/q"][()]) > 100 * BOUND
    print(f"{kind}: q/k/k_pre_rope/v worst max|diff|/max|ref| = {worst:.2e}")


def test_greedy_generation_follows_transformers(tmp_path):
    model = make_model("llama")
    model.save_pretrained(tmp_path / "m")
    prompt = ids(8)
    kvlab("dump", "--model", tmp_path / "m", "--tokens", token_file(tmp_path / "ids.txt", prompt), "--steps", 12,
          "--out", tmp_path / "g.h5")
    with h5py.File(tmp_path / "g.h5", "r") as f:
        seq = f["token_ids"][()].astype(np.int64)
    assert len(seq) == 20 and np.array_equal(seq[:8], prompt[0].numpy())
    with torch.no_grad():
        logits = model(torch.from_numpy(seq)[None]).logits[0].numpy()
    for t in range(7, 19):  # each generated token is transformers' argmax (unless a near-tie)
        top2 = np.sort(logits[t])[-2:]
        if top2[1] - top2[0] > 1e-3 * np.abs(logits[t]).max():
            assert seq[t + 1] == logits[t].argmax(), (t, seq[t + 1], logits[t].argmax())


def test_bad_directories_through_the_command_line(tmp_path):
    """kvlab dump exits 1 naming the file and field (every case: tests/models/hf_model_test.cpp)."""
    from safetensors.torch import load_file, save_file
    model = make_model("mistral")  # sliding_window 64
    model.save_pretrained(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    tensors = load_file(weights)
    long_ids = token_file(tmp_path / "long.txt", ids(65))
    run = kvlab("dump", "--model", tmp_path / "m", "--tokens", long_ids, "--steps", 0, "--out", tmp_path / "d.h5", ok=False)
    assert run.returncode == 1 and re.search(r"65 tokens, more than '.*config.json': sliding_window 64", run.stderr), run.stderr
    run = kvlab("dump", "--model", tmp_path / "m", "--tokens", token_file(tmp_path / "ids.txt", ids(8)), "--steps", 60,
                "--out", tmp_path / "d.h5", ok=False)  # 8 + 60 > 64 too, before any work
    assert run.returncode == 1 and "sliding_window 64" in run.stderr, run.stderr
    run = kvlab("dump", "--model", tmp_path / "m", "--prompt", "hi", "--out", tmp_path / "d.h5", ok=False)
    assert run.returncode == 1 and "tokenizer.json': cannot read" in run.stderr, run.stderr
    del tensors["model.layers.1.self_attn.v_proj.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    run = kvlab("dump", "--model", tmp_path / "m", "--tokens", tmp_path / "ids.txt", "--out", tmp_path / "d.h5", ok=False)
    assert run.returncode == 1 and "tensor 'model.layers.1.self_attn.v_proj.weight' is missing" in run.stderr, run.stderr
    weights.write_bytes(weights.read_bytes()[:-100])
    run = kvlab("dump", "--model", tmp_path / "m", "--tokens", tmp_path / "ids.txt", "--out", tmp_path / "d.h5", ok=False)
    assert run.returncode == 1 and str(weights) in run.stderr and "truncated" in run.stderr, run.stderr
    assert not (tmp_path / "d.h5").exists()


# ---------------------------------------------------------------------------------------------
# tokenizer.json: the reference model's format contract

HELD_OUT = """Zürich, 12. März 2024 — the quick brown fox jumps over 13 lazy dogs; 3.14159 × 2 = 6.28318.
    Indented line with    runs   of     spaces, and a tab\there.
Ünïcödé: naïve café, Ελληνικά, русский текст, 日本語のテキスト, 中文字符, 한국어, emoji 🎉🚀👍🏽.

Numbers: 0 1 22 333 4444 55555 666666 7777777 1e-5 0x1F 2^31-1 = 2147483647.
Special-looking text: <s> </s> <unk> <0x41> <0xZZ> < s > and "quotes" 'single' `back`.
Trailing spaces   
   leading spaces
\n\n\nThree blank lines above; CRLF next\r\nend."""


def training_text():
    docs = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
    return [p.read_text(encoding="utf-8") for p in docs]


def held_out_text():
    """Several KB: a part of kvlab's own source no tokenizer here was trained on, and the
    hand-made block above (unicode, digits, newlines, runs of spaces)."""
    code = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "models" / "src").glob("*.cpp"))[:4])
    return HELD_OUT + "\n" + code[:6000] + "\n" + HELD_OUT


def train_tokenizer(path, decoder="llama", vocab_size=700):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = (decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                      decoders.Strip(" ", 1, 0)]) if decoder == "llama"
                   else decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True))
    special = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(training_text(), trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                                                 show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path))
    return tok


def kvlab_encode(tmp_path, tokenizer_json, text):
    (tmp_path / "text.txt").write_bytes(text.encode("utf-8") + b"\n")  # the trailing newline is dropped
    run = kvlab("tokenize", "--tokenizer", tokenizer_json, "--prompt-file", tmp_path / "text.txt")
    return [int(x) for x in run.stdout.split()]


def kvlab_decode(tmp_path, tokenizer_json, tokens):
    (tmp_path / "dec.txt").write_text(" ".join(map(str, tokens)))
    return kvlab("tokenize", "--tokenizer", tokenizer_json, "--tokens", tmp_path / "dec.txt",
                 "--out", tmp_path / "decoded.txt") and (tmp_path / "decoded.txt").read_bytes().decode("utf-8")


def check_same_ids(tmp_path, tok, path, text):
    want = tok.encode(text).ids
    got = kvlab_encode(tmp_path, path, text)
    if got != want:
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise AssertionError(f"ids differ first at {i} of {len(want)}: kvlab {got[i:i + 8]}, tokenizers "
                             f"{want[i:i + 8]} ({[tok.id_to_token(t) for t in want[i:i + 8]]})")
    assert kvlab_decode(tmp_path, path, want) == tok.decode(want, skip_special_tokens=False)
    return want


@params("decoder", ["llama", "metaspace"])
def test_tokenizer_matches_tokenizers_library(tmp_path, decoder):
    tok = train_tokenizer(tmp_path / "tokenizer.json", decoder)
    text = held_out_text()
    assert len(text.encode("utf-8")) > 4000
    want = check_same_ids(tmp_path, tok, tmp_path / "tokenizer.json", text)
    assert any(3 <= t <= 258 for t in want), "the held-out text should need byte fallback"
    for piece in ["", " ", "  leading", "x", "日本", "\n\n", "<s>", "a<s>b", "<0x41><0x42>", "🎉 end "]:
        check_same_ids(tmp_path, tok, tmp_path / "tokenizer.json", piece)
    b = [3 + x for x in range(256)]  # byte pieces: broken, overlong, surrogate and valid runs
    for seq in ([b[0xE6], b[0x97], 300], [b[0xFF], b[0x41]], [b[0xC0], b[0x80]], [b[0xED], b[0xA0], b[0x80]],
                [b[0xF0], b[0x9F], b[0x8E], b[0x89], 2, b[0xE6]], [1, 400, b[0x0A], 401, 0]):
        assert kvlab_decode(tmp_path, tmp_path / "tokenizer.json", seq) == tok.decode(seq, skip_special_tokens=False), seq
    print(f"{decoder}: {len(want)} ids of {len(text.encode('utf-8'))} bytes identical")


def test_dump_with_tokenizer_records_ids_and_text(tmp_path):
    (tmp_path / "m").mkdir()
    tok = train_tokenizer(tmp_path / "m" / "tokenizer.json")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{**COMMON, "vocab_size": tok.get_vocab_size()})
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "m")
    prompt = "Ünïcödé  text, 42 numbers\nand a new line"
    kvlab("dump", "--model", tmp_path / "m", "--prompt", prompt, "--steps", 5, "--out", tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        seq = list(f["token_ids"][()])
        want = tok.encode(prompt).ids
        assert seq[:len(want)] == want
        assert f.attrs["text"] == tok.decode(seq, skip_special_tokens=False)
        assert "kvlab dump --model" in f.attrs["source"]


def contract_breaks():
    """(what changes, the field kvlab must name)"""
    return [
        (lambda j: j.__setitem__("normalizer", {"type": "NFKC"}), "normalizer"),
        (lambda j: j.__setitem__("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                   "use_regex": True}), "pre_tokenizer"),
        (lambda j: j["pre_tokenizer"].__setitem__("prepend_scheme", "always"), "pre_tokenizer"),
        (lambda j: j["model"].__setitem__("byte_fallback", False), "model.byte_fallback"),
        (lambda j: j["model"].__setitem__("type", "Unigram"), "model.type"),
        (lambda j: j["model"].__setitem__("dropout", 0.1), "model.dropout"),
        (lambda j: j.__setitem__("decoder", {"type": "ByteLevel"}), "decoder"),
        (lambda j: j.__setitem__("post_processor", None), "post_processor"),
        (lambda j: j["model"]["vocab"].__setitem__("<0x00>", 5000), "model.vocab"),
        (lambda j: j["model"]["merges"].append(["no_such_piece", "x"]), "model.merges"),
        (lambda j: j["added_tokens"][1].__setitem__("lstrip", True), "added_tokens"),
    ]


def test_tokenizers_outside_the_contract_are_refused(tmp_path):
    train_tokenizer(tmp_path / "good.json")
    for i, (change, field) in enumerate(contract_breaks()):
        j = json.loads((tmp_path / "good.json").read_text(encoding="utf-8"))
        change(j)
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps(j), encoding="utf-8")
        run = kvlab("tokenize", "--tokenizer", bad, "--prompt", "hello", ok=False)
        assert run.returncode == 1 and str(bad) in run.stderr and field in run.stderr, (field, run.stderr)


# ---------------------------------------------------------------------------------------------
# kvlab's reference model, once it is in data/<name>/

def reference_dir():
    env = os.environ.get("KVLAB_REF_MODEL")
    if env:
        return Path(env) if (Path(env) / "tokenizer.json").exists() else None
    found = [p.parent for p in sorted((REPO / "data").glob("*/heldout.txt")) if (p.parent / "tokenizer.json").exists()]
    return found[0] if found else None


def test_reference_model_tokenizer_on_heldout(tmp_path):
    d = reference_dir()
    if d is None:
        skip("no reference model (data/<name>/ with tokenizer.json and heldout.txt, or KVLAB_REF_MODEL)")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    text = (d / "heldout.txt").read_text(encoding="utf-8")
    want = check_same_ids(tmp_path, tok, d / "tokenizer.json", text)
    print(f"{d.name}: {len(want)} ids of heldout.txt identical")


def test_reference_model_logits(tmp_path):
    d = reference_dir()
    if d is None or not any(d.glob("*.safetensors")):
        skip("no reference model weights (data/<name>/model.safetensors, or KVLAB_REF_MODEL)")
    from tokenizers import Tokenizer
    tokens = torch.tensor([Tokenizer.from_file(str(d / "tokenizer.json")).encode(
        (d / "heldout.txt").read_text(encoding="utf-8")).ids[:512]])
    err = rel_err(kvlab_logits(tmp_path, d, tokens), reference_logits(d, tokens))
    print(f"{d.name}: 512 tokens, logits max|diff|/max|ref| = {err:.2e}")
    assert err <= BOUND, err


if __name__ == "__main__":
    hc.pytest = None  # the plain runner: skips raise the runner's own exception
    sys.exit(hc._main(globals()))
