"""Capture q, k, v from a Hugging Face transformers model into a kvlab dump.

The mechanism is transformers' attention-function registry: we register "kvlab_capture",
switch the model to it for one forward pass, record what each layer's attention receives
(query (B, Hq, T, D) and key/value (B, Hkv, T, D), after RoPE, before repeat_kv) and then
call the implementation the model had before (sdpa, eager, ...), so its outputs do not change.
Needs transformers >= 4.51 (the first release with AttentionInterface.register).
"""
import sys

import numpy as np
import torch

from .writer import DumpWriter

NAME = "kvlab_capture"
_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
_session = None  # the capture in progress; the registered functions find it here


def _previous_mask_function(*args, **kwargs):
    # Build the mask the delegate implementation would have got (sdpa: bool or None, eager:
    # additive float), so sliding windows and padding behave exactly as without capture.
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    if _session is None:
        raise RuntimeError(f"the '{NAME}' attention mask was requested outside kvlab.capture.capture()")
    return ALL_MASK_ATTENTION_FUNCTIONS[_session.previous](*args, **kwargs)


def _attention(module, query, key, value, attention_mask, *args, **kwargs):
    if _session is None:
        raise RuntimeError(f"attention implementation '{NAME}' called outside kvlab.capture.capture(); "
                           "set the model's attn_implementation back to 'sdpa' or 'eager'")
    _session.record(module, query, key, value)
    return _session.delegate(module)(module, query, key, value, attention_mask, *args, **kwargs)


def register():
    """Register the capture function (and its mask builder, where transformers has one)."""
    import transformers
    registry = getattr(transformers, "AttentionInterface", None)
    if registry is None:
        raise RuntimeError(f"kvlab.capture needs transformers >= 4.51 (AttentionInterface); "
                           f"installed: {transformers.__version__}")
    registry.register(NAME, _attention)
    try:  # transformers >= 4.53 builds masks per implementation name; older ones build a float mask
        from transformers.masking_utils import AttentionMaskInterface
        AttentionMaskInterface.register(NAME, _previous_mask_function)
    except ImportError:
        pass


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _rope_theta(config):
    theta = getattr(config, "rope_theta", None)
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if theta is None and isinstance(params, dict):
        if "rope_theta" in params:
            theta = params["rope_theta"]
        else:  # per layer type (e.g. Gemma 3): full attention layers carry the model's base
            per_type = params.get("full_attention") or next((p for p in params.values() if isinstance(p, dict)), {})
            theta = per_type.get("rope_theta")
    if theta is None:
        raise ValueError(f"cannot find rope_theta in the {type(config).__name__} (rope_theta or rope_parameters)")
    return float(theta)


def model_info(model):
    """Dump metadata from the model's config: layers, heads, head_dim, RoPE base."""
    c = _text_config(model.config)
    hq = c.num_attention_heads
    hkv = getattr(c, "num_key_value_heads", None) or hq
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // hq
    return dict(num_layers=c.num_hidden_layers, num_q_heads=hq, num_kv_heads=hkv, head_dim=head_dim,
                rope_theta=_rope_theta(c), rope_style="halves")


def _to_numpy(x):
    """(H, T, D) tensor -> numpy in the stored type; bfloat16 as its raw bits."""
    x = x.detach()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).cpu().numpy().view(np.uint16)
    return x.cpu().numpy()


