"""Hyper-parameters of the reference model's training: the full run (one H100, under 9 minutes in
all) and the smoke run (a CPU, under 2 minutes). Every field can be overridden on the command line
and all of them are written to train_info.json."""
import argparse

FULL = dict(
    # model (transformers.LlamaConfig)
    vocab=8192, hidden=512, layers=6, heads=4, kv_heads=2, head_dim=128, intermediate=1024,
    context=2048, rope_theta=10000.0, rms_norm_eps=1e-5, tie_embeddings=True, init_std=0.02,
    # optimisation (AdamW, linear warm-up then cosine down to min_lr_ratio * lr)
    steps=1200, batch=32, lr=1e-3, min_lr_ratio=0.1, warmup=100, weight_decay=0.1,
    beta1=0.9, beta2=0.95, grad_clip=1.0,
    # data: held-out books, the smallest `max_books` books only when set (smoke)
    heldout_books=5, heldout_min_chars=150_000, heldout_max_chars=1_300_000, max_books=0,
    tokenizer_min_frequency=2, tokenizer_limit_alphabet=256,
    # evaluation and output
    eval_every=100, eval_windows=64, final_train_windows=256, heldout_txt_tokens=10 * 2048,
    log_every=20,
    # a guard, not a schedule: training stops early (and says so) past this many seconds of wall
    time_limit_s=500,
)

SMOKE = dict(
    FULL, vocab=640, hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=128,
    context=128, steps=20, batch=8, lr=3e-3, warmup=4, heldout_books=1, heldout_min_chars=0,
    max_books=5, eval_every=10, eval_windows=4, final_train_windows=8, heldout_txt_tokens=4 * 128,
    log_every=5, time_limit_s=100,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train kvlab's reference model (data/kvlab-ref-18m/README.md).")
    p.add_argument("--corpus", required=True, help="the books: a .tar.xz of .txt files or a folder of them")
    p.add_argument("--out", required=True, help="output folder (a Hugging Face model directory); must not exist")
    p.add_argument("--name", default="kvlab-ref-18m", help="model name written into train_info.json")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--smoke", action="store_true", help="tiny model, few books, few steps (a CPU test)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    for key, value in FULL.items():
        if isinstance(value, bool):
            p.add_argument(flag(key), type=parse_bool, default=None, metavar="BOOL")
        else:
            p.add_argument(flag(key), type=type(value), default=None)
    args = p.parse_args(argv)
    hp = dict(SMOKE if args.smoke else FULL)
    hp.update({k: getattr(args, k) for k in FULL if getattr(args, k) is not None})
    check(hp)
    return args, hp


def parse_bool(text):
    if text.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true/false")
    return text.lower() in ("true", "1")


def flag(key):
    return "--" + key.replace("_", "-")


def check(hp):
    may_be_zero = ("max_books", "heldout_min_chars", "weight_decay", "min_lr_ratio", "grad_clip", "warmup")
    bad = [k for k, v in hp.items() if not isinstance(v, bool) and k not in may_be_zero and v <= 0]
    if bad:
        raise SystemExit("error: these must be > 0: " + ", ".join(f"{flag(k)} {hp[k]}" for k in bad))
    if hp["heads"] % hp["kv_heads"]:
        raise SystemExit(f"error: --heads {hp['heads']} is not a multiple of --kv-heads {hp['kv_heads']}")
    if hp["head_dim"] % 2:
        raise SystemExit(f"error: --head-dim {hp['head_dim']} must be even (RoPE rotates pairs)")
    if hp["warmup"] >= hp["steps"]:
        raise SystemExit(f"error: --warmup {hp['warmup']} must be below --steps {hp['steps']}")
