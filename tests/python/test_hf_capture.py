"""Tests of kvlab.capture (bindings/python/kvlab/capture): capture tiny randomly initialised transformers
models (no downloads), then check the dump with h5py against the model's own numbers.

    pytest tests/python/test_hf_capture.py        # or, without pytest:
    python3 tests/python/test_hf_capture.py       # exit 0 passed, 1 failed, 77 skipped
"""
import contextlib
import importlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bindings" / "python"))  # kvlab.capture needs no compiled module

pytest = None
if __name__ != "__main__":  # run as a script, the plain runner at the end handles skips itself
    try:
        import pytest
    except ImportError:
        pass


class _Skip(Exception):
    pass


def skip(reason, module=False):
    if pytest:
        pytest.skip(reason, allow_module_level=module)
    raise _Skip(reason)


def _need(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        if pytest:
            skip(f"{name} is not installed (see scripts/hf_env.sh)", module=True)
        print(f"SKIP {__file__}: {name} is not installed (see scripts/hf_env.sh)")
        sys.exit(77)


np = _need("numpy")
h5py = _need("h5py")
torch = _need("torch")
transformers = _need("transformers")
if not hasattr(transformers, "AttentionInterface"):
    if pytest:
        skip(f"transformers {transformers.__version__} predates AttentionInterface (needs >= 4.51)", module=True)
    print(f"SKIP: transformers {transformers.__version__} predates AttentionInterface (needs >= 4.51)")
    sys.exit(77)

from kvlab.capture import DumpWriter, capture  # noqa: E402
from kvlab.capture import hook  # noqa: E402


def params(name, values):
    """pytest.mark.parametrize, or a note for the plain runner below."""
    def deco(fn):
        fn.kvlab_params = (name, values)
        return pytest.mark.parametrize(name, values)(fn) if pytest else fn
    return deco


@contextlib.contextmanager
def raises(exc, match):
    try:
        yield
    except exc as e:
        assert re.search(match, str(e)), f"{exc.__name__} message {str(e)!r} does not match {match!r}"
    else:
        raise AssertionError(f"{exc.__name__} not raised")


KINDS = ["llama", "qwen3", "mistral"]
T = 24  # tokens; more than mistral's sliding window below, so its mask matters


def make_model(kind, dtype=torch.float32, attn="sdpa", device="cpu", seed=0):
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if kind == "llama":
        cfg = transformers.LlamaConfig(rope_theta=500000.0, **common)
    elif kind == "qwen3":  # head_dim 32 != hidden/heads = 16: must be read from the config
        cfg = transformers.Qwen3Config(head_dim=32, rope_theta=1000000.0, **common)
    else:
        cfg = transformers.MistralConfig(sliding_window=8, rope_theta=1000000.0, **common)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.to(device=device, dtype=dtype).eval()


def token_ids(n=T, seed=1):
    return torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(seed))


def layers(model):
    return model.model.layers


