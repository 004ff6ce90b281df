#!/usr/bin/python3
"""Writes the NumPy dump fixtures of tests/io/numpy_dump_test.cpp with real numpy.

Run with Debian's python (it has numpy): /usr/bin/python3 tests/data/dumps/make_fixtures.py
The files are tiny (L=2 layers, 4 query heads, 2 KV heads, T=5 tokens, D=4) and checked in.

Every value follows one formula, which the C++ test restates:
    value(role, layer, head, t, d) = role*64 + layer*32 + head*8 + t + d/8 - 128
with role 0..3 for q, k, v, k_pre_rope. It is exact in float16 and float32 and differs for
every (layer, head, t, d) of a role, so a wrong slice or offset shows up as a wrong value.
"""
import os
import shutil
import zipfile

import numpy as np

L, HQ, HKV, T, D = 2, 4, 2, 5, 4
ROLES = ["q", "k", "v", "k_pre_rope"]
OUT = os.path.dirname(os.path.abspath(__file__))


def value(role, layer, head, t, d):
    return ROLES.index(role) * 64 + layer * 32 + head * 8 + t + d / 8 - 128


def layer_array(role, layer, dtype, heads=None):
    h = heads if heads is not None else (HQ if role == "q" else HKV)
    a = np.empty((h, T, D), dtype=np.float64)
    for i in range(h):
        for t in range(T):
            for d in range(D):
                a[i, t, d] = value(role, layer, i, t, d)
    return a.astype(dtype)


def stacked(role, dtype, layers=L):
    return np.stack([layer_array(role, l, dtype) for l in range(layers)])


def per_layer(spelling, dtype, roles=("q", "k", "v")):
    out = {}
    for l in range(L):
        for r in roles:
            out[spelling.format(l=l, r=r)] = layer_array(r, l, dtype)
    return out


META = dict(
    token_ids=np.array([1, 22, 333, 4444, 5], dtype=np.int64),
    rope_theta=np.array(500000.0),
    rope_style=np.array("halves"),
    model=np.array("tiny-model"),
    text=np.array("Once upon a time"),
)


def path(name):
    return os.path.join(OUT, name)


def main():
    f4, f2 = np.float32, np.float16
    # Good files, one per layout.
    np.savez(path("stacked.npz"), **{r: stacked(r, f4) for r in ROLES}, **META)
    np.savez_compressed(path("stacked_compressed.npz"), **{r: stacked(r, f2) for r in ("q", "k", "v")})
    np.savez(path("per_layer.npz"), **per_layer("layers/{l}/{r}", f4, ROLES))
    np.savez_compressed(path("per_layer_flat.npz"), **per_layer("layer_{l}_{r}", f2))
    for d in ("npy_dir_stacked", "npy_dir_layers"):
        shutil.rmtree(path(d), ignore_errors=True)
        os.makedirs(path(d))
    for r in ("q", "k", "v"):
        np.save(path(f"npy_dir_stacked/{r}.npy"), stacked(r, f4))
    np.save(path("npy_dir_stacked/rope_theta.npy"), np.array(20000.0))
    for name, a in per_layer("layer_{l}_{r}", f2).items():
        np.save(path(f"npy_dir_layers/{name}.npy"), a)
    np.save(path("single_stacked.npy"), stacked("k", f4))
    # numpy writes ZIP64 records for members of 4 GiB and more; a lowered limit makes Python's
    # zipfile write them (central-directory extras, ZIP64 end record) for this tiny file too.
    limit, zipfile.ZIP64_LIMIT = zipfile.ZIP64_LIMIT, 16
    np.savez(path("stacked_zip64.npz"), **{r: stacked(r, f4) for r in ("q", "k", "v")})
    zipfile.ZIP64_LIMIT = limit

    # Bad files, one problem each.
    good = {r: stacked(r, f4) for r in ("q", "k", "v")}
    np.savez(path("bad_missing_role.npz"), q=good["q"], k=good["k"])
    np.savez(path("bad_rank.npz"), **{**good, "k": good["k"][0]})
    np.savez(path("bad_batch_dim.npz"), **{**good, "v": good["v"][None]})
    np.savez(path("bad_layer_count.npz"), **{**good, "v": stacked("v", f4, layers=3)})
    np.savez(path("bad_tokens.npz"), **{**good, "v": good["v"][:, :, :4]})
    np.savez(path("bad_head_dim.npz"), **{**good, "k": good["k"][..., :2]})
    np.savez(path("bad_gqa.npz"), **{**good, "q": good["q"][:, :3]})
    np.savez(path("bad_int_dtype.npz"), **{r: a.astype(np.int32) for r, a in good.items()})
    np.savez(path("bad_float64.npz"), **{r: a.astype(np.float64) for r, a in good.items()})
    np.savez(path("bad_mixed_dtype.npz"), **{**good, "v": good["v"].astype(np.float16)})
    nan = {r: a.copy() for r, a in good.items()}
    nan["v"][1, 0, 3, 2] = np.nan  # layer 1, flat index 3*D + 2 = 14 within the layer
    np.savez(path("bad_nan.npz"), **nan)
    layers = per_layer("layers/{l}/{r}", f4)
    del layers["layers/1/k"]
    np.savez(path("bad_missing_layer_role.npz"), **layers)
    np.savez(path("bad_mixed_layout.npz"), **good, layer_0_q=good["q"][0])
    np.savez(path("bad_no_roles.npz"), keys=good["k"], values=good["v"])
    np.savez(path("bad_token_ids.npz"), **good, token_ids=np.arange(4))


if __name__ == "__main__":
    main()
