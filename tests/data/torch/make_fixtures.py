#!/usr/bin/python3
"""Writes the torch.save fixtures of tests/io/torch_dump_test.cpp with real PyTorch.

Run with Debian's python and python3-torch (1.13): /usr/bin/python3 tests/data/torch/make_fixtures.py
Written by torch.save itself (not by libtorch's pickle_save) because that is what researchers
have; the files are tiny (L=2, 4 query heads, 2 KV heads, T=5, D=4) and checked in.

Values follow the formula of tests/data/dumps/make_fixtures.py:
    value(role, layer, head, t, d) = role*64 + layer*32 + head*8 + t + d/8 - 128
(role 0..3 = q, k, v, k_pre_rope), exact in float16 and float32; the bfloat16 file holds it
rounded to bfloat16 (round to nearest even, as torch's .bfloat16() does).
"""
import os

import torch

L, HQ, HKV, T, D = 2, 4, 2, 5, 4
ROLES = ["q", "k", "v", "k_pre_rope"]
OUT = os.path.dirname(os.path.abspath(__file__))


def layer_tensor(role, layer, dtype):
    h = HQ if role == "q" else HKV
    i = torch.arange(h, dtype=torch.float64).view(h, 1, 1)
    t = torch.arange(T, dtype=torch.float64).view(1, T, 1)
    d = torch.arange(D, dtype=torch.float64).view(1, 1, D)
    return (ROLES.index(role) * 64 + layer * 32 + i * 8 + t + d / 8 - 128).to(dtype)


def stacked(role, dtype):
    return torch.stack([layer_tensor(role, l, dtype) for l in range(L)])


def path(name):
    return os.path.join(OUT, name)


def save(obj, name):
    torch.save(obj, path(name))  # the same bytes on every run (only bad_legacy.pt differs: object ids)


def main():
    f4, f2, bf = torch.float32, torch.float16, torch.bfloat16
    # A dict of stacked tensors with metadata of each accepted kind.
    save({**{r: stacked(r, f4) for r in ROLES},
          "token_ids": [1, 22, 333, 4444, 5], "rope_theta": 500000.0, "rope_style": "halves",
          "model": "tiny-model", "text": "Once upon a time"}, "stacked.pt")
    # Per-layer keys, float16; one tensor non-contiguous (a transposed view) and token_ids a tensor.
    per_layer = {f"layers/{l}/{r}": layer_tensor(r, l, f2) for l in range(L) for r in ("q", "k", "v")}
    per_layer["layers/1/v"] = per_layer["layers/1/v"].transpose(1, 2).contiguous().transpose(1, 2)
    assert not per_layer["layers/1/v"].is_contiguous()
    per_layer["token_ids"] = torch.tensor([7, 8, 9, 10, 11], dtype=torch.int32)
    save(per_layer, "per_layer.pt")
    # A list of (q, k, v) tuples, bfloat16, each a view into one stacked storage.
    q, k, v = (stacked(r, bf) for r in ("q", "k", "v"))
    save([(q[l], k[l], v[l]) for l in range(L)], "triples.pt")
    # Files the reader must reject, with a message saying what to do.
    save([(k[l], v[l]) for l in range(L)], "bad_kv_pairs.pt")
    save([(q[0], k[0], v[0]), (q[1], k[1], v[1][:, :4])], "bad_triple_tokens.pt")
    save(stacked("k", f4), "bad_single_tensor.pt")
    save({r: stacked(r, f4).double() for r in ("q", "k", "v")}, "bad_float64.pt")
    torch.save({"q": stacked("q", f4)}, path("bad_legacy.pt"), _use_new_zipfile_serialization=False)
    # As if saved on a GPU (the storages' location says cuda:0); this machine needs no GPU.
    tag, torch.serialization.location_tag = torch.serialization.location_tag, lambda storage: "cuda:0"
    save({r: stacked(r, f4) for r in ("q", "k", "v")}, "bad_cuda.pt")
    torch.serialization.location_tag = tag


if __name__ == "__main__":
    main()
