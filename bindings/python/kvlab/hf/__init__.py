"""A kvlab method inside a Hugging Face model, decode-faithfully (docs/PYTHON.md).

    import kvlab.hf
    with kvlab.hf.apply_method(model, "kivi-2"):
        logits = model(ids).logits                 # teacher-forced: position t sees the cache after t+1 tokens
        out = model.generate(ids, max_new_tokens=20, do_sample=False)   # token by token: groups fill as they come
    kvlab.hf.score(model, ids, ["kivi-2", "kitty"])   # ppl, delta_ppl, kl_mean, kl_max, top1_agreement

Supported: Llama-family models whose attention goes through transformers' AttentionInterface
(Llama, Mistral without a sliding window, Qwen2; GQA), unpadded batches, on the CPU or a GPU
(the attention runs on the model's device; the method's arithmetic runs on the CPU through
kvlab's C++ core, so the bytes are the reference bytes; methods without a streaming rule, such as int8 group=all, fp8 with dynamic
scales or NVFP4, are refused by Method.check_decodable with what to use instead). The attention itself is computed by kvlab ("eager"-like, fp32 softmax)
whatever the model's attn_implementation was (eager or sdpa); it is restored afterwards.
"""
import contextlib


from .. import _api
from . import _attention
from .metrics import greedy_divergence, score

__all__ = ["apply_method", "greedy_divergence", "score"]


def _attention_modules(model):
    return [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "num_key_value_groups")]


@contextlib.contextmanager
def apply_method(model, method, *, layers=None):
    """Within the block, every attention of ``model`` (or only those of ``layers``, an iterable
    of layer indices: the others hold the fp16 cache, as in ``kvlab ppl --layers``) sees its KV
    cache as ``method`` (a preset, spec or kvlab.Method) holds it at each step of decoding. The
    model's attention implementation is restored when the block ends, also on an exception."""
    m = method if isinstance(method, _api.Method) else _api.Method(method)
    modules = _attention_modules(model)
    if not modules:
        raise ValueError(f"kvlab.hf.apply_method: {type(model).__name__} has no Llama-family attention modules "
                         "(with layer_idx and num_key_value_groups)")
    cfg = model.config
    m.check_decodable()  # refuses methods with no streaming rule before anything changes
    m.check_model(num_layers=cfg.num_hidden_layers, num_kv_heads=cfg.num_key_value_heads,
                  head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    chosen = None if layers is None else {int(i) for i in layers}
    if chosen is not None and not chosen <= set(range(cfg.num_hidden_layers)):
        raise ValueError(f"kvlab.hf.apply_method: layers {sorted(chosen)} outside 0..{cfg.num_hidden_layers - 1}")
    _attention.register()
    old = cfg._attn_implementation
    fp16 = _api.Method("fp16")
    for mod in modules:
        keep = chosen is None or mod.layer_idx in chosen
        mod._kvlab_sim = (m, _attention._Schedules(m)) if keep else (fp16, _attention._Schedules(fp16))
    cfg._attn_implementation = _attention.NAME
    try:
        yield model
    finally:
        cfg._attn_implementation = old
        for mod in modules:
            del mod._kvlab_sim

