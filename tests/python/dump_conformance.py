"""Checks an HDF5 file against docs/DUMP_FORMAT.md (version 1) with h5py alone, so the format
is verified by a reader that shares no code with kvlab's C++ one.

    python3 tests/python/dump_conformance.py DUMP.h5   # prints "ok: ..." or raises
"""
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # ctest reads exit status 77 as "skipped"
    print(f"skipped: {e} (install python3-h5py)")
    sys.exit(77)

INT_ATTRS = ("format_version", "num_layers", "num_q_heads", "num_kv_heads", "head_dim", "num_tokens", "k_after_rope")
STR_ATTRS = ("format", "model", "rope_style", "dtype", "source")
STORED = {"float16": np.float16, "float32": np.float32, "bfloat16": np.uint16}


def check_dump(path):
    with h5py.File(path, "r") as f:
        a = f.attrs
        for name in INT_ATTRS:
            assert name in a, f"{path}: missing attribute {name}"
            assert np.issubdtype(np.asarray(a[name]).dtype, np.integer), f"{path}: {name} is not an integer"
        for name in STR_ATTRS:
            assert isinstance(a[name], str), f"{path}: {name} is not a string"
        assert a["format"] == "kvlab-kv-dump" and a["format_version"] == 1
        assert isinstance(a["rope_theta"], (float, np.floating))
        assert a["rope_style"] in ("adjacent", "halves", "none")
        L, Hq, Hkv, D, T = (int(a[k]) for k in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "num_tokens"))
        assert Hq % Hkv == 0, f"{path}: {Hq} q heads, {Hkv} kv heads"
        if "token_ids" in f:
            assert f["token_ids"].shape == (T,) and f["token_ids"].dtype == np.int32
        for i in range(L):
            for role, heads in (("q", Hq), ("k", Hkv), ("v", Hkv)):
                ds = f[f"layers/{i}/{role}"]
                assert ds.shape == (heads, T, D), f"{path}: layers/{i}/{role} has shape {ds.shape}"
                tag = ds.attrs["dtype"]
                assert tag == a["dtype"] and ds.dtype == STORED[tag], f"{path}: layers/{i}/{role} {ds.dtype} {tag}"
                assert ds.chunks is not None and ds.chunks[0] == 1 and ds.chunks[2] == D
                x = ds[...]
                if tag == "bfloat16":
                    x = (x.astype(np.uint32) << 16).view(np.float32)
                assert np.isfinite(x).all(), f"{path}: layers/{i}/{role} has NaN/Inf"
        return L, Hq, Hkv, T, D


if __name__ == "__main__":
    for path in sys.argv[1:]:
        L, Hq, Hkv, T, D = check_dump(path)
        print(f"ok: {path}: {L} layers, {Hq} q heads, {Hkv} kv heads, {T} tokens, head_dim {D}")