def cache_kv(cache, i):
    """Keys (after RoPE) and values of layer i from a forward's past_key_values, any version."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[i], cache.value_cache[i]
    return cache[i][0], cache[i][1]


def read(ds):
    """Dataset -> torch float32, whatever the stored type."""
    x = ds[()]
    if ds.attrs["dtype"] == "bfloat16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return torch.from_numpy(x.astype(np.float32))


def scalar_attr(f, name):
    aid = f.attrs.get_id(name)
    assert aid.shape == (), f"attribute {name} is not scalar: {aid.shape}"
    return aid.dtype


@params("kind", KINDS)
def test_attributes_shapes_and_layout(tmp_path, kind):
    model = make_model(kind)
    path = tmp_path / "d.h5"
    ids = token_ids()
    capture(model, ids, path, text="some text", model_name=f"tiny-{kind}")
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    with h5py.File(path, "r") as f:
        ints = dict(format_version=1, num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=head_dim,
                    num_tokens=T, k_after_rope=1)
        for name, want in ints.items():
            assert scalar_attr(f, name) == np.int64, name
            assert f.attrs[name] == want, (name, f.attrs[name], want)
        assert scalar_attr(f, "rope_theta") == np.float64
        assert f.attrs["rope_theta"] == {"llama": 500000.0}.get(kind, 1000000.0)
        strings = dict(format="kvlab-kv-dump", model=f"tiny-{kind}", rope_style="halves", dtype="float32",
                       text="some text")
        for name in [*strings, "source"]:
            info = h5py.check_string_dtype(scalar_attr(f, name))
            assert info is not None and info.encoding == "utf-8" and info.length is None, name
        for name, want in strings.items():
            assert f.attrs[name] == want, (name, f.attrs[name])
        assert f["token_ids"].dtype == np.dtype("<i4")
        assert np.array_equal(f["token_ids"][()], ids[0].numpy())
        assert sorted(f["layers"].keys()) == ["0", "1"]
        for i in range(2):
            for role, heads in (("q", 4), ("k", 2), ("v", 2)):
                ds = f[f"layers/{i}/{role}"]
                assert ds.shape == (heads, T, head_dim), (role, ds.shape)
                assert ds.dtype == np.float32 and ds.attrs["dtype"] == "float32"
                assert ds.chunks == (1, T, head_dim)
                assert ds.compression == "gzip" and ds.compression_opts == 1 and ds.shuffle
                plist = ds.id.get_create_plist()  # exactly [shuffle, deflate]: kvlab's parallel read path
                assert [plist.get_filter(j)[0] for j in range(plist.get_nfilters())] == [
                    h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_DEFLATE]
            assert "k_pre_rope" not in f[f"layers/{i}"]


@params("kind", KINDS)
def test_k_and_v_equal_the_models_cache(tmp_path, kind):
    model = make_model(kind)
    ids = token_ids()
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    capture(model, ids, tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        for i in range(2):
            k, v = cache_kv(cache, i)
            n = k.shape[2]  # a sliding-window cache (mistral) keeps only the last positions
            assert n == T or (kind == "mistral" and n >= 7), f"cache holds {n} positions"
            assert torch.equal(read(f[f"layers/{i}/k"])[:, -n:], k[0]), f"layer {i} k"
            assert torch.equal(read(f[f"layers/{i}/v"])[:, -n:], v[0]), f"layer {i} v"


@params("kind", ["llama", "qwen3"])
def test_q_reproduces_the_attention_output(tmp_path, kind):
    """softmax(q k^T / sqrt(D)) v with GQA head h -> KV head h / 2 equals what o_proj receives."""
    model = make_model(kind)
    seen = {}
    handles = [layer.self_attn.o_proj.register_forward_pre_hook(
        lambda _m, args, i=i: seen.__setitem__(i, args[0].detach().clone())) for i, layer in enumerate(layers(model))]
    try:
        capture(model, token_ids(), tmp_path / "d.h5")
    finally:
        for h in handles:
            h.remove()
    with h5py.File(tmp_path / "d.h5", "r") as f:
        for i in range(2):
            q, k, v = (read(f[f"layers/{i}/{r}"]) for r in "qkv")
            k, v = k.repeat_interleave(2, dim=0), v.repeat_interleave(2, dim=0)
            out = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)
            out = out.transpose(1, 2).reshape(1, T, -1)
            torch.testing.assert_close(out, seen[i], rtol=1e-5, atol=1e-5)
            wrong_q = q.roll(1, dims=0)  # the check must notice a head mix-up
            bad = torch.nn.functional.scaled_dot_product_attention(wrong_q[None], k[None], v[None], is_causal=True)
            assert not torch.allclose(bad.transpose(1, 2).reshape(1, T, -1), seen[i], atol=1e-3)


@params("kind", KINDS)
def test_outputs_unchanged_and_model_restored(tmp_path, kind):
    for attn in ("sdpa", "eager"):
        model = make_model(kind, attn=attn)
        ids = token_ids()
        with torch.no_grad():
            ref = model(ids).logits
        model.train()  # capture must evaluate in eval mode and give the mode back
        out = capture(model, ids, tmp_path / f"{attn}.h5")
        assert model.training and model.config._attn_implementation == attn
        model.eval()
        torch.testing.assert_close(out.logits, ref, rtol=0, atol=1e-6, msg=f"{attn}: logits changed")
        with torch.no_grad():
            assert torch.equal(model(ids).logits, ref), f"{attn}: model not restored after capture"


@params("dtype", ["float16", "bfloat16"])
def test_half_dtypes_stored_as_captured(tmp_path, dtype):
    tdtype = getattr(torch, dtype)
    model = make_model("llama", dtype=tdtype)
    ids = token_ids()
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    capture(model, ids, tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert f.attrs["dtype"] == dtype
        for i in range(2):
            k = cache_kv(cache, i)[0][0]
            ds = f[f"layers/{i}/k"]
            assert ds.attrs["dtype"] == dtype
            if dtype == "float16":
                assert ds.dtype == np.float16
                assert np.array_equal(ds[()], k.numpy())
            else:
                assert ds.dtype == np.uint16
                assert np.array_equal(ds[()], k.view(torch.int16).numpy().view(np.uint16))
            assert torch.equal(read(ds), k.float())
            assert f[f"layers/{i}/q"].dtype == f[f"layers/{i}/v"].dtype == ds.dtype


@params("kind", ["llama", "qwen3"])
def test_pre_rope_keys_rotate_into_k(tmp_path, kind):
    model = make_model(kind)
    capture(model, token_ids(), tmp_path / "d.h5", store_pre_rope=True)
    attn = layers(model)[0].self_attn
    apply_rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    with h5py.File(tmp_path / "d.h5", "r") as f:
        for i in range(2):
            pre, k = read(f[f"layers/{i}/k_pre_rope"]), read(f[f"layers/{i}/k"])
            assert f[f"layers/{i}/k_pre_rope"].attrs["dtype"] == "float32"
            cos, sin = model.model.rotary_emb(pre[None], torch.arange(T)[None])
            _, rotated = apply_rope(pre[None], pre[None], cos, sin)
            torch.testing.assert_close(rotated[0], k, rtol=1e-5, atol=1e-5)
            assert not torch.allclose(pre, k, atol=1e-3)


class _Boom(RuntimeError):
    pass


def _fail_in_layer_1(model):
    def boom(*_):
        raise _Boom("injected failure after layer 0 was written")
    return layers(model)[1].mlp.register_forward_hook(boom)


def test_failed_capture_leaves_no_file(tmp_path):
    model = make_model("llama")
    path = tmp_path / "d.h5"
    handle = _fail_in_layer_1(model)
    with raises(_Boom, "injected"):
        capture(model, token_ids(), path)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == [], "temporary file left behind"
    assert model.config._attn_implementation == "sdpa" and hook._session is None

    path.write_bytes(b"an older dump")  # a failed capture must not damage what was there
    with raises(_Boom, "injected"):
        capture(model, token_ids(), path)
    assert path.read_bytes() == b"an older dump" and len(list(tmp_path.iterdir())) == 1
    handle.remove()
    capture(model, token_ids(), path)  # and a good one replaces it
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "kvlab-kv-dump"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]


def test_bad_input_is_rejected(tmp_path):
    model = make_model("llama")
    with raises(ValueError, r"\(T,\) or \(1, T\)"):
        capture(model, token_ids().repeat(2, 1), tmp_path / "d.h5")
    with raises(ValueError, r"\(T,\) or \(1, T\)"):
        capture(model, torch.zeros(1, 0, dtype=torch.long), tmp_path / "d.h5")
    capture(model, token_ids()[0], tmp_path / "d.h5")  # a 1-D sequence is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]


def test_transformers_without_registry_is_named(tmp_path):
    model = make_model("llama")
    module = sys.modules["transformers"]  # not always the object imported above: transformers swaps it
    saved = module.AttentionInterface
    try:
        module.AttentionInterface = None
        with raises(RuntimeError, r"transformers >= 4\.51"):
            capture(model, token_ids(), tmp_path / "d.h5")
    finally:
        module.AttentionInterface = saved
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_an_incomplete_dump(tmp_path):
    path = tmp_path / "w.h5"
    w = DumpWriter(path, model="m", num_layers=2, num_q_heads=2, num_kv_heads=1, head_dim=4, num_tokens=3,
                   rope_theta=10000.0, rope_style="halves", dtype="float32", source="test")
    for role, h in (("q", 2), ("k", 1), ("v", 1)):
        w.write(0, role, np.zeros((h, 3, 4), np.float32))
    with raises(ValueError, r"shape \(1, 3, 5\), expected \(1, 3, 4\)"):
        w.write(1, "k", np.zeros((1, 3, 5), np.float32))
    with raises(RuntimeError, r"missing /layers/1/q, /layers/1/k, /layers/1/v"):
        w.close()
    assert list(tmp_path.iterdir()) == []


def _save_tiny_checkpoint(directory):
    """A random Llama and a word-level tokenizer, saved like a hub checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                                                eos_token="</s>")
    fast.save_pretrained(directory)
    make_model("llama").save_pretrained(directory)
    return fast


