"""The public API (kvlab.<name>): thin wrappers that give the compiled functions keyword
arguments, defaults and docstrings. Every number comes from the C++ libraries."""
import json
import os

from . import _gpu, _progress
from ._ext import ext
from ._inputs import CopyWarning, as_array

FileError = ext.FileError
MissingFileError = ext.MissingFileError
Quantized = ext.Quantized
Dump = ext.Dump
__all__ = ["CopyWarning", "FileError", "MissingFileError", "Quantized", "Dump"]  # the rest below


def methods():
    """Every method preset of every registered family, in registry order (``kvlab methods``):
    a list of dicts with ``name``, ``spec`` (canonical), ``family`` and ``description``."""
    return ext.presets()


def families():
    """Every method family: ``name``, ``summary``, ``keys`` (name, default, meaning) and
    ``presets``. A spec is ``family:key=value,...`` over these keys."""
    return ext.families()


class Method:
    """A KV method, from a preset name (``"kitty-pro"``) or a spec (``"kitty:kbits=2,..."``).

    ``str(m)`` is the canonical spec and ``Method(str(m)) == m``. Unknown names or keys raise
    ValueError listing the valid ones (the CLI's message)."""

    __slots__ = ("_m",)

    def __init__(self, spec):
        self._m = spec._m if isinstance(spec, Method) else ext.Method(str(spec))

    @property
    def spec(self):
        """The canonical spec: every key printed."""
        return self._m.spec

    @property
    def family(self):
        return self._m.family

    @property
    def key_quantizer(self):
        """The quantizer spec applied to keys (None for families without one)."""
        return self._m.key_quantizer

    @property
    def value_quantizer(self):
        """The quantizer spec applied to values (None for families without one)."""
        return self._m.value_quantizer

    def __str__(self):
        return self._m.spec

    def __repr__(self):
        return f"kvlab.Method({self._m.spec!r})"

    def __eq__(self, other):
        return isinstance(other, Method) and self._m == other._m

    def __hash__(self):
        return hash(self._m.spec)

    def bits(self, tokens, head_dim):
        """Bits per element of one head's cache of ``tokens`` x ``head_dim``: a dict with
        ``key``, ``value`` and ``both`` (their mean), codes, scales, zeros and fp16 tokens included."""
        return self._m.bits(int(tokens), int(head_dim))

    def schedule(self, tokens):
        """The quantized token ranges after ``tokens`` tokens: ``{"key": (begin, end), "value": (begin, end)}``;
        every other token stays in fp16 (sinks, the residual window, an incomplete page)."""
        return self._m.schedule(int(tokens))

    def apply(self, k, v, *, layer=0, kv_head=0):
        """K_hat, V_hat (float32 numpy arrays shaped as k): what the cache holds after all T
        tokens under this method's schedule. k, v: (..., T, D), float16/bfloat16/float32,
        numpy or CPU torch; ``layer`` and ``kv_head`` pick codebooks (vq)."""
        return self._m.apply(as_array(k, "k"), as_array(v, "v"), layer=layer, kv_head=kv_head)

    def check_decodable(self):
        """Raise ValueError when a streaming cache cannot hold what apply() computes (a scale over
        tokens not yet seen: int8 group=all, fp8 dynamic, NVFP4), saying what to use instead."""
        self._m.check_decodable()

    def decode_schedules(self, tokens):
        """The decode rule (docs/FORMATS.md section 10): an int64 array (tokens, 4) whose row t is
        the quantized (key begin, key end, value begin, value end) of the cache after t+1 tokens."""
        return self._m.decode_schedules(int(tokens))

    def head_method(self, layer, kv_head):
        """The method whose decode rule serves KV head ``kv_head`` of ``layer``: a plan's choice
        for that layer (per-head plans: for that head), this method itself otherwise."""
        m = Method.__new__(Method)
        m._m = self._m.head_method(int(layer), int(kv_head))
        return m

    @property
    def needs_k_pre_rope(self):
        """Whether apply/decode_final need the keys before RoPE (kvquant, or a plan holding it)."""
        return self._m.needs_k_pre_rope

    def decode_final(self, k, v, *, layer=0, kv_head=0, k_pre_rope=None, rope_style="none", rope_theta=10000.0,
                     device=None):
        """Every decoding step's quantized rows at once, (..., T, D) float32: row j of the view at
        step t is this row where j is in ``decode_schedules(T)[t]``'s ranges, fp16(k) otherwise.
        A plan decodes (layer, kv_head) by ``head_method(layer, kv_head)``. Methods that quantize
        keys before RoPE (kvquant) take ``k_pre_rope`` (shaped as k) and rotate their
        dequantized keys with ``rope_style`` ("halves", "adjacent") and ``rope_theta``.
        ``device``: a CUDA device index to run the quantize -> dequantize round trips on kvlab's
        GPU kernels (same bytes; a build with CUDA, ``has_gpu()``; specs without a kernel, such
        as kvquant, vq or the kivi/kitty-sim profiles, still run on the CPU), None: the CPU."""
        pre = None if k_pre_rope is None else as_array(k_pre_rope, "k_pre_rope")
        return self._m.decode_final(as_array(k, "k"), as_array(v, "v"), layer=layer, kv_head=kv_head,
                                    k_pre_rope=pre, rope_style=str(rope_style), rope_theta=float(rope_theta),
                                    device=-1 if device is None else int(device))

    def decode_view(self, k, v, t, *, layer=0, kv_head=0, k_pre_rope=None, rope_style="none", rope_theta=10000.0):
        """The cache after t+1 tokens, rebuilt from that prefix alone ((..., t+1, D); slow: the
        reference decode_final is tested against). k_pre_rope, rope_*: as decode_final."""
        pre = None if k_pre_rope is None else as_array(k_pre_rope, "k_pre_rope")
        return self._m.decode_view(as_array(k, "k"), as_array(v, "v"), int(t), layer=layer, kv_head=kv_head,
                                   k_pre_rope=pre, rope_style=str(rope_style), rope_theta=float(rope_theta))

    def check_model(self, *, num_layers, num_kv_heads, head_dim):
        """Raise ValueError when the method cannot serve this model (a codebook file for another one)."""
        self._m.check_model(num_layers, num_kv_heads, head_dim)