class _Session:
    def __init__(self, model, previous, writer_args, num_tokens, store_pre_rope):
        self.model, self.previous, self.writer_args = model, previous, writer_args
        self.num_tokens, self.store_pre_rope = num_tokens, store_pre_rope
        self.writer = None  # opened at the first layer, once the computed dtype is known
        self.pre_rope = {}  # layer -> keys before RoPE, from a forward hook

    def delegate(self, module):
        if self.previous == "eager":  # eager lives in each model's own file, not in the registry
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
            if fn is None:
                raise RuntimeError(f"{type(module).__name__} has no eager_attention_forward to delegate to")
            return fn
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        return ALL_ATTENTION_FUNCTIONS[self.previous]

    def record(self, module, q, k, v):
        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise RuntimeError(f"{type(module).__name__} has no layer_idx; cannot tell which layer this is")
        t = self.num_tokens
        for role, x in (("q", q), ("k", k), ("v", v)):
            if x.dim() != 4 or x.shape[0] != 1 or x.shape[2] != t:
                raise RuntimeError(f"layer {layer}: {role} has shape {tuple(x.shape)}, expected (1, heads, {t}, "
                                   "head_dim); capture runs one batch-1 forward without a cache")
        dtype = _DTYPES.get(q.dtype)
        if dtype is None or k.dtype != q.dtype or v.dtype != q.dtype:
            raise RuntimeError(f"layer {layer}: q/k/v computed in {q.dtype}/{k.dtype}/{v.dtype}; "
                               f"the dump stores one of {sorted(_DTYPES.values())}")
        if self.writer is None:
            self.writer = DumpWriter(dtype=dtype, with_pre_rope=self.store_pre_rope, **self.writer_args)
        elif dtype != self.writer.dtype:
            raise RuntimeError(f"layer {layer} computed in {dtype}, earlier layers in {self.writer.dtype}")
        for role, x in (("q", q), ("k", k), ("v", v)):
            self.writer.write(layer, role, _to_numpy(x[0]))
        if self.store_pre_rope:
            if layer not in self.pre_rope:
                raise RuntimeError(f"layer {layer}: no keys before RoPE were seen (k_norm/k_proj hook did not run)")
            self.writer.write(layer, "k_pre_rope", _to_numpy(self.pre_rope.pop(layer).to(k.dtype)))

    def hook_pre_rope(self):
        """Forward hooks keeping each layer's keys before RoPE: the output of k_norm where the
        attention has one (Qwen3, Gemma), else of k_proj. Returns the hook handles."""
        handles = []
        head_dim = model_info(self.model)["head_dim"]
        for module in self.model.modules():
            if getattr(module, "layer_idx", None) is None or not hasattr(module, "k_proj"):
                continue
            source = getattr(module, "k_norm", None)
            source = module.k_proj if source is None else source

            def keep(_mod, _inp, out, layer=module.layer_idx):
                # (B, T, Hkv*D) or (B, T, Hkv, D) -> (Hkv, T, D)
                self.pre_rope[layer] = out[0].reshape(out.shape[1], -1, head_dim).transpose(0, 1)
            handles.append(source.register_forward_hook(keep))
        if not handles:
            raise RuntimeError(f"store_pre_rope: no attention module with k_proj and layer_idx in "
                               f"{type(self.model).__name__}")
        return handles


def _current_implementation(model):
    return model.config._attn_implementation


def _set_implementation(model, name):
    if hasattr(model, "set_attn_implementation"):  # transformers >= 4.56
        model.set_attn_implementation(name)
    else:  # older releases read config._attn_implementation at every forward
        model.config._attn_implementation = name
        text = _text_config(model.config)
        if text is not model.config:
            text._attn_implementation = name
    if _current_implementation(model) != name:
        raise RuntimeError(f"{type(model).__name__} did not switch to attention implementation '{name}' "
                           "(does it use transformers' AttentionInterface?)")


def capture(model, input_ids, out_path, *, store_pre_rope=False, text=None, model_name=None, source=None,
            deflate=1):
    """Run one forward pass of `model` over `input_ids` (shape (T,) or (1, T)) and write every
    layer's q, k, v (and keys before RoPE when store_pre_rope) to the kvlab dump `out_path`.

    The file appears at out_path only when complete (written to out_path.tmp.<pid>, renamed).
    The model's attention implementation, train/eval mode and outputs are left as they were.
    Returns the model's output (logits) for that forward pass.
    """
    global _session
    import transformers
    register()
    ids = torch.as_tensor(input_ids)
    ids = ids[None] if ids.dim() == 1 else ids
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError(f"input_ids must have shape (T,) or (1, T) with T >= 1, got {tuple(ids.shape)}")
    if _session is not None:
        raise RuntimeError("a kvlab capture is already in progress (captures do not nest)")
    previous = _current_implementation(model)
    if previous is None or previous == NAME:
        raise RuntimeError(f"model's attention implementation is {previous!r}; set it to 'sdpa' or 'eager' first")
    writer_args = dict(
        path=out_path, num_tokens=ids.shape[1], text=text, token_ids=ids[0].cpu().numpy(), deflate=deflate,
        model=model_name or getattr(model.config, "_name_or_path", "") or model.config.model_type,
        source=source or f"kvlab.capture.capture (transformers {transformers.__version__}, torch {torch.__version__})",
        **model_info(model))
    session = _Session(model, previous, writer_args, ids.shape[1], store_pre_rope)
    handles = session.hook_pre_rope() if store_pre_rope else []
    was_training = model.training
    _session = session
    try:
        _set_implementation(model, NAME)
        model.eval()  # dropout off: the dump must hold what inference computes
        with torch.no_grad():
            out = model(input_ids=ids.to(model.device), use_cache=False)
        if session.writer is None:
            raise RuntimeError(f"{type(model).__name__} never called the '{NAME}' attention function "
                               "(does it use transformers' AttentionInterface?)")
        session.writer.close()
        return out
    except BaseException:
        if session.writer is not None:
            session.writer.abort()
        raise
    finally:
        _session = None
        for h in handles:
            h.remove()
        model.train(was_training)
        if _current_implementation(model) != previous:
            _set_implementation(model, previous)
