"""The measured figures of the reference model as Markdown, for its README (between the markers
'<!-- measured:begin -->' and '<!-- measured:end -->', which analyze_reference_model.py rewrites)."""

from .files import write_text

BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"


def measured_markdown(info, a):
    r, hp, tk = info["results"], info["hyperparameters"], info["tokens"]
    w = info["wall_s"]
    lines = [
        f"Training run: `{info['command']}` on {info['versions']['device']}, torch {info['versions']['torch']}, "
        f"transformers {info['versions']['transformers']}, tokenizers {info['versions']['tokenizers']}.",
        "",
        "| | |", "|---|---|",
        f"| steps | {r['steps_done']} of {hp['steps']}" + (" (STOPPED EARLY by --time-limit-s)" if r["stopped_early"] else "") + " |",
        f"| tokens | {tk['train']:,} training, {tk['heldout']:,} held out; {tk['train_characters_per_token']:.2f} characters per token |",
        f"| seen | {tk['seen']:,} tokens = {tk['epochs']:.2f} epochs |",
        f"| wall | {w['total']:.0f} s in all: tokenizer {w['tokenizer']:.0f} s, encoding {w['encode']:.0f} s, "
        f"training {w['train']:.0f} s ({tk['seen'] / w['train'] / 1e3:.0f}k tokens/s), final evaluation {w['final_eval']:.0f} s |",
        f"| training loss | {r['train_loss']:.4f} nats ({r['train_loss_windows']} training windows, eval mode) |",
        f"| held-out loss | {r['heldout_loss']:.4f} nats, perplexity {r['heldout_perplexity']:.2f} "
        f"({r['heldout_windows']} windows, {r['heldout_targets']:,} targets, all of the held-out books) |",
        f"| unigram baseline | {r['unigram_heldout_loss']:.4f} nats, perplexity {r['unigram_heldout_perplexity']:.1f} "
        f"(training books' token frequencies, add-one smoothing, same targets) |",
        f"| held-out on the CPU | {a['heldout_cpu']['loss']:.4f} nats, perplexity {a['heldout_cpu']['perplexity']:.2f} "
        f"({a['heldout_cpu']['windows']} windows of heldout.txt, the fp16 file computed in fp32) |",
        f"| tokenizer | format contract {'kept' if not a['tokenizer']['layout_errors'] else 'BROKEN: ' + '; '.join(a['tokenizer']['layout_errors'])}; "
        f"AutoTokenizer ids {'=' if a['tokenizer']['autotokenizer_same_ids_on_heldout_txt'] else '!='} tokenizers ids on heldout.txt; "
        f"decode round-trips heldout.txt: {a['tokenizer']['decode_round_trip_heldout_txt']} |",
        "",
        "![loss curve](loss_curve.svg)",
        "",
    ]
    s = a["attention_sink"]
    lines += [f"**Attention sink** (eager attention; mean weight that queries at positions >= {a['sink_first_query']} "
              f"give to token 0, `<s>`; uniform attention would give {s['uniform_attention_would_give']:.4f}):", "",
              "| layer | mean over heads | lowest head | highest head |", "|---|---|---|---|"]
    for i, m in enumerate(s["per_layer_mean"]):
        lines.append(f"| {i} | {m:.3f} | {s['per_layer_head_min'][i]:.3f} | {s['per_layer_head_max'][i]:.3f} |")
    lines += ["", sink_summary(s)]
    ind = a["induction"]
    lines += ["", "**Induction** (mean loss on the second copy of a span in `<s> S S` against the first copy):", "",
              "| span | first copy | second copy |", "|---|---|---|"]
    for name, label in (("random_tokens", "random learned pieces"), ("heldout_text", "held-out text")):
        x = ind[name]
        lines.append(f"| {label}: {x['spans']} x {x['span']} tokens | {x['first_copy_loss']:.3f} | {x['second_copy_loss']:.3f} |")
    lines += ["", induction_summary(ind["random_tokens"])]
    lines += ["", f"**Key channels** (per layer and KV head, over {a['heldout_cpu']['windows']} x {a['heldout_cpu']['context']} "
              f"held-out tokens: the largest channels by mean |k| as multiples of the head's median channel; outliers: "
              f">= {a['outlier_factor']:g} x median, as `kvlab info` counts them; channels c and c+{info['hyperparameters']['head_dim'] // 2} "
              f"form RoPE pair c, higher pairs turn slower):", "",
              "| layer | head | k after RoPE: top channels (x median) | outliers | k before RoPE: top channels | values: top channel |",
              "|---|---|---|---|---|---|"]
    for k, kp, v in zip(a["key_channels"], a["key_channels_pre_rope"], a["value_channels"]):
        lines.append(f"| {k['layer']} | {k['head']} | {top(k)} | {len(k['outliers'])} | {top(kp)} | "
                     f"{v['top_channels'][0]} ({v['top_ratio'][0]:.1f}x) |")
    lines += ["", outlier_summary(a["key_channels"], "keys after RoPE", a["outlier_factor"]),
              outlier_summary(a["key_channels_pre_rope"], "keys before RoPE", a["outlier_factor"]),
              outlier_summary(a["value_channels"], "values", a["outlier_factor"])]
    return "\n".join(lines) + "\n"


SINK_FACTOR = 5.0  # a layer "has a sink" when token 0 draws 5x what uniform attention gives it


def sink_summary(s):
    uniform = s["uniform_attention_would_give"]
    has = [i for i, m in enumerate(s["per_layer_mean"]) if m >= SINK_FACTOR * uniform]
    lacks = [i for i in range(len(s["per_layer_mean"])) if i not in has]
    return (f"Token 0 draws at least {SINK_FACTOR:g}x the uniform share in layers: {layer_list(has)}; "
            f"less in layers: {layer_list(lacks)}.")


def layer_list(layers):
    return ", ".join(map(str, layers)) if layers else "none"


def induction_summary(x):
    first, second = x["first_copy_loss"], x["second_copy_loss"]
    verdict = "The model copies (induction)" if first - second > 0.5 else "No clear induction"
    return f"{verdict}: on random spans the second copy costs {second:.2f} nats per token, the first {first:.2f}."


def outlier_summary(rows, what, factor):
    with_outliers = [r for r in rows if r["outliers"]]
    big = max(rows, key=lambda r: r["top_ratio"][0])
    return (f"{what[0].upper() + what[1:]}: {len(with_outliers)} of {len(rows)} (layer, KV head) pairs have channels at "
            f">= {factor:g}x their median ({sum(len(r['outliers']) for r in rows)} channels in all); the largest "
            f"is {big['top_ratio'][0]:.1f}x (layer {big['layer']}, head {big['head']}, channel {big['top_channels'][0]}).")


def top(row, n=3):
    return ", ".join(f"{c} ({x:.1f}x)" for c, x in zip(row["top_channels"][:n], row["top_ratio"][:n]))


def replace_measured(path, markdown):
    text = path.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"error: {path} needs one '{BEGIN}' line followed by one '{END}' line")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    write_text(path, f"{head}{BEGIN}\n{markdown}{END}{tail}")
