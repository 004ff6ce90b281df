"""Model-level damage of a method (what ``kvlab ppl`` reports): teacher-forced perplexity and
its change, KL(p_ref || p_method) of the next-token distribution per position (mean, max), top-1
agreement, and the first step where greedy generation departs from the reference. The reference
is kvlab ppl's: the same model with the fp16 cache (every K and V rounded to fp16, nothing
quantized)."""
import math

import torch

from .. import _api


def _logits(model, ids, method=None, layers=None, quantize_on="auto"):
    """Logits with ``method`` simulated (None: the model as it is)."""
    from . import apply_method
    with torch.no_grad():
        if method is None:
            return model(ids).logits.float()
        with apply_method(model, method, layers=layers, quantize_on=quantize_on):
            return model(ids).logits.float()


def _nll(logits, ids):
    """Mean negative log-likelihood of tokens 1..T-1 given their prefixes (all rows of the batch)."""
    lp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    return float(-lp.gather(-1, ids[:, 1:, None]).mean())


def score(model, ids, methods, *, layers=None, reference=None, quantize_on="auto"):
    """Teacher-forced comparison of ``methods`` against the fp16 cache on ``ids`` ((B, T) or
    (T,) token ids, no padding). Returns a list of dicts, one per method: ``name``, ``spec``,
    ``bits_per_element`` (one head of T tokens), ``ppl`` (over the T - 1 predicted tokens),
    ``delta_ppl``, ``ref_ppl``, and over every position (the last too, as kvlab ppl) ``kl_mean``,
    ``kl_max`` (nats) and ``top1_agreement``.
    ``layers``: quantize only these layers, ``quantize_on``: where the round trips run (see
    apply_method). ``reference``: the fp16 cache's logits when already computed."""
    ids = torch.as_tensor(ids).reshape(-1, torch.as_tensor(ids).shape[-1])
    ref = _logits(model, ids, "fp16") if reference is None else reference.float()
    ref_lp = torch.log_softmax(ref.double(), dim=-1)
    ref_ppl = math.exp(_nll(ref, ids))
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    rows = []
    for name in ([methods] if isinstance(methods, (str, _api.Method)) else methods):
        m = name if isinstance(name, _api.Method) else _api.Method(name)
        got = _logits(model, ids, m, layers, quantize_on)
        lp = torch.log_softmax(got.double(), dim=-1)
        kl = (ref_lp.exp() * (ref_lp - lp)).sum(-1)
        ppl = math.exp(_nll(got, ids))
        rows.append({"name": str(name), "spec": m.spec, "bits_per_element": m.bits(ids.shape[1], head_dim)["both"],
                     "ppl": ppl, "delta_ppl": ppl - ref_ppl, "ref_ppl": ref_ppl, "kl_mean": float(kl.mean()),
                     "kl_max": float(kl.max()),
                     "top1_agreement": float((got.argmax(-1) == ref.argmax(-1)).double().mean())})
    return rows


def greedy_divergence(model, prompt, method, steps):
    """Greedy generation of ``steps`` tokens after ``prompt`` ((1, P) ids) with and without the
    method (the reference: the fp16 cache); returns the first generated step (0-based) whose
    token differs, or None."""
    from . import apply_method
    prompt = torch.as_tensor(prompt).reshape(1, -1)
    kw = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        with apply_method(model, "fp16"):
            ref = model.generate(prompt, **kw)[0, prompt.shape[1]:]
        with apply_method(model, method):
            got = model.generate(prompt, **kw)[0, prompt.shape[1]:]
    diff = (ref != got).nonzero()
    return int(diff[0]) if len(diff) else None
