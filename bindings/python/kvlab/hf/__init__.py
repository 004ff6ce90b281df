"""A kvlab method inside a Hugging Face model, decode-faithfully (docs/PYTHON.md).

    import kvlab.hf
    with kvlab.hf.apply_method(model, "kivi-2"):
        logits = model(ids).logits                 # teacher-forced: position t sees the cache after t+1 tokens
        out = model.generate(ids, max_new_tokens=20, do_sample=False)   # token by token: groups fill as they come
    kvlab.hf.score(model, ids, ["kivi-2", "kitty"])   # ppl, delta_ppl, kl_mean, kl_max, top1_agreement

Supported: Llama-family models whose attention goes through transformers' AttentionInterface
(Llama, Mistral without a sliding window, Qwen2; GQA), unpadded batches, on the CPU or a GPU.
The attention runs on the model's device. The method's arithmetic is kvlab's: on a CUDA model
with a CUDA build of kvlab (``kvlab.has_gpu()``) the quantize -> dequantize round trips run on
kvlab's GPU kernels, which give the CPU's bytes (``quantize_on="cpu"`` keeps them on the CPU;
specs without a kernel, such as kvquant and vq, always run on the CPU); the rest of the rule
(sinks, windows, pages) runs in kvlab's C++ core. Every method with a streaming rule works:
kvquant (keys before RoPE: the layer's k_proj output, rotated back with kvlab's RoPE after
quantization, as the C++ runner does; default RoPE only) and plans (each layer, or KV head, by
its own method's rule). Methods without a streaming rule, such as int8 group=all, fp8 with
dynamic scales or NVFP4, are refused by Method.check_decodable with what to use instead. The
attention itself is computed by kvlab ("eager"-like, fp32 softmax) whatever the model's
attn_implementation was (eager or sdpa); it is restored afterwards.
"""
import contextlib


from .. import _api
from . import _attention
from .metrics import greedy_divergence, score

__all__ = ["apply_method", "greedy_divergence", "score"]


def _attention_modules(model):
    return [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "num_key_value_groups")]


def _rope(cfg, model_name):
    """(style, theta) of a model whose RoPE kvlab's equals (transformers' default, all dims)."""
    params = getattr(cfg, "rope_parameters", None) or {}
    kind = params.get("rope_type", (getattr(cfg, "rope_scaling", None) or {}).get("rope_type", "default"))
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", None))
    if kind != "default" or theta is None or getattr(cfg, "partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"kvlab.hf.apply_method: {model_name} uses RoPE '{kind}' (partial_rotary_factor "
                         f"{getattr(cfg, 'partial_rotary_factor', 1.0)}); methods that quantize keys before "
                         "RoPE (kvquant) support the default RoPE over all dims only")
    return "halves", float(theta)


def _quantize_device(model, quantize_on):
    """The CUDA device index for the methods' quantize -> dequantize, or None (the CPU)."""
    if quantize_on not in ("auto", "cpu", "cuda"):
        raise ValueError(f"kvlab.hf.apply_method: quantize_on={quantize_on!r}; use 'auto', 'cpu' or 'cuda'")
    dev = next(model.parameters()).device
    if quantize_on == "cpu" or (quantize_on == "auto" and (dev.type != "cuda" or not _api.has_gpu())):
        return None
    if dev.type != "cuda" or not _api.has_gpu():
        raise ValueError(f"kvlab.hf.apply_method: quantize_on='cuda' needs a model on a CUDA device (it is on {dev}) "
                         f"and a kvlab build with CUDA (kvlab.has_gpu() is {_api.has_gpu()})")
    return dev.index if dev.index is not None else 0


@contextlib.contextmanager
def apply_method(model, method, *, layers=None, quantize_on="auto"):
    """Within the block, every attention of ``model`` (or only those of ``layers``, an iterable
    of layer indices: the others hold the fp16 cache, as in ``kvlab ppl --layers``) sees its KV
    cache as ``method`` (a preset, spec or kvlab.Method) holds it at each step of decoding.
    ``quantize_on``: "auto" (kvlab's GPU kernels for a CUDA model when the build has them, else
    the CPU), "cpu" or "cuda". The model's attention implementation is restored when the block
    ends, also on an exception."""
    m = method if isinstance(method, _api.Method) else _api.Method(method)
    modules = _attention_modules(model)
    if not modules:
        raise ValueError(f"kvlab.hf.apply_method: {type(model).__name__} has no Llama-family attention modules "
                         "(with layer_idx and num_key_value_groups)")
    cfg = model.config
    m.check_decodable()  # refuses methods with no streaming rule before anything changes
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    m.check_model(num_layers=cfg.num_hidden_layers, num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim)
    chosen = None if layers is None else {int(i) for i in layers}
    if chosen is not None and not chosen <= set(range(cfg.num_hidden_layers)):
        raise ValueError(f"kvlab.hf.apply_method: layers {sorted(chosen)} outside 0..{cfg.num_hidden_layers - 1}")
    device = _quantize_device(model, quantize_on)
    rope = _rope(cfg, type(model).__name__) if m.needs_k_pre_rope else ("none", 10000.0)
    _attention.register()
    old = cfg._attn_implementation
    fp16 = _api.Method("fp16")
    hooks = []
    try:
        for mod in modules:
            keep = chosen is None or mod.layer_idx in chosen
            heads = [m.head_method(mod.layer_idx, h) if keep else fp16 for h in range(cfg.num_key_value_heads)]
            pre = None
            if any(x.needs_k_pre_rope for x in heads):
                if hasattr(mod, "k_norm") or not hasattr(mod, "k_proj"):
                    raise ValueError(f"kvlab.hf.apply_method: layer {mod.layer_idx} has no k_proj whose output is "
                                     "the pre-RoPE key (a k_norm or fused projection); kvquant needs it")
                pre = _attention._PreRope(head_dim)
                hooks.append(mod.k_proj.register_forward_hook(pre.hook))
            mod._kvlab_sim = _attention.LayerSim(heads, device, pre, rope)
        cfg._attn_implementation = _attention.NAME
        yield model
    finally:
        cfg._attn_implementation = old
        for h in hooks:
            h.remove()
        for mod in modules:
            if hasattr(mod, "_kvlab_sim"):
                del mod._kvlab_sim
