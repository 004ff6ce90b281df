#!/usr/bin/python3
"""Key-channel and layer sensitivity at model level against tensor level (issue 14 part 5).

On the first WINDOW tokens of a text: for every layer and every group of RoPE channel pairs
(halves layout: pairs (i, i + D/2), groups of PAIRS pairs), `kvlab ppl` quantizes only those key
channels of that layer with kivi-2's key quantizer (2 bits, groups of 128 tokens, no sink; values
and all other channels fp16) and records KL(p_fp16 || p) of the next-token distribution. The
same cells are scored at tensor level by `kvlab sensitivity` on a dump of the same tokens
(attention-score MSE of each channel quantized alone, summed over the group's channels and the
heads) and by the magnitude heuristic (mean |k|, summed the same way). Layers alone: kivi-2 on
one layer's whole cache (`--quant-layers L`) against `kvlab eval`'s per-layer score MSE and KL.
Prints Spearman rank correlations and top-k overlaps (docs/RESULTS.md).

usage: scripts/model_sensitivity.py [--kvlab build/experiments/kvlab] [--model data/kvlab-ref-18m]
                                    [--window 512] [--pairs 8] --work DIR
"""
import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def ranks(x):
    """Ranks with ties averaged (for Spearman)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def spearman(a, b):
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def top_overlap(a, b, k):
    return len(set(np.argsort(a)[-k:]) & set(np.argsort(b)[-k:])) / k


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kvlab", default="build/experiments/kvlab")
    p.add_argument("--model", default="data/kvlab-ref-18m")
    p.add_argument("--text", default=None, help="default: MODEL/heldout.txt")
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--pairs", type=int, default=8, help="RoPE channel pairs per group")
    p.add_argument("--work", required=True)
    a = p.parse_args()
    kv, w = a.kvlab, a.work
    os.makedirs(w, exist_ok=True)
    text = a.text or os.path.join(a.model, "heldout.txt")
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    L, D = cfg["num_hidden_layers"], cfg["head_dim"]
    half = D // 2
    groups = half // a.pairs

    ids_all, ids = os.path.join(w, "ids_all.txt"), os.path.join(w, "ids.txt")
    run([kv, "tokenize", "--model", a.model, "--prompt-file", text, "--out", ids_all])
    toks = open(ids_all).read().replace(",", " ").split()[: a.window]
    open(ids, "w").write(" ".join(toks) + "\n")
    dump = os.path.join(w, "d.h5")
    run([kv, "dump", "--model", a.model, "--tokens", ids, "--steps", "0", "--out", dump])

    ppl = [kv, "ppl", "--model", a.model, "--tokens", ids, "--methods", "kivi-2", "--prompt-tokens", "1",
           "--generate", "1", "--quiet", "--format", "json"]

    def kl(extra):
        out = os.path.join(w, "p.json")
        run(ppl + extra + ["--out", out])
        return json.load(open(out))["methods"][1]["kl_mean"]

    # tensor level: per (layer, kv head, q head, channel) score MSE and mean |k|
    sens = os.path.join(w, "sens.csv")
    run([kv, "sensitivity", dump, "--bits", "2", "--group", "128", "--sink", "0", "--quiet", "--out", sens])
    tmse, tmag = np.zeros((L, groups)), np.zeros((L, groups))
    for r in csv.DictReader(open(sens)):
        c = int(r["channel"]) % half // a.pairs
        tmse[int(r["layer"]), c] += float(r["attn_score_mse"])
        tmag[int(r["layer"]), c] += float(r["mean_abs"])

    mkl = np.zeros((L, groups))
    for layer in range(L):
        for g in range(groups):
            lo, hi = g * a.pairs, (g + 1) * a.pairs - 1
            chans = f"{lo}-{hi},{lo + half}-{hi + half}"
            mkl[layer, g] = kl(["--quant-layers", str(layer), "--key-channels", chans])
            print(f"layer {layer} pairs {lo}-{hi}: KL {mkl[layer, g]:.4g}", file=sys.stderr, flush=True)

    # layers alone
    lkl = [kl(["--quant-layers", str(layer)]) for layer in range(L)]
    ev = os.path.join(w, "eval.json")
    run([kv, "eval", dump, "--methods", "kivi-2", "--format", "json", "--out", ev, "--quiet"])
    per_layer = json.load(open(ev))["methods"][0]["layers"]
    lmse = [x["attn_score_mse"] for x in per_layer]
    lakl = [x["kl"] for x in per_layer]

    k = max(1, mkl.size // 6)
    print(f"cells: {L} layers x {groups} groups of {a.pairs} RoPE pairs, window {a.window}")
    print("model KL per cell (rows: layers):")
    for layer in range(L):
        print("  " + " ".join(f"{v:.2e}" for v in mkl[layer]))
    for name, t in (("tensor score MSE", tmse), ("magnitude mean|k|", tmag)):
        per = [spearman(mkl[l], t[l]) for l in range(L)]
        print(f"{name}: Spearman over all cells {spearman(mkl.ravel(), t.ravel()):.3f}; within layers "
              f"mean {np.mean(per):.3f} (min {min(per):.3f}, max {max(per):.3f}); top-{k} overlap "
              f"{top_overlap(mkl.ravel(), t.ravel(), k):.2f}")
    print("layers alone (kivi-2 on one layer): model KL " + " ".join(f"{v:.3e}" for v in lkl))
    print("  tensor score MSE " + " ".join(f"{v:.3e}" for v in lmse) +
          f"; Spearman with model KL {spearman(lkl, lmse):.3f}")
    print("  tensor attention KL " + " ".join(f"{v:.3e}" for v in lakl) +
          f"; Spearman with model KL {spearman(lkl, lakl):.3f}")


if __name__ == "__main__":
    main()
