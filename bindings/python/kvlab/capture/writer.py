"""Writes a kvlab KV dump (docs/DUMP_FORMAT.md, version 1) with h5py.

Needs only numpy and h5py, so it can be used without torch. Layers may arrive in any order
(the capture hook writes each one as the model computes it); close() checks that every
dataset is there before the temporary file is renamed onto the destination.
"""
import os

import h5py
import numpy as np

FORMAT_NAME = "kvlab-kv-dump"
FORMAT_VERSION = 1
DTYPES = ("float16", "bfloat16", "float32")
ROPE_STYLES = ("adjacent", "halves", "none")
_INT_ATTRS = ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "num_tokens")
_STR = h5py.string_dtype("utf-8")  # variable-length UTF-8, what the C++ reader expects


def _stored(array, dtype):
    """numpy array in the stored type: bfloat16 arrives as its raw uint16 bits."""
    want = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}[dtype]
    if array.dtype != want:
        raise TypeError(f"{dtype} data must be given as numpy {np.dtype(want).name}, got {array.dtype}")
    return np.ascontiguousarray(array)


class DumpWriter:
    """Use as a context manager: on an exception the temporary file is removed."""

    def __init__(self, path, *, model, num_layers, num_q_heads, num_kv_heads, head_dim, num_tokens,
                 rope_theta, rope_style, dtype, source, text=None, token_ids=None,
                 with_pre_rope=False, deflate=1):
        if dtype not in DTYPES:
            raise ValueError(f"{path}: dtype must be one of {DTYPES}, got {dtype!r}")
        if rope_style not in ROPE_STYLES:
            raise ValueError(f"{path}: rope_style must be one of {ROPE_STYLES}, got {rope_style!r}")
        ints = dict(num_layers=num_layers, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                    head_dim=head_dim, num_tokens=num_tokens)
        for name, v in ints.items():
            if int(v) != v or v < 1:
                raise ValueError(f"{path}: {name} must be a positive integer, got {v!r}")
        if num_q_heads % num_kv_heads:
            raise ValueError(f"{path}: num_q_heads {num_q_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        if not 0 <= deflate <= 9:
            raise ValueError(f"{path}: deflate level must be 0..9, got {deflate}")
        self.path = os.fspath(path)
        self.tmp_path = f"{self.path}.tmp.{os.getpid()}"
        self.dtype = dtype
        self.deflate = deflate
        self.shapes = {"q": (num_q_heads, num_tokens, head_dim), "k": (num_kv_heads, num_tokens, head_dim),
                       "v": (num_kv_heads, num_tokens, head_dim)}
        if with_pre_rope:
            self.shapes["k_pre_rope"] = self.shapes["k"]
        self.num_layers = int(num_layers)
        self.written = set()
        self.file = h5py.File(self.tmp_path, "w")
        try:
            a = self.file.attrs
            a.create("format", FORMAT_NAME, dtype=_STR)
            a.create("format_version", np.int64(FORMAT_VERSION))
            a.create("model", str(model), dtype=_STR)
            for name, v in ints.items():
                a.create(name, np.int64(v))
            a.create("rope_theta", np.float64(rope_theta))
            a.create("rope_style", rope_style, dtype=_STR)
            a.create("k_after_rope", np.int64(1))
            a.create("dtype", dtype, dtype=_STR)
            a.create("source", str(source), dtype=_STR)
            if text:
                a.create("text", str(text), dtype=_STR)
            if token_ids is not None:
                ids = np.asarray(token_ids).reshape(-1)
                if ids.shape != (num_tokens,):
                    raise ValueError(f"{path}: {ids.size} token ids for num_tokens {num_tokens}")
                if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
                    raise ValueError(f"{path}: token ids out of int32 range")
                self.file.create_dataset("token_ids", data=ids.astype("<i4"))
        except BaseException:
            self.abort()
            raise

    def write(self, layer, role, array):
        """array: (H, T, D) numpy in the stored type (uint16 bits for bfloat16)."""
        name = f"layers/{layer}/{role}"
        if role not in self.shapes:
            raise ValueError(f"{self.path}: unexpected dataset role {role!r} for /{name}")
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"{self.path}: layer {layer} outside 0..{self.num_layers - 1}")
        if (layer, role) in self.written:
            raise ValueError(f"{self.path}: /{name} written twice")
        if tuple(array.shape) != self.shapes[role]:
            raise ValueError(f"{self.path}: /{name} has shape {tuple(array.shape)}, expected {self.shapes[role]}")
        data = _stored(array, self.dtype)
        h, t, d = data.shape
        # exactly [shuffle, deflate] and (1, t, D) chunks: kvlab's reader decodes that layout in parallel
        filters = dict(shuffle=True, compression="gzip", compression_opts=self.deflate) if self.deflate else {}
        ds = self.file.create_dataset(name, data=data, chunks=(1, min(t, 1024), d), **filters)
        ds.attrs.create("dtype", self.dtype, dtype=_STR)
        self.written.add((layer, role))

    def missing(self):
        return [f"/layers/{i}/{r}" for i in range(self.num_layers) for r in self.shapes if (i, r) not in self.written]

    def close(self):
        """Check completeness, then rename the temporary file onto the path."""
        missing = self.missing()
        if missing:
            self.abort()
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise RuntimeError(f"{self.path}: dump incomplete, missing {', '.join(missing[:3])}{more}")
        self.file.close()
        os.replace(self.tmp_path, self.path)

    def abort(self):
        try:
            self.file.close()
        finally:
            if os.path.exists(self.tmp_path):
                os.remove(self.tmp_path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
