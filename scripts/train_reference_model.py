#!/usr/bin/env python3
"""Train kvlab's reference model: a small Llama (transformers' LlamaForCausalLM) with head_dim 128
and GQA, on public-domain books, with a BPE tokenizer trained on the training books. Writes a
Hugging Face model directory (data/kvlab-ref-18m/README.md says what is in it and how it was made).

    train_reference_model.py --corpus gutenberg-en.tar.xz --out data/kvlab-ref-18m   # one H100, < 9 min
    train_reference_model.py --corpus gutenberg-en.tar.xz --out /tmp/smoke --smoke    # a CPU, < 2 min
"""
import hashlib
import platform
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refmodel import corpus, data  # noqa: E402
from refmodel import tokenizer as toklib  # noqa: E402
from refmodel.config import parse_args  # noqa: E402
from refmodel.files import write_json, write_text  # noqa: E402

DETERMINISM = (
    "Bit-identical for a given seed on any machine with the same library versions: the book split, the "
    "tokenizer (its alphabet is chosen by refmodel/tokenizer.py, since tokenizers' limit_alphabet breaks ties "
    "in hash-map order; the merges are deterministic; tests/python/test_reference_model.py trains twice), the token "
    "streams, the order of training windows (numpy's PCG64) and the initial weights (drawn on the CPU). "
    "Not bit-reproducible on a GPU: the training arithmetic itself; the flash-attention backward and the "
    "embedding backward accumulate with atomics, so two runs drift apart in the last bits and the final "
    "losses differ slightly (the amount was not measured).")


def main(argv=None):
    t0 = time.time()
    args, hp = parse_args(argv)
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"error: --out {out} exists; give a new folder")
    lines = []

    def log(msg):
        line = f"[{time.time() - t0:6.1f} s] {msg}"
        print(line, flush=True)
        lines.append(line)

    # Books and their split.
    raw, sha16 = corpus.read_raw_books(args.corpus)
    books, languages = {}, {}
    for name, text in raw.items():
        books[name], languages[name] = corpus.strip_gutenberg(name, text)
    if hp["max_books"]:
        keep = sorted(books, key=lambda n: (len(books[n]), n))[:hp["max_books"]]
        books = {n: books[n] for n in keep}
    train_names, heldout_names = corpus.split_books(books, languages, hp["heldout_books"], args.seed,
                                                    hp["heldout_min_chars"], hp["heldout_max_chars"])
    log(f"{len(books)} books, {sum(map(len, books.values())) / 1e6:.1f} M characters; held out: {', '.join(heldout_names)}")

    import numpy as np
    import tokenizers
    import torch
    import transformers
    from refmodel import trainer
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    # Tokenizer, trained on the training books only.
    t = time.time()
    tok = toklib.train_tokenizer((books[n] for n in train_names), hp["vocab"],
                                 hp["tokenizer_limit_alphabet"], hp["tokenizer_min_frequency"])
    errors = toklib.layout_errors(tok)
    if errors:
        raise RuntimeError("tokenizer breaks the format contract: " + "; ".join(errors))
    time_tokenizer = time.time() - t
    log(f"tokenizer: {tok.get_vocab_size()} ids, trained in {time_tokenizer:.1f} s")

    t = time.time()
    train_tokens = data.stream(tok, [books[n] for n in train_names])
    heldout_tokens = data.stream(tok, [books[n] for n in heldout_names])
    time_encode = time.time() - t
    train_chars = sum(len(books[n]) for n in train_names)
    log(f"tokens: {len(train_tokens)} training ({train_chars / len(train_tokens):.2f} characters/token), "
        f"{len(heldout_tokens)} held out; encoded in {time_encode:.1f} s")

    excerpt = heldout_excerpt(tok, books, heldout_names, hp["heldout_txt_tokens"])

    # Windows: the training order, and fixed evaluation sets.
    ctx = hp["context"]
    order = data.training_order(len(train_tokens), ctx, hp["batch"], hp["steps"], args.seed)
    heldout_starts = data.window_starts(len(heldout_tokens), ctx)
    if len(heldout_starts) == 0:
        raise SystemExit(f"error: the held-out books hold {len(heldout_tokens)} tokens, less than one window of {ctx}")
    rng = np.random.default_rng(args.seed + 1)
    all_train_starts = data.window_starts(len(train_tokens), ctx)
    train_eval_starts = np.sort(rng.choice(all_train_starts, min(hp["final_train_windows"], len(all_train_starts)),
                                           replace=False))
    evals = {"heldout": (heldout_tokens, spread(heldout_starts, hp["eval_windows"])),
             "train_eval": (train_tokens, spread(train_eval_starts, hp["eval_windows"]))}
    epochs = hp["steps"] * hp["batch"] * (ctx - 1) / len(train_tokens)
    log(f"{hp['steps']} steps x {hp['batch']} windows of {ctx} = {epochs:.2f} epochs; device {device_name(device, torch)}")

    # Model and training.
    model = trainer.build_model(hp, tok.get_vocab_size(), args.seed).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters ({'tied' if hp['tie_embeddings'] else 'untied'} embeddings)")
    t = time.time()
    rows, steps_done, stopped = trainer.train(model, train_tokens, order, evals, hp, device, log,
                                              deadline=t0 + hp["time_limit_s"])
    time_train = time.time() - t

    # Final evaluation: every held-out window, a fixed sample of training windows, a unigram baseline.
    t = time.time()
    final_heldout = trainer.evaluate(model, heldout_tokens, heldout_starts, hp, device)
    final_train = trainer.evaluate(model, train_tokens, train_eval_starts, hp, device)
    unigram = unigram_loss(train_tokens, heldout_tokens, heldout_starts, ctx, tok.get_vocab_size())
    time_eval = time.time() - t
    log(f"final: train {final_train:.4f}, held-out {final_heldout:.4f} (perplexity {np.exp(final_heldout):.2f}); "
        f"unigram baseline {unigram:.4f} (perplexity {np.exp(unigram):.1f})")

    # The model directory, written under a temporary name and renamed.
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.to(torch.float16).save_pretrained(tmp)
    transformers.GenerationConfig(bos_token_id=toklib.BOS, eos_token_id=toklib.EOS,
                                  max_length=ctx).save_pretrained(tmp)
    toklib.save_tokenizer(tok, tmp, ctx)
    write_text(tmp / "heldout.txt", excerpt.pop("text"))
    write_text(tmp / "loss_curve.csv", curve_csv(rows))
    info = {
        "name": args.name,
        "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
        "seed": args.seed,
        "smoke": args.smoke,
        "hyperparameters": hp,
        "split": {
            "rule": "held out: random.Random(seed).sample of the eligible books sorted by name; eligible: "
                    "header 'Language: English', the only edition of its work in the corpus, heldout_min_chars.."
                    "heldout_max_chars characters after stripping the Project Gutenberg header and licence",
            "heldout": heldout_names,
            "train": train_names,
            "file_sha256_16": {n: sha16[n] for n in sorted(books)},
        },
        "tokens": {"train": int(len(train_tokens)), "heldout": int(len(heldout_tokens)),
                   "train_characters_per_token": train_chars / len(train_tokens),
                   "seen": steps_done * hp["batch"] * ctx, "targets_seen": steps_done * hp["batch"] * (ctx - 1),
                   "epochs": steps_done * hp["batch"] * (ctx - 1) / len(train_tokens)},
        "model": {"parameters": n_params, "embeddings": "tied" if hp["tie_embeddings"] else "untied",
                  "saved_dtype": "float16", "trained_dtype": "float32 weights, bf16 autocast" if device.type == "cuda"
                  else "float32"},
        "results": {"steps_done": steps_done, "stopped_early": stopped,
                    "train_loss": final_train, "train_loss_windows": len(train_eval_starts),
                    "heldout_loss": final_heldout, "heldout_perplexity": float(np.exp(final_heldout)),
                    "heldout_windows": len(heldout_starts), "heldout_targets": len(heldout_starts) * (ctx - 1),
                    "unigram_heldout_loss": unigram, "unigram_heldout_perplexity": float(np.exp(unigram))},
        "heldout_txt": excerpt,
        "model_safetensors_sha256": hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest(),
        "determinism": DETERMINISM,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "numpy": np.__version__, "cuda": torch.version.cuda, "device": device_name(device, torch)},
        "wall_s": {"tokenizer": time_tokenizer, "encode": time_encode, "train": time_train, "final_eval": time_eval,
                   "total": time.time() - t0},
        "log": lines,
    }
    write_json(tmp / "train_info.json", info)
    tmp.rename(out)
    log(f"wrote {out}/ in {time.time() - t0:.0f} s" + (" (STOPPED EARLY: see train_info.json)" if stopped else ""))


