#!/usr/bin/env python3
"""Measure the reference model that scripts/train_reference_model.py wrote, on the CPU: held-out
loss and perplexity against the unigram baseline, attention-sink mass per layer, an induction
check, key (and value) outlier channels per layer and KV head, and the loss curve as an SVG.

    /work/venv-hf/bin/python scripts/analyze_reference_model.py data/kvlab-ref-18m [--write-readme]

Writes MODEL_DIR/analysis.json and MODEL_DIR/loss_curve.svg; --write-readme replaces the part of
MODEL_DIR/README.md between '<!-- measured:begin -->' and '<!-- measured:end -->' with the figures.
"""
import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refmodel import tokenizer as toklib  # noqa: E402
from refmodel.files import write_json, write_text  # noqa: E402
from refmodel.report import measured_markdown, replace_measured  # noqa: E402
from refmodel.svg import line_chart  # noqa: E402

OUTLIER_FACTOR = 4.0  # as `kvlab info`: channel mean |k| >= 4 x the head's median channel
SINK_FIRST_QUERY = 16  # sink mass over queries at positions >= 16, where a uniform spread is small


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--windows", type=int, default=2, help="held-out windows of the training context to measure on")
    p.add_argument("--induction-len", type=int, default=256, help="length of the repeated span")
    p.add_argument("--induction-seqs", type=int, default=4, help="random spans averaged in the induction check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-readme", action="store_true")
    args = p.parse_args(argv)
    d = Path(args.model_dir)
    need = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "train_info.json",
            "loss_curve.csv", "heldout.txt"]
    missing = [n for n in need if not (d / n).is_file()]
    if missing:
        raise SystemExit(f"error: {d} lacks {', '.join(missing)} (not a folder train_reference_model.py wrote?)")
    if args.windows < 1 or args.induction_len < 2 or args.induction_seqs < 1:
        raise SystemExit("error: --windows, --induction-seqs must be >= 1 and --induction-len >= 2")

    import numpy as np
    import tokenizers
    import torch
    import transformers

    transformers.logging.set_verbosity_error()  # heldout.txt is longer than the context on purpose
    t0 = time.time()
    info = json.loads((d / "train_info.json").read_text())
    text = (d / "heldout.txt").read_text(encoding="utf-8")
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(d))
    ids = tok.encode(text).ids
    tokenizer_check = {"layout_errors": toklib.layout_errors(tok),
                       "autotokenizer_same_ids_on_heldout_txt": auto(text)["input_ids"] == ids,
                       "decode_round_trip_heldout_txt": tok.decode(ids) == text}

    model = transformers.AutoModelForCausalLM.from_pretrained(str(d), attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    cfg = model.config
    ctx = info["hyperparameters"]["context"]
    span = ctx - 1
    if len(ids) - 1 < args.windows * span:
        raise SystemExit(f"error: {d / 'heldout.txt'} encodes to {len(ids)} tokens, fewer than --windows "
                         f"{args.windows} x {span} + <s>")
    windows = [[toklib.BOS] + ids[1 + i * span:1 + (i + 1) * span] for i in range(args.windows)]

    stats = measure_windows(model, windows, torch, np)
    induction = {"random_tokens": induction_check(model, random_spans(args, cfg.vocab_size, np), torch),
                 "heldout_text": induction_check(model, [ids[1:1 + args.induction_len]], torch)}
    analysis = {
        "model_dir": str(d), "tokenizer": tokenizer_check,
        "heldout_cpu": {"windows": args.windows, "context": ctx, "loss": stats["loss"],
                        "perplexity": math.exp(stats["loss"]), "weights": "fp16 file, computed in fp32"},
        "attention_sink": stats["sink"], "induction": induction,
        "key_channels": stats["k"], "key_channels_pre_rope": stats["k_pre_rope"], "value_channels": stats["v"],
        "outlier_factor": OUTLIER_FACTOR, "sink_first_query": SINK_FIRST_QUERY,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "wall_s": time.time() - t0,
    }
    write_json(d / "analysis.json", analysis)
    write_text(d / "loss_curve.svg", loss_svg(d / "loss_curve.csv", info))
    md = measured_markdown(info, analysis)
    print(md)
    if args.write_readme:
        replace_measured(d / "README.md", md)
    print(f"wrote {d / 'analysis.json'}, {d / 'loss_curve.svg'}" + (f", {d / 'README.md'}" if args.write_readme else "")
          + f" in {time.time() - t0:.0f} s")


def measure_windows(model, windows, torch, np):
    """Loss, sink mass per layer, and per-channel mean |x| of keys after RoPE (the cache's), keys
    before RoPE (k_proj's output) and values, over every token of every window."""
    cfg = model.config
    L, Hkv, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    sums = {r: np.zeros((L, Hkv, D)) for r in ("k", "k_pre_rope", "v")}
    sink = np.zeros((L, cfg.num_attention_heads))
    pre = {}
    hooks = [layer.self_attn.k_proj.register_forward_hook(
        lambda m, i, o, li=li: pre.__setitem__(li, o.detach())) for li, layer in enumerate(model.model.layers)]
    total_loss, count = 0.0, 0
    try:
        for w in windows:
            x = torch.tensor([w])
            with torch.no_grad():
                out = model(input_ids=x, output_attentions=True, use_cache=True)
            logp = torch.log_softmax(out.logits[0, :-1].float(), -1)
            total_loss -= logp.gather(1, x[0, 1:, None]).sum().item()
            count += x.shape[1] - 1
            for li in range(L):
                a = out.attentions[li][0]  # (heads, T, T)
                sink[li] += a[:, SINK_FIRST_QUERY:, 0].mean(-1).double().numpy()
                k, v = cache_kv(out.past_key_values, li)
                sums["k"][li] += k[0].abs().sum(1).double().numpy()
                sums["v"][li] += v[0].abs().sum(1).double().numpy()
                kp = pre[li][0].view(x.shape[1], Hkv, D).transpose(0, 1)
                sums["k_pre_rope"][li] += kp.abs().sum(1).double().numpy()
    finally:
        for h in hooks:
            h.remove()
    tokens = sum(len(w) for w in windows)
    T = len(windows[0])
    uniform = float(np.mean([1.0 / (q + 1) for q in range(SINK_FIRST_QUERY, T)]))
    sink /= len(windows)
    return {
        "loss": total_loss / count,
        "sink": {"per_layer_mean": sink.mean(1).tolist(), "per_layer_head_min": sink.min(1).tolist(),
                 "per_layer_head_max": sink.max(1).tolist(), "uniform_attention_would_give": uniform},
        **{r: channel_table(s / tokens) for r, s in sums.items()},
    }


def channel_table(mean_abs):
    """Per layer and KV head: the largest channels by mean |x|, their ratio to the median channel,
    and the outlier channels (>= OUTLIER_FACTOR x median), as `kvlab info` reports them."""
    import numpy as np
    rows = []
    for li, layer in enumerate(mean_abs):
        for h, ch in enumerate(layer):
            med = float(np.median(ch))
            order = np.argsort(-ch, kind="stable")
            rows.append({"layer": li, "head": h, "median": med, "mean": float(ch.mean()),
                         "top_channels": order[:4].tolist(), "top_ratio": [float(ch[c] / med) for c in order[:4]],
                         "outliers": [int(c) for c in np.flatnonzero(ch >= OUTLIER_FACTOR * med)]})
    return rows


def cache_kv(cache, i):
    """Keys (after RoPE) and values of layer i from a forward's past_key_values."""
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]


