"""kvlab.gpu: decode attention on a CUDA device over a method's packed KV cache (the kernels of
``kvlab gpu attend-bench``; docs/FORMATS.md section 9), for builds with CUDA (``kvlab.has_gpu()``)::

    cache = kvlab.gpu.DecodeCache("kivi-2", keys, values)   # keys[b], values[b]: (Hkv, L_b, D)
    out = kvlab.gpu.decode_attention(q, cache)              # q: torch CUDA (B, Hq, D) -> (B, Hq, D) fp32

The cache holds exactly the bytes ``make_decode_cache`` uploads (core quantizes each sequence on
the CPU). ``decode_attention`` reads q and writes the output on the device, on torch's current
stream, and returns once the kernels are done (it synchronizes that stream).
"""
import sys
import warnings

from ._ext import ext
from ._inputs import CopyWarning, as_array

__all__ = ["DecodeCache", "DecodeRun", "decode_attention"]
DecodeRun = getattr(ext, "DecodeRun", None)  # .kernel, .splits, .error_bound(q, k_hat, v_hat)


def _need_gpu(what):
    if not getattr(ext, "has_gpu", False):
        raise ValueError(f"{what}: this kvlab build has no CUDA (configure with nvcc on PATH, or "
                         "`pip install . -Ccmake.define.KVLAB_WITH_CUDA=ON`)")
    problem = ext.gpu_device_problem()
    if problem:
        raise RuntimeError(f"{what}: {problem}")


def _torch():
    return sys.modules.get("torch")


def _sequences(xs, name):
    """Host arrays (read in place) of each sequence; CUDA tensors are copied to the host, with a
    CopyWarning: core quantizes the cache on the CPU."""
    torch = _torch()
    if hasattr(xs, "ndim") and hasattr(xs, "shape"):
        if xs.ndim != 4:
            raise ValueError(f"{name}: one array of shape {tuple(xs.shape)}; pass a list of (KV heads, L, "
                             "head_dim) arrays, one per sequence, or one (B, KV heads, L, head_dim) array")
        xs = list(xs)  # B sequences of one length
    if not isinstance(xs, (list, tuple)) or not xs:
        raise ValueError(f"{name}: a non-empty list of (KV heads, L, head_dim) arrays or tensors, one per "
                         f"sequence, or one (B, KV heads, L, head_dim) array; got {type(xs).__name__}")
    out = []
    for b, x in enumerate(xs):
        if torch is not None and isinstance(x, torch.Tensor) and x.device.type != "cpu":
            warnings.warn(f"{name}[{b}]: a tensor on {x.device} copied to the host (core quantizes the cache "
                          "on the CPU; a copy)", CopyWarning, stacklevel=3)
            x = x.detach().cpu()
        out.append(as_array(x, f"{name}[{b}]", stacklevel=4))
    return out


def _device_of(xs):
    torch = _torch()
    for x in xs if isinstance(xs, (list, tuple)) else [xs]:
        if torch is not None and isinstance(x, torch.Tensor) and x.device.type == "cuda":
            return x.device.index
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


class DecodeCache:
    """B sequences of one method's KV cache on a CUDA device: sinks and the residual window in
    fp16, the rest packed as core's quantize writes it (``make_decode_cache``'s bytes).

    ``method``: a ``kvlab.Method`` or spec with a decode kernel (fp16, int8, kivi 2/4-bit, kitty
    2-bit, profile kvlab; head_dim 128, or 64; ``vq:codebooks=FILE.h5``, head_dim 128; others are
    refused with the reason). ``keys``,
    ``values``: per sequence (KV heads, L_b, head_dim), lengths may differ, float16/bfloat16/
    float32, numpy or torch (CUDA tensors are copied to the host with a CopyWarning), or one
    (B, KV heads, L, head_dim) array. ``device``: a CUDA index (default: that of the first CUDA
    key tensor, else torch's current device)."""

    __slots__ = ("_c",)

    def __init__(self, method, keys, values, *, device=None):
        _need_gpu("DecodeCache")
        spec = str(method)
        dev = _device_of(keys) if device is None else int(device)
        self._c = ext.DecodeCache(spec, _sequences(keys, "keys"), _sequences(values, "values"), dev)

    batch = property(lambda self: self._c.batch, doc="B, the number of sequences")
    kv_heads = property(lambda self: self._c.kv_heads)
    head_dim = property(lambda self: self._c.head_dim)
    lengths = property(lambda self: list(self._c.lengths), doc="L_b of each sequence")
    nbytes = property(lambda self: self._c.nbytes,
                      doc="bytes a decode step reads: codes, scales, zeros, Kitty planes, fp16 rows")
    device = property(lambda self: self._c.device, doc="the CUDA device index")

    @property
    def method(self):
        from ._api import Method
        return Method(self._c.method)

    def __repr__(self):
        return (f"kvlab.gpu.DecodeCache({self._c.method!r}, batch={self.batch}, kv_heads={self.kv_heads}, "
                f"head_dim={self.head_dim}, lengths={self.lengths}, device={self.device})")

    def decode_attention_host(self, q, *, kernel="auto", splits=0):
        """The C++ ``decode_attention`` as ``kvlab gpu attend-validate`` runs it: q (B, Hq, D)
        float32 in host memory (numpy or CPU torch) copied to the device, the output copied back.
        Returns (out, run): out a numpy (B, Hq, D) float32 array, run a ``DecodeRun``."""
        return self._c.attend_host(as_array(q, "q"), str(kernel), int(splits))


