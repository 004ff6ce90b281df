"""python3 -m kvlab.capture --model ID_OR_DIR --prompt TEXT [--max-new-tokens N] --out DUMP.h5

With --max-new-tokens, the model first generates greedily (with its usual attention and KV
cache), then one forward pass over the whole final sequence is captured: the dump holds every
position's q, k, v from a single pass, the same numbers an uncached forward computes.
"""
import argparse
import shlex
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m kvlab.capture", description=__doc__.split("\n\n")[1])
    p.add_argument("--model", required=True, help="Hugging Face model id or local directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt text (UTF-8)")
    p.add_argument("--max-new-tokens", type=int, default=0, help="greedy tokens to generate first (default 0)")
    p.add_argument("--out", required=True, help="dump file to write (HDF5)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"],
                   help="dtype to load the weights in (default: the checkpoint's)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="implementation the capture delegates to")
    p.add_argument("--store-pre-rope", action="store_true", help="also store keys before RoPE (k_pre_rope)")
    p.add_argument("--deflate", type=int, default=1, help="gzip level 0..9 (0: uncompressed; default 1)")
    p.add_argument("--no-text", action="store_true", help="do not store the decoded text")
    args = p.parse_args(argv)
    if args.max_new_tokens < 0:
        p.error("--max-new-tokens must be >= 0")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    import torch
    import transformers
    from .hook import capture

    prompt = args.prompt if args.prompt is not None else open(args.prompt_file, encoding="utf-8").read()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype if args.dtype == "auto" else getattr(torch, args.dtype)
    # transformers 4.56 renamed torch_dtype to dtype
    dtype_key = "dtype" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56) else "torch_dtype"
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, attn_implementation=args.attn, **{dtype_key: dtype}).to(device).eval()
    ids = tok(prompt, return_tensors="pt").input_ids.to(device)
    if args.max_new_tokens:
        with torch.no_grad():
            ids = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                 do_sample=False, pad_token_id=tok.pad_token_id or tok.eos_token_id)
    text = None if args.no_text else tok.decode(ids[0])
    capture(model, ids, args.out, store_pre_rope=args.store_pre_rope, text=text, model_name=args.model,
            deflate=args.deflate, source="python3 -m kvlab.capture " + shlex.join(argv))
    print(f"{args.out}: {model.config.num_hidden_layers} layers, {ids.shape[1]} tokens, {model.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