def quantize(x, spec, *, boost_channels=None):
    """Quantize and pack x ((T, D), (H, T, D) or (B, H, T, D), or any (..., T, D)) with a
    quantizer spec (``"bits=2,axis=channel,group=128"``; keys: scheme, bits, axis, group,
    params, profile, boost). x is read in place (numpy, CPU torch, DLPack or array-protocol
    objects; float16 or float32; bfloat16 is widened with a CopyWarning).

    Returns a :class:`Quantized` whose ``codes``, ``scale``, ``zero``, ``high`` and
    ``boost_index`` are read-only numpy views of the result (no copy; fp16 scales are
    converted) with the bytes and shapes of ``kvlab quantize``'s .npz; ``dequant()`` gives
    its ``dequant`` array and ``unpack()`` its ``q``. ``boost_channels``: Kitty's boosted
    channels chosen by the caller, k per (slice, page).

    A CUDA tensor, on a build with CUDA (``kvlab.has_gpu()``), goes through the GPU kernels:
    the same bytes, the result in host memory."""
    if _gpu.is_device_tensor(x):
        return _gpu.quantize(x, spec, boost_channels)
    return ext.quantize(as_array(x, "x"), str(spec), boost_channels)


def has_gpu():
    """Whether this build sends CUDA tensors to the GPU kernels (built with CUDA)."""
    return bool(getattr(ext, "has_gpu", False))


def canonical_quantizer(spec):
    """The canonical form of a quantizer spec (every key printed)."""
    return ext.canonical_quantizer(str(spec))