def random_spans(args, vocab, np):
    """Spans of learned pieces (no specials, no byte tokens) drawn uniformly with a seeded generator."""
    rng = np.random.default_rng(args.seed)
    return [rng.integers(toklib.FIRST_PIECE, vocab, args.induction_len).tolist() for _ in range(args.induction_seqs)]


def induction_check(model, spans, torch):
    """Mean loss on the second copy of each span in <s> S S against the first copy (both without
    each copy's first token, which nothing can predict)."""
    first = second = 0.0
    for s in spans:
        n = len(s)
        x = torch.tensor([[toklib.BOS] + s + s])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), -1)
        nll = -logp.gather(1, x[0, 1:, None])[:, 0]  # nll[i] predicts x[i + 1]
        first += nll[1:n].mean().item()
        second += nll[n + 1:2 * n].mean().item()
    return {"span": len(spans[0]), "spans": len(spans), "first_copy_loss": first / len(spans),
            "second_copy_loss": second / len(spans)}


def loss_svg(path, info):
    rows = list(csv.DictReader(path.open()))

    def col(name):
        return [(int(r["step"]), float(r[name])) for r in rows if r.get(name)]

    unigram = info["results"]["unigram_heldout_loss"]
    steps = [int(r["step"]) for r in rows]
    series = [("training batches", col("train_loss"), False), ("held-out books", col("heldout_loss"), False),
              ("training windows (eval)", col("train_eval_loss"), False),
              ("unigram baseline (held-out)", [(0, unigram), (max(steps), unigram)], True)]
    title = f"{info['name']}: next-token loss (nats) against step"
    return line_chart([s for s in series if s[1]], title, "step", "loss (nats)")


if __name__ == "__main__":
    main()
