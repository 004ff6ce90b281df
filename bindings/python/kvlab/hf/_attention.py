"""The transformers attention function "kvlab": each query sees the KV cache as the method holds
it at its step of decoding, in full-sequence forwards and in generation alike. The attention runs
on the tensors' device (a GPU keeps it there); only the method's arithmetic goes through the CPU.

The rule is core's (kvlab/decode_view.h, docs/FORMATS.md section 10), shared with ``kvlab ppl``:
query position t sees, for each key j <= t, row j of ``Method.decode_final(fp16(K), fp16(V))``
where j lies in the ranges of the cache after t+1 tokens (``decode_schedules``), and fp16(K[j])
elsewhere. A
quantized row never changes once written, so one decode_final per head serves every query. The
Hugging Face cache itself stays in full precision; the method's view is rebuilt from it."""
import torch

NAME = "kvlab"


def _causal_mask_check(mask, start, T):
    """Refuse masks other than plain causal (padding, packed sequences, sliding windows)."""
    if mask is None:
        return
    m = mask if mask.dtype == torch.bool else mask == 0
    want = torch.arange(T, device=m.device)[None, :] <= torch.arange(start, T, device=m.device)[:, None]
    if m.shape[-2:] != want.shape or not bool((m == want).all()):
        raise ValueError(f"kvlab.hf: attention mask of shape {tuple(mask.shape)} is not plain causal over "
                         f"{T} positions (padding, packed sequences or a sliding window); the simulation "
                         "counts cache positions from 0 and supports unpadded, full-attention batches only")


class _Schedules:
    """decode_schedules(T) of one method on a device, cached per (T, device) (every layer of a
    forward asks)."""

    def __init__(self, method):
        self._method, self._cache = method, {}

    def __call__(self, T, device):
        if (T, device) not in self._cache:
            self._cache = {(T, device): torch.from_numpy(self._method.decode_schedules(T)).to(device)}
        return self._cache[(T, device)]


def _blend(mask, x_hat, x16):
    """The rows every query of a block agrees on, plus a correction for the columns where their
    views differ: (base rows (b, D), varying column indices, their x_hat - x16, per-query signs)."""
    first = mask[0]
    base = torch.where(first[:, None], x_hat, x16)
    cols = (mask != first).any(0).nonzero().flatten()
    sign = mask[:, cols].float() - first[cols].float()  # +1: quantized for this query, not for the first
    return base, cols, x_hat[cols] - x16[cols], sign


def _attend_head(q, k, v, method, rows, layer, kv_head, scaling, block=128):
    """q: (G, Tq, D) float32, the query heads of this KV head; k, v: (T, D). Returns (G, Tq, D).
    Queries go in blocks of `block` positions, each against the keys up to its last position."""
    T, start, dev = k.shape[0], k.shape[0] - q.shape[1], q.device
    # The cache holds fp16 K and V (as kvlab ppl's runner): the method quantizes those (on the
    # CPU, core's bytes). One head as (1, T, D): the shape vq's codebooks ask for.
    k16, v16 = k.half().float(), v.half().float()
    k_hat, v_hat = (torch.from_numpy(x[0]).to(dev)
                    for x in method.decode_final(k16.cpu().numpy()[None], v16.cpu().numpy()[None],
                                                 layer=layer, kv_head=kv_head))
    out = torch.empty_like(q)
    positions = torch.arange(T, device=dev)
    for a in range(start, T, block):
        b = min(a + block, T)
        j, r, qs = positions[:b], rows[a:b], q[:, a - start:b - start]
        key_mask = (j >= r[:, 0:1]) & (j < r[:, 1:2])  # (queries, keys): row j quantized in step t's view
        value_mask = (j >= r[:, 2:3]) & (j < r[:, 3:4])
        kb, kc, kd, ks = _blend(key_mask, k_hat[:b], k16[:b])
        scores = qs @ kb.T
        if len(kc):
            scores[..., kc] += (qs @ kd.T) * ks
        scores = (scores * scaling).masked_fill(j[None, :] > positions[a:b, None], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        vb, vc, vd, vs = _blend(value_mask, v_hat[:b], v16[:b])
        o = p @ vb
        if len(vc):
            o += (p[..., vc] * vs) @ vd
        out[:, a - start:b - start] = o
    return out


def kvlab_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' AttentionInterface signature: query (B, Hq, Tq, D), key/value (B, Hkv, T, D)
    after RoPE and the cache update. Returns ((B, Tq, Hq, D), None)."""
    state = getattr(module, "_kvlab_sim", None)
    if state is None:
        raise RuntimeError("kvlab.hf: attention implementation 'kvlab' used outside kvlab.hf.apply_method(model, method)")
    method, schedules = state
    B, Hq, Tq, D = query.shape
    Hkv, T = key.shape[1], key.shape[2]
    _causal_mask_check(attention_mask, T - Tq, T)
    G, rows = Hq // Hkv, schedules(T, query.device)
    with torch.no_grad():
        q32 = query.detach().float()
        k32, v32 = key.detach().float().contiguous(), value.detach().float().contiguous()
        out = torch.empty((B, Hq, Tq, D), dtype=torch.float32, device=query.device)
        for b in range(B):
            for h in range(Hkv):
                out[b, h * G:(h + 1) * G] = _attend_head(q32[b, h * G:(h + 1) * G], k32[b, h], v32[b, h], method,
                                                         rows, module.layer_idx, h, scaling)
    return out.to(dtype=query.dtype).transpose(1, 2).contiguous(), None


def register():
    """Register "kvlab" in transformers' attention and mask interfaces (idempotent): the mask is
    sdpa's boolean one, so padded inputs reach kvlab_attention and are refused there."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(NAME, kvlab_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