def spread(starts, n):
    """n of the starts, evenly spaced (all when there are fewer)."""
    import numpy as np
    if len(starts) <= n:
        return starts
    return starts[np.linspace(0, len(starts) - 1, n).round().astype(int)]


def heldout_excerpt(tok, books, heldout_names, want_tokens):
    """heldout.txt: whole paragraphs of the longest held-out book, from the first paragraph break past
    a quarter of it, until the text encodes to at least `want_tokens` ids (with <s>)."""
    name = max(heldout_names, key=lambda n: (len(books[n]), n))
    body = books[name]
    start = body.find("\n\n", len(body) // 4)
    start = 0 if start < 0 else start + 2
    enc = tok.encode(body[start:], add_special_tokens=False)
    if len(enc.ids) + 1 < want_tokens:
        raise SystemExit(f"error: held-out book {name} has {len(enc.ids)} tokens past its first quarter, "
                         f"fewer than --heldout-txt-tokens {want_tokens}")
    end = body.find("\n\n", start + enc.offsets[want_tokens - 1][1])
    end = len(body) if end < 0 else end
    text = body[start:end]
    return {"text": text, "book": name, "char_offset": start, "chars": len(text),
            "bytes": len(text.encode()), "tokens_with_bos": len(tok.encode(text).ids),
            "offset_of": "the book's text after stripping the Project Gutenberg header (train_info.split.rule)"}


def unigram_loss(train_tokens, heldout_tokens, starts, ctx, vocab):
    """Cross-entropy (nats) of the held-out targets the model is scored on, under the training
    books' token frequencies with add-one smoothing."""
    import numpy as np
    counts = np.bincount(train_tokens, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    targets = heldout_tokens[np.asarray(starts)[:, None] + np.arange(ctx - 1)[None, :]]
    return float(-logp[targets].mean())


def curve_csv(rows):
    cols = ["step", "tokens", "lr", "train_loss", "heldout_loss", "train_eval_loss"]
    out = [",".join(cols)]
    for r in rows:
        out.append(",".join("" if c not in r else (f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c])) for c in cols))
    return "\n".join(out) + "\n"


def device_name(device, torch):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads, {platform.machine()})"


if __name__ == "__main__":
    try:
        main()
    except corpus.CorpusError as e:
        raise SystemExit(f"error: {e}")
