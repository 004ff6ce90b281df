#!/usr/bin/env python3
"""Time torch's scaled_dot_product_attention (fp16, flash backend) on the shapes of a
`kvlab-gpu attend-bench --csv` file, on the same GPU, and print the joined table
(markdown): kvlab's decode kernel, SDPA, kvlab dequantize + SDPA, speed-ups, bandwidth.
Usage: attend_sdpa.py BENCH.csv [--out TABLE.md] [--reps N]"""
import argparse
import csv
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

GOALS = {"int8": 1.8, "kivi-4": 3.4, "kitty": 4.8, "kivi-2": 5.8, "CQ-4c8b": 4.5}  # speed-up over SDPA at B=8, L=32K


def median_ms(f, reps, flush):
    f()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()  # evict L2, as the kvlab side does
        start.record()
        f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def sdpa_time(B, L, Hq, Hkv, D, reps, flush):
    q = torch.randn(B, Hq, 1, D, device="cuda", dtype=torch.float16)
    k = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.float16)
    v = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.float16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            path = "flash, enable_gqa"
            ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), reps, flush)
        except RuntimeError:
            # the query heads of a KV group as rows of one query block (no mask: same result)
            q2 = q.view(B, Hkv, Hq // Hkv, D)
            path = "flash, group heads as query rows"
            ms = median_ms(lambda: F.scaled_dot_product_attention(q2, k, v), reps, flush)
    del q, k, v
    torch.cuda.empty_cache()
    return ms, path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    shapes = sorted({(int(r["B"]), int(r["L"]), int(r["Hq"]), int(r["Hkv"]), int(r["D"])) for r in rows})
    sdpa = {s: sdpa_time(*s, a.reps, flush) for s in shapes}
    copy = float(rows[0]["copy_gbps"])
    out = [f"GPU: {rows[0]['device']} ({torch.cuda.get_device_name()}), torch {torch.__version__}; "
           f"copy {copy:.0f} GB/s (read + write); SDPA path: {sorted({p for _, p in sdpa.values()})}", "",
           "| method | kernel | B | L | splits | cache MB | kvlab ms | SDPA fp16 ms | speed-up | dequant+SDPA ms | "
           "kvlab GB/s | of copy | SDPA of copy |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        B, L, Hq, Hkv, D = int(r["B"]), int(r["L"]), int(r["Hq"]), int(r["Hkv"]), int(r["D"])
        ms, s_ms = float(r["ms"]), sdpa[(B, L, Hq, Hkv, D)][0]
        dq = float(r["dequant_ms"])  # < 0: kvlab has no dequantize kernel for the format (codebooks)
        dq_sdpa = "n/a" if dq < 0 else f"{(dq + s_ms) if dq > 0 else s_ms:.4f}"
        sdpa_bytes = 2 * B * Hkv * L * D * 2
        out.append(f"| {r['method']} | {r.get('kernel', 'split')} | {B} | {L} | {r['splits']} | {int(r['bytes']) / 1e6:.1f} | {ms:.4f} | "
                   f"{s_ms:.4f} | {s_ms / ms:.2f}x | {dq_sdpa} | {float(r['gbps']):.0f} | "
                   f"{100 * float(r['of_copy']):.1f}% | {100 * sdpa_bytes / (s_ms * 1e6) / copy:.1f}% |")
    out += ["", "Goals (B=8, L=32768):"]
    for r in rows:
        if int(r["B"]) == 8 and int(r["L"]) == 32768 and r["method"] in GOALS:
            sp = sdpa[(8, 32768, int(r["Hq"]), int(r["Hkv"]), int(r["D"]))][0] / float(r["ms"])
            g = GOALS[r["method"]]
            out.append(f"- {r['method']} ({r.get('kernel', 'split')}): {sp:.2f}x vs goal {g}x: {'met' if sp >= g else 'MISSED'}")
    text = "\n".join(out) + "\n"
    print(text)
    if a.out:
        tmp = a.out + ".tmp"
        open(tmp, "w").write(text)
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
