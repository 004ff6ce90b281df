"""The tokenizer, trained with Hugging Face `tokenizers`, in the layout the C++ runner reads
(data/kvlab-ref-18m/README.md, "Tokenizer"): BPE with byte fallback; ids 0 <unk>, 1 <s>, 2 </s>,
3..258 the byte tokens <0x00>..<0xFF>, then the learned pieces; no normalizer; a Metaspace
pre-tokenizer; a post-processor that prepends <s>; Llama's decoder."""
import json
from collections import Counter
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from .files import write_json

SPECIALS = ["<unk>", "<s>", "</s>"]
UNK, BOS, EOS = 0, 1, 2
BYTES = [f"<0x{b:02X}>" for b in range(256)]
FIRST_PIECE = len(SPECIALS) + len(BYTES)  # 259


def metaspace():
    return pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)


def alphabet(texts, limit):
    """The `limit` most frequent characters (spaces counted as the Metaspace mark), ties broken by
    code point. tokenizers' own limit_alphabet breaks ties in hash-map order, which changes from
    run to run, so the trainer gets this list instead."""
    counts = Counter()
    for t in texts:
        counts.update(t)
    counts["\u2581"] += counts.pop(" ", 0)
    return sorted(counts, key=lambda c: (-counts[c], c))[:limit]


def train_tokenizer(texts, vocab_size, limit_alphabet=256, min_frequency=2):
    """Train on `texts` (strings) and return a Tokenizer of exactly `vocab_size` ids, or fewer when
    the texts hold fewer merges. The same texts give the same tokenizer.json."""
    if vocab_size <= FIRST_PIECE + 1:
        raise ValueError(f"--vocab {vocab_size}: must exceed {FIRST_PIECE + 1} (3 specials, 256 bytes, pieces)")
    texts = list(texts)
    chars = alphabet(texts, limit_alphabet)
    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    bpe.pre_tokenizer = metaspace()
    # Characters of initial_alphabet count as infinitely frequent, so limit_alphabet keeps exactly them.
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(BYTES), special_tokens=SPECIALS,
                                  initial_alphabet=chars, limit_alphabet=len(chars),
                                  min_frequency=min_frequency, show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)
    spec = json.loads(bpe.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    if [p for p, _ in learned[:3]] != SPECIALS:
        raise RuntimeError(f"tokenizers put {learned[:3]} first, expected {SPECIALS}")
    vocab = {p: i for i, p in enumerate(SPECIALS + BYTES)}
    for piece, _ in learned[3:]:
        if piece in vocab:
            raise RuntimeError(f"learned piece {piece!r} collides with a byte token")
        vocab[piece] = len(vocab)
    spec["model"]["vocab"] = vocab
    spec["model"].update(dropout=None, continuing_subword_prefix=None, end_of_word_suffix=None)
    spec["normalizer"] = None
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", BOS)])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def tokenizer_config(max_length):
    """tokenizer_config.json: AutoTokenizer loads tokenizer.json as it is (no class of its own)."""
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "model_max_length": max_length, "clean_up_tokenization_spaces": False}


def save_tokenizer(tok, directory, max_length):
    directory = Path(directory)
    tmp = directory / "tokenizer.json.tmp"
    tok.save(str(tmp))
    tmp.replace(directory / "tokenizer.json")
    write_json(directory / "tokenizer_config.json", tokenizer_config(max_length))


def layout_errors(tok):
    """What in `tok` breaks the format contract (an empty list when nothing does)."""
    errors = []
    spec = json.loads(tok.to_str())
    model = spec["model"]
    want_ids = {p: i for i, p in enumerate(SPECIALS + BYTES)}
    for piece, want in want_ids.items():
        if model["vocab"].get(piece) != want:
            errors.append(f"{piece} has id {model['vocab'].get(piece)}, not {want}")
    if model["type"] != "BPE" or not model["byte_fallback"] or model["dropout"] or model["continuing_subword_prefix"]:
        errors.append(f"model must be BPE, byte_fallback, no dropout/prefix: {({k: v for k, v in model.items() if k not in ('vocab', 'merges')})}")
    if spec["normalizer"] is not None:
        errors.append(f"normalizer must be none: {spec['normalizer']}")
    pre = spec["pre_tokenizer"]
    if (pre or {}).get("type") != "Metaspace" or pre["replacement"] != "\u2581" or pre["prepend_scheme"] != "first" or not pre["split"]:
        errors.append(f"pre_tokenizer must be Metaspace(\u2581, first, split): {pre}")
    if tok.encode("a").ids[:1] != [BOS]:
        errors.append("encode does not prepend <s>")
    return errors