def open_dump(path):
    """Open a dump lazily: HDF5 (docs/DUMP_FORMAT.md), .npz, a directory of .npy files, a
    stacked .npy, or a torch.save file (when built with libtorch). ``dump.info`` holds its
    attributes; ``dump.read(layer, role, head=None)`` reads one layer's role ("q", "k", "v",
    "k_pre_rope") or one head of it as float32. A missing file raises MissingFileError (a
    FileNotFoundError), a bad one FileError (an OSError), with the CLI's message."""
    return ext.open_dump(os.fspath(path))


def synthetic(preset, *, tokens=None, layers=None, seed=0, k_pre_rope=False):
    """A synthetic dump generated on demand (``kvlab synth``'s generator, no file): presets
    llama3-8b, llama2-7b, qwen3-8b, tiny."""
    return ext.synthetic(preset, tokens, layers, seed, k_pre_rope)


def default_dump_path():
    """The small dump that ships with kvlab (data/stories260K.h5), or $KVLAB_DEFAULT_DUMP: the
    default of sensitivity, boost_sweep and vq.train."""
    return ext.default_dump_path()


def default_eval_dump(cache_dir=None):
    """The dump evaluate() and ``kvlab eval`` use without one: $KVLAB_DEFAULT_DUMP, else the
    reference model's (data/kvlab-ref-18m on the first 2048 tokens of its held-out book), made on
    first use (seconds, without the GIL) and cached in cache_dir (default: $KVLAB_CACHE_DIR,
    $XDG_CACHE_HOME/kvlab or ~/.cache/kvlab). Returns its path."""
    return ext.default_eval_dump(os.fspath(cache_dir) if cache_dir is not None else "")


class DumpWriter:
    """Write a dump in kvlab's HDF5 format, as ``kvlab synth`` and ``kvlab dump`` do: to a
    temporary name, renamed on :meth:`commit`. As a context manager it commits when the block
    ends normally and deletes the temporary file when it raises.

    ``write(layer, role, x)``: x of shape (heads, tokens, head_dim), float16/float32 (stored
    as ``dtype``: float16, bfloat16 or float32)."""

    def __init__(self, path, *, model, num_layers, num_q_heads, num_kv_heads, head_dim, tokens,
                 rope_theta=10000.0, rope_style="halves", k_after_rope=True, k_pre_rope=False,
                 dtype="float32", token_ids=(), text="", source="kvlab.DumpWriter (Python)",
                 compress=True, chunk_tokens=1024):
        self._w = ext.DumpWriter(os.fspath(path), model=model, num_layers=num_layers, num_q_heads=num_q_heads,
                                 num_kv_heads=num_kv_heads, head_dim=head_dim, tokens=tokens,
                                 rope_theta=rope_theta, rope_style=rope_style, k_after_rope=k_after_rope,
                                 k_pre_rope=k_pre_rope, dtype=dtype, token_ids=list(token_ids), text=text,
                                 source=source, compress=compress, chunk_tokens=chunk_tokens)

    def write(self, layer, role, x):
        self._w.write(layer, role, as_array(x, role))

    def commit(self):
        """Check that every layer's q, k, v (and k_pre_rope) was written, close and rename."""
        self._w.commit()

    def discard(self):
        """Delete the temporary file; nothing is written at the path."""
        self._w.discard()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()  # after a commit: nothing left to delete; else the temporary file goes
        return False


def _as_dump(source, default=default_dump_path):
    """A Dump from a Dump, a path, None (default()'s dump) or a mapping of q, k, v arrays."""
    if isinstance(source, Dump):
        return source
    if source is None:
        return open_dump(default())
    if isinstance(source, (str, os.PathLike)):
        return open_dump(source)
    if hasattr(source, "keys"):
        missing = [r for r in ("q", "k", "v") if r not in source]
        if missing:
            raise ValueError(f"arrays: missing {', '.join(missing)} (expected q, k, v of shape (layers, heads, T, D))")
        q, k, v = (as_array(source[r], r, stacklevel=4) for r in ("q", "k", "v"))
        return ext.arrays_dump(q, k, v, model=str(source.get("model", "arrays")))
    raise ValueError(f"expected a Dump, a path or a dict of q, k, v arrays, got {type(source).__name__}")


