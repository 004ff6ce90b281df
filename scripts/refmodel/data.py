"""Token streams and the windows the model trains and evaluates on. A stream is the books' ids
joined with </s> between books; a window is <s> followed by `context - 1` consecutive stream ids,
so every window starts the way a prompt does (the runner prepends <s>)."""
import numpy as np

from .tokenizer import BOS, EOS


def stream(tok, texts):
    """One int32 array: each text's ids (without <s>) followed by </s>."""
    encoded = tok.encode_batch(list(texts), add_special_tokens=False)
    return np.concatenate([np.append(np.asarray(e.ids, np.int32), EOS) for e in encoded]).astype(np.int32)


def window_starts(n_tokens, context, offset=0):
    """Starts of the non-overlapping windows of `context - 1` stream ids beginning at `offset`."""
    span = context - 1
    return np.arange(offset, n_tokens - span + 1, span, dtype=np.int64)


def training_order(n_tokens, context, batch, steps, seed):
    """(steps, batch) window starts: epoch after epoch, each with a seeded offset into the stream
    (so window borders move) and a seeded shuffle; nothing depends on anything but the arguments."""
    rng = np.random.default_rng(seed)
    starts = []
    need = steps * batch
    while sum(len(s) for s in starts) < need:
        epoch = window_starts(n_tokens, context, int(rng.integers(0, context - 1)))
        if len(epoch) == 0:
            raise ValueError(f"the training stream ({n_tokens} tokens) is shorter than one window of {context}")
        starts.append(rng.permutation(epoch))
    return np.concatenate(starts)[:need].reshape(steps, batch)


def windows(tokens, starts, context):
    """(len(starts), context) int64 array: <s> then the stream ids at each start."""
    idx = np.asarray(starts)[:, None] + np.arange(context - 1)[None, :]
    out = np.empty((len(starts), context), np.int64)
    out[:, 0] = BOS
    out[:, 1:] = tokens[idx]
    return out