def _query(q, cache):
    torch = _torch()
    if torch is None or not isinstance(q, torch.Tensor):
        raise ValueError(f"q: a {type(q).__name__}; decode_attention takes a torch CUDA tensor (B, Hq, D) "
                         "(host arrays: DecodeCache.decode_attention_host)")
    if q.device.type != "cuda":
        raise ValueError(f"q: a tensor on {q.device}; decode_attention reads q on the cache's device, "
                         f"cuda:{cache.device} (pass q.cuda({cache.device}))")
    if q.device.index != cache.device:
        raise ValueError(f"q: a tensor on {q.device}; the cache is on cuda:{cache.device}")
    q = q.detach()
    if q.dtype in (torch.float16, torch.bfloat16):
        warnings.warn(f"q: {q.dtype} widened to float32 (a copy)", CopyWarning, stacklevel=4)
        q = q.float()
    if q.dtype != torch.float32:
        raise ValueError(f"q: dtype {q.dtype} is not supported; pass float32 (or float16, bfloat16)")
    shape = tuple(q.shape)
    B, Hkv, D = cache.batch, cache.kv_heads, cache.head_dim
    if len(shape) != 3 or shape[0] != B or shape[2] != D or shape[1] < 1:
        raise ValueError(f"q: shape {shape}; want (B, Hq, D) = ({B}, Hq, {D}) for this cache")
    if shape[1] % Hkv:
        raise ValueError(f"q: {shape[1]} query heads for {Hkv} KV heads (want a multiple)")
    if not q.is_contiguous():
        raise ValueError(f"q: tensor of shape {shape} is not contiguous; pass q.contiguous()")
    bad = (~torch.isfinite(q)).reshape(-1).nonzero()
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"q: a non-finite value ({float(q.reshape(-1)[i])}) at flat index {i}")
    return q


def decode_attention(q, cache, kernel="auto", splits=0, *, return_run=False):
    """softmax(q K_hat^T / sqrt(D)) V_hat for one new query per sequence, read from the packed
    cache by kvlab's kernels: q a torch CUDA tensor (B, Hq, D) on the cache's device, float32
    (float16/bfloat16 widened with a CopyWarning), Hq a multiple of the KV heads (GQA: head h reads
    KV head h // (Hq / Hkv)). Returns a new (B, Hq, D) float32 CUDA tensor; with
    ``return_run=True``, (out, run) where run is a ``DecodeRun`` (kernel, splits, error_bound).

    ``kernel``: "auto" (the streaming kernel where it serves, else the split kernel), "split",
    "stream", "codebook"; ``splits``: splits per sequence (0: enough to fill the GPU). Runs on
    torch's current stream, no host copy of q or the output; returns once done."""
    torch = _torch()
    if not isinstance(cache, DecodeCache):
        raise TypeError(f"cache: a {type(cache).__name__}; pass a kvlab.gpu.DecodeCache")
    q = _query(q, cache)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    run = cache._c.attend_device(q.data_ptr(), out.data_ptr(), q.shape[1], str(kernel), int(splits), stream)
    return (out, run) if return_run else out
