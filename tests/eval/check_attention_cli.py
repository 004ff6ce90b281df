#!/usr/bin/env python3
"""kvlab check-attention end to end. A decode-attention implementation written from
docs/FORMATS.md sections 9.1 and 9.4 alone (numpy, fp32) runs on a case from `make`; `verify`
passes it, and fails the same output with one value off, naming sequence, head and channel.
Usage: check_attention_cli.py KVLAB WORKDIR"""
import os
import subprocess
import sys

import numpy as np


def unpack(codes, bits, n):
    """LSB-first packed rows (..., row_bytes) -> integer codes (..., n) as float32."""
    b = np.unpackbits(codes, axis=-1, bitorder="little")[..., : n * bits]
    b = b.reshape(*codes.shape[:-1], n, bits).astype(np.uint32)
    return (b << np.arange(bits, dtype=np.uint32)).sum(-1).astype(np.float32)


def role_hat(z, role, b, L, S, spec):
    """K_hat or V_hat (Hkv, L, D) of sequence b: fp16 rows, and the packed tokens dequantized
    as code * scale + zero in fp32 (two roundings, section 3.1)."""
    n = int(z[f"{role}{b}_packed"][0])
    fp = z[f"{role}{b}_fp16"].astype(np.float32)
    Hkv, _, D = fp.shape
    hat = np.empty((Hkv, L, D), np.float32)
    hat[:, :S] = fp[:, :S]
    hat[:, S + n :] = fp[:, S:]
    if n:
        bits = int(spec["kbits" if role == "k" else "vbits"])
        scale = z[f"{role}{b}_scale"].astype(np.float32)
        zero = z[f"{role}{b}_zero"].astype(np.float32)
        if role == "k":  # rows are channels, codes run along tokens, groups of G tokens
            G = n if spec["group"] == "all" else int(spec["group"])
            codes = unpack(z[f"{role}{b}_codes"], bits, n)  # (Hkv, D, n)
            g = np.arange(n) // G
            hat[:, S : S + n] = np.transpose(codes * scale[:, :, g] + zero[:, :, g], (0, 2, 1))
        else:  # rows are tokens, codes run along channels, groups of G channels
            G = D if spec["vgroup"] == "all" else int(spec["vgroup"])
            codes = unpack(z[f"{role}{b}_codes"], bits, D)  # (Hkv, n, D)
            g = np.arange(D) // G
            hat[:, S : S + n] = codes * scale[:, :, g] + zero[:, :, g]
    return hat


def attend(case):
    z = np.load(case)
    method = bytes(z["method"]).decode()
    assert method.startswith("kivi:"), method
    spec = dict(kv.split("=") for kv in method.split(":", 1)[1].split(","))
    q = z["q"]
    B, Hq, D = q.shape
    out = np.empty_like(q)
    for b in range(B):
        L, S = int(z["lengths"][b]), int(z["sink"][b])
        k, v = role_hat(z, "k", b, L, S, spec), role_hat(z, "v", b, L, S, spec)
        group = Hq // k.shape[0]
        for h in range(Hq):
            s = (k[h // group] @ q[b, h]) / np.float32(np.sqrt(D))
            p = np.exp(s - s.max())
            out[b, h] = (p @ v[h // group]) / p.sum()
    return out


def run(*args, expect_rc, expect_text=None):
    r = subprocess.run(args, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode != expect_rc or (expect_text and expect_text not in text):
        sys.exit(f"{' '.join(args)}: exit {r.returncode} (want {expect_rc}), want '{expect_text}' in:\n{text}")
    return text


def main():
    kvlab, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    case, good, bad, wrong = (os.path.join(work, n) for n in ("case.npz", "good.npz", "bad.npz", "wrong.npz"))
    run(kvlab, "check-attention", "make", "--method", "kivi-2", "--lengths", "300,1000,77", "--heads", "8",
        "--kv-heads", "2", "--out", case, expect_rc=0)
    out = attend(case)
    np.savez(good, out=out)
    run(kvlab, "check-attention", "verify", case, good, "--operands", "fp32", expect_rc=0, expect_text="PASS: 24 of 24")
    out[1, 5, 7] += 0.05
    np.savez(bad, out=out)
    run(kvlab, "check-attention", "verify", case, bad, "--operands", "fp32", expect_rc=1,
        expect_text="FAIL: sequence 1, head 5, channel 7")
    np.savez(wrong, out=out[:, :4])
    run(kvlab, "check-attention", "verify", case, wrong, expect_rc=1, expect_text="member 'out'")
    print("check-attention: a numpy kernel from the documented layout passes; one value off fails by name")


if __name__ == "__main__":
    main()
