"""The transformers attention function "kvlab": each query sees the KV cache as the method holds
it at its step of decoding, in full-sequence forwards and in generation alike. The attention runs
on the tensors' device (a GPU keeps it there); the method's quantize -> dequantize runs on kvlab's
GPU kernels when the model is on a CUDA device and the build has them (the same bytes as the CPU),
else on the CPU.

The rule is core's (kvlab/decode_view.h, docs/FORMATS.md section 12), shared with ``kvlab ppl``:
query position t sees, for each key j <= t, row j of ``Method.decode_final(fp16(K), fp16(V))``
where j lies in the ranges of the cache after t+1 tokens (``decode_schedules``), and fp16(K[j])
elsewhere. Each KV head of each layer follows its own method's rule (``Method.head_method``: a
plan's choice for the layer, or for the head). A quantized row never changes once written, so one
decode_final per head serves every query. The Hugging Face cache itself stays in full precision;
the method's view is rebuilt from it. Methods that quantize keys before RoPE (kvquant) get the
layer's pre-RoPE keys, taken from its k_proj output as it is computed (``_PreRope``), and rotate
their dequantized keys with kvlab's RoPE, as the C++ runner does."""
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
    """decode_schedules(T) of one (head's) method on a device, cached per (T, device) (every layer
    of a forward asks), and whether it quantizes anything within T tokens."""

    def __init__(self, method):
        self._method, self._cache = method, {}

    def __call__(self, T, device):
        if (T, device) not in self._cache:
            rows = self._method.decode_schedules(T)
            quantizes = bool((rows[:, 1] > rows[:, 0]).any() or (rows[:, 3] > rows[:, 2]).any())
            self._cache = {(T, device): (torch.from_numpy(rows).to(device), quantizes)}
        return self._cache[(T, device)]


class _PreRope:
    """The layer's keys before RoPE, (B, Hkv, T, D), kept in step with the cache: a forward hook on
    k_proj hands over each forward's new positions; a forward without past starts anew."""

    def __init__(self, head_dim):
        self.head_dim, self.new, self.keys = head_dim, None, None

    def hook(self, _module, _inputs, out):
        self.new = out.detach()

    def take(self, T, Tq):
        if self.new is None or self.new.shape[1] != Tq:
            raise RuntimeError(f"kvlab.hf: the pre-RoPE keys of this forward ({None if self.new is None else self.new.shape[1]} "
                               f"positions) do not match its {Tq} queries (k_proj was not called as Llama's attention calls it)")
        new = self.new.reshape(self.new.shape[0], Tq, -1, self.head_dim).transpose(1, 2).float()
        self.new = None
        self.keys = new if T == Tq else torch.cat([self.keys, new], dim=2) if self.keys is not None else None
        if self.keys is None or self.keys.shape[2] != T:
            raise RuntimeError(f"kvlab.hf: {T} cached positions but pre-RoPE keys for "
                               f"{None if self.keys is None else self.keys.shape[2]}: the cache was not filled "
                               "inside this apply_method block")
        return self.keys


class LayerSim:
    """What one attention module simulates: each KV head's method and schedules, where its
    quantize -> dequantize runs (``device``: a CUDA index or None) and, for methods that quantize
    keys before RoPE, the pre-RoPE keys and the model's RoPE."""

    def __init__(self, heads, device, pre_rope=None, rope=("none", 10000.0)):
        self.heads = [(m, _Schedules(m)) for m in heads]
        self.device, self.pre_rope, self.rope = device, pre_rope, rope


def _decoded(method, k16, v16, layer, kv_head, pre, rope, device):
    """decode_final of one head (T, D) as tensors on k16's device: the bytes the attention sees."""
    kw = {} if pre is None else {"k_pre_rope": pre.half().float().cpu().numpy()[None], "rope_style": rope[0],
                                 "rope_theta": rope[1]}
    k_hat, v_hat = method.decode_final(k16.cpu().numpy()[None], v16.cpu().numpy()[None], layer=layer,
                                       kv_head=kv_head, device=device, **kw)
    return torch.from_numpy(k_hat[0]).to(k16.device), torch.from_numpy(v_hat[0]).to(k16.device)


def _blend(mask, x_hat, x16):
    """The rows every query of a block agrees on, plus a correction for the columns where their
    views differ: (base rows (b, D), varying column indices, their x_hat - x16, per-query signs)."""
    first = mask[0]
    base = torch.where(first[:, None], x_hat, x16)
    cols = (mask != first).any(0).nonzero().flatten()
    sign = mask[:, cols].float() - first[cols].float()  # +1: quantized for this query, not for the first
    return base, cols, x_hat[cols] - x16[cols], sign


def _attend_head(q, k16, v16, k_hat, v_hat, rows, scaling, block=128):
    """q: (G, Tq, D) float32, the query heads of this KV head; k16, v16, k_hat, v_hat: (T, D).
    Returns (G, Tq, D). Queries go in blocks of `block` positions, each against the keys up to
    its last position."""
    T, start, dev = k16.shape[0], k16.shape[0] - q.shape[1], q.device
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


def _attend_fp16(q, k16, v16, scaling):
    """A head whose cache stays fp16 for every query: one causal softmax over all its keys."""
    T, Tq = k16.shape[0], q.shape[1]
    pos = torch.arange(T, device=q.device)
    scores = ((q @ k16.T) * scaling).masked_fill(pos[None, :] > pos[T - Tq:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v16


def kvlab_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' AttentionInterface signature: query (B, Hq, Tq, D), key/value (B, Hkv, T, D)
    after RoPE and the cache update. Returns ((B, Tq, Hq, D), None)."""
    sim = getattr(module, "_kvlab_sim", None)
    if sim is None:
        raise RuntimeError("kvlab.hf: attention implementation 'kvlab' used outside kvlab.hf.apply_method(model, method)")
    B, Hq, Tq, D = query.shape
    Hkv, T = key.shape[1], key.shape[2]
    _causal_mask_check(attention_mask, T - Tq, T)
    G = Hq // Hkv
    with torch.no_grad():
        pre = sim.pre_rope.take(T, Tq) if sim.pre_rope is not None else None
        q32 = query.detach().float()
        # The cache holds fp16 K and V (as kvlab ppl's runner): the method quantizes those.
        k16 = key.detach().float().half().float()
        v16 = value.detach().float().half().float()
        out = torch.empty((B, Hq, Tq, D), dtype=torch.float32, device=query.device)
        for h, (method, schedules) in enumerate(sim.heads):
            rows, quantizes = schedules(T, query.device)
            for b in range(B):
                qh, kh, vh = q32[b, h * G:(h + 1) * G], k16[b, h], v16[b, h]
                if not quantizes:
                    out[b, h * G:(h + 1) * G] = _attend_fp16(qh, kh, vh, scaling)
                    continue
                k_hat, v_hat = _decoded(method, kh, vh, module.layer_idx, h,
                                        None if pre is None or not method.needs_k_pre_rope else pre[b, h], sim.rope,
                                        sim.device)
                out[b, h * G:(h + 1) * G] = _attend_head(qh, kh, vh, k_hat, v_hat, rows, scaling)
    return out.to(dtype=query.dtype).transpose(1, 2).contiguous(), None


def register():
    """Register "kvlab" in transformers' attention and mask interfaces (idempotent): the mask is
    sdpa's boolean one, so padded inputs reach kvlab_attention and are refused there."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(NAME, kvlab_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