def _method_list(methods):
    if methods is None:
        return []
    if isinstance(methods, (str, Method)):
        methods = [methods]
    return [str(m) for m in methods]


def _run(progress, what, fn):
    callback, close = _progress.hook(progress, what)
    try:
        return fn(callback)
    finally:
        close()


def evaluate(source=None, *, methods=None, queries="all", layers=None, threads=0, query_tile=64, key_tile=256,
             progress=None):
    """``kvlab eval --format json`` as Python objects: the same numbers (docs/EVAL_JSON.md),
    as dicts and lists (``pandas.DataFrame(r["methods"])``).

    source: a Dump, a path, None (default_eval_dump(): the reference model's dump, made once and
    cached) or ``{"q": q, "k": k, "v": v}`` arrays of shape (layers, heads, T, D). methods:
    presets, specs or Method objects (default: eval's list). queries: ``all``, ``last:N`` or
    ``stride:N``. layers: ``"a-b"`` or ``"a"``. progress: None, a callable(done, total) or True
    (tqdm). Runs without the GIL; Ctrl-C stops it after the current layer (KeyboardInterrupt)."""
    d = _as_dump(source, default_eval_dump)
    text = _run(progress, "eval", lambda cb: ext.evaluate_json(
        d, _method_list(methods), queries, layers or "", threads, query_tile, key_tile, cb))
    return json.loads(text)


def sensitivity(source=None, *, bits=2, group=128, sink=32, params="fp16", profile="kvlab", queries="all",
                layers=None, threads=0, naive=False, progress=None):
    """``kvlab sensitivity``: the attention-score error of quantizing each key channel alone.
    Returns ``rows`` (columns of SENS.csv: layer, kv_head, q_head, channel, attn_score_mse,
    mean_abs, max_abs, variance; ``pandas.DataFrame(r["rows"])``), ``ranking`` (SENS_ranking.csv)
    and the ranges used."""
    d = _as_dump(source)
    return _run(progress, "sensitivity", lambda cb: ext.sensitivity(
        d, bits, group, sink, params, profile, queries, layers or "", threads, naive, cb))


def boost_sweep(source=None, *, method="kitty", rates=(0, 0.0625, 0.125, 0.25, 0.5, 1),
                selectors=("magnitude", "random", "variance", "oracle"), seeds=5, calib_tokens=0, calib_queries=256,
                queries=None, layers=None, threads=0, progress=None):
    """``kvlab boost-sweep``: Kitty's boost rate against the channel selector. Returns ``rows``
    (one per selector, rate and seed; SWEEP.csv's columns) and ``summary`` (SWEEP_summary.csv)."""
    d = _as_dump(source)
    rates = sorted(set(float(r) for r in rates))  # ascending, no repeats, as the CLI
    return _run(progress, "boost-sweep", lambda cb: ext.boost_sweep(
        d, str(method), rates, list(selectors), seeds, calib_tokens, calib_queries, queries or "", layers or "",
        threads, cb))


def kmeans(x, k, *, iters=20, restarts=1, seed=1234, init="random", max_points_per_centroid=0, split="largest",
           threads=0, weights=None, init_centroids=None):
    """k-means in the manner of faiss's Clustering (``kvlab kmeans``): x (n, d) float32.
    Returns ``centroids`` (k, d), ``assign`` (n,), ``objective``, ``mse``, per-iteration
    ``iterations`` (objective, time_s, imbalance, splits) and the restarts' objectives. The
    same results for any thread count. init: random, kmeans++ or farthest; split: largest or
    faiss (1.7.3's empty-cluster rule)."""
    return ext.kmeans(as_array(x, "x"), k, iters, restarts, seed, init, max_points_per_centroid, split, threads,
                      None if weights is None else as_array(weights, "weights"),
                      None if init_centroids is None else as_array(init_centroids, "init_centroids"))


__all__ += ["methods", "families", "Method", "quantize", "has_gpu", "canonical_quantizer", "open_dump", "synthetic",
            "default_dump_path", "default_eval_dump", "DumpWriter", "evaluate", "sensitivity", "boost_sweep", "kmeans"]