def test_command_line_generates_then_captures(tmp_path):
    tok = _save_tiny_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "cli.h5"
    prompt = "w5 w9 w17 w33 w65"
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "kvlab.capture", "--model", str(tmp_path / "ckpt"), "--prompt", prompt,
           "--max-new-tokens", "4", "--out", str(out), "--device", "cpu", "--store-pre-rope"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    prompt_ids = tok(prompt).input_ids
    with h5py.File(out, "r") as f:
        ids = f["token_ids"][()]
        assert len(prompt_ids) < len(ids) <= len(prompt_ids) + 4 and list(ids[:len(prompt_ids)]) == prompt_ids
        assert f.attrs["num_tokens"] == len(ids) and f["layers/1/k_pre_rope"].shape == (2, len(ids), 16)
        assert f.attrs["source"].startswith("python3 -m kvlab.capture --model")
        assert f.attrs["text"].startswith(prompt)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
        with torch.no_grad():  # the dump is one uncached forward over the final sequence
            cache = model(torch.from_numpy(ids.astype(np.int64))[None], use_cache=True).past_key_values
        torch.testing.assert_close(read(f["layers/1/k"]), cache_kv(cache, 1)[0][0])


def test_cuda_bfloat16(tmp_path):
    if not torch.cuda.is_available():
        skip("no CUDA device")
    model = make_model("qwen3", dtype=torch.bfloat16, device="cuda")
    ids = token_ids(300).cuda()
    with torch.no_grad():
        res = model(ids, use_cache=True)
    out = capture(model, ids, tmp_path / "d.h5")
    torch.testing.assert_close(out.logits, res.logits, rtol=0, atol=0)
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert f["layers/0/k"].dtype == np.uint16 and f.attrs["num_tokens"] == 300
        for i in range(2):
            k = cache_kv(res.past_key_values, i)[0][0].cpu()
            assert torch.equal(read(f[f"layers/{i}/k"]), k.float()), f"layer {i}"


def _main(tests=None):
    """Runs the tests above (or those of the module whose globals() are given) without pytest
    (the device machine may not have it)."""
    failed = skipped = passed = 0
    for name, fn in [(n, f) for n, f in (tests or globals()).items() if n.startswith("test_") and callable(f)]:
        pname, values = getattr(fn, "kvlab_params", (None, [None]))
        for value in values:
            label = name if pname is None else f"{name}[{value}]"
            with tempfile.TemporaryDirectory() as d:
                kwargs = {"tmp_path": Path(d)} if "tmp_path" in inspect.signature(fn).parameters else {}
                if pname:
                    kwargs[pname] = value
                try:
                    fn(**kwargs)
                    passed += 1
                    print(f"PASS {label}")
                except _Skip as e:
                    skipped += 1
                    print(f"SKIP {label}: {e}")
                except Exception:
                    failed += 1
                    print(f"FAIL {label}\n{traceback.format_exc()}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped "
          f"(torch {torch.__version__}, transformers {transformers.__version__}, h5py {h5py.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
