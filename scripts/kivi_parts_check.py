#!/usr/bin/env python3
"""Where the error of KIVI's kernels comes from: the parts scripts/kivi_check_attention.py saved
(the kernel's fp16 logits 'qk{b}', and its fp16 'pv{b}' with the fp16 probabilities 'p{b}' it was
fed) against fp64 products of the same inputs (q rounded to fp16 as KIVI's model holds it; K_hat
and V_hat dequantized in fp64 from the words of scripts/kivi_layout.py). Errors are printed in units of
fp16's unit roundoff u = 2^-11 times the size the kernel's errors scale with: sum_c |q_c k_tc| for
a logit (fp32 sums, stored in fp16), max |V_hat| of the head for p.V (stored in fp16).
Usage: kivi_parts_check.py CASE.npz PARTS.npz"""
import sys

import numpy as np

import kivi_layout

U16 = 2.0**-11


def dequant(seq, role, bits):
    """K_hat (Hkv, D, n) or V_hat (Hkv, n, D) in fp64 from KIVI's words, groups along the last dim."""
    words = seq[role + "_quant"][0].view(np.uint32)
    per = 32 // bits
    i = np.arange(words.shape[-1] * per)
    codes = (words[..., i // per] >> (bits * (i % per)).astype(np.uint32)) & np.uint32(2**bits - 1)
    g = i // seq[role + "_group"]
    return seq[role + "_scale"][0][..., g].astype(np.float64) * codes + seq[role + "_mn"][0][..., g]


def worst_errors(case, parts):
    """Prints each sequence's kernel errors; returns the worst, {'qk': .., 'pv': ..} in the units above."""
    _, spec, q, seqs = kivi_layout.read_case(case)
    z = np.load(parts)
    Hq = q.shape[1]
    worst = {"qk": 0.0, "pv": 0.0}
    for b, seq in enumerate(seqs):
        kv = np.arange(Hq) // (Hq // seq["k_full"].shape[1])
        if seq["k_n"]:
            k = dequant(seq, "k", int(spec["kbits"]))[kv]  # (Hq, D, n)
            q16 = q[b].astype(np.float16).astype(np.float64)
            exact = np.einsum("hd,hdt->ht", q16, k)
            scale = np.einsum("hd,hdt->ht", np.abs(q16), np.abs(k))  # sum_c |q_c k_tc|
            err = float((np.abs(z[f"qk{b}"] - exact) / (U16 * scale)).max())
            worst["qk"] = max(worst["qk"], err)
            print(f"sequence {b}: kernel logits, {seq['k_n']} packed keys: max |qk - q.K_hat| = {err:.3f} u sum|q k|")
        if seq["v_n"]:
            S, n = seq["S"], seq["v_n"]
            v = dequant(seq, "v", int(spec["vbits"]))[kv]  # (Hq, n, D)
            exact = np.einsum("ht,htd->hd", z[f"p{b}"][:, S:S + n].astype(np.float64), v)
            err = float((np.abs(z[f"pv{b}"] - exact) / (U16 * np.abs(v).max(axis=(1, 2))[:, None])).max())
            worst["pv"] = max(worst["pv"], err)
            print(f"sequence {b}: kernel p.V, {n} packed values: max |pv - p.V_hat| = {err:.3f} u max|V_hat|")
    return worst


def main():
    case, parts = sys.argv[1:3]
    worst = worst_errors(case, parts)
    print(f"{case}: worst logit error {worst['qk']:.3f} u sum|q k|, worst p.V error {worst['pv']:.3f} u max|V_hat|")


if __name__ == "__main__":
    main()
