"""Compare two `kvlab eval --format json` files number by number (timings aside).

Usage: compare_eval_json.py CPU.json GPU.json [BOUND [LOOSE]]
Prints the largest relative difference of each field (list indices folded) and exits 1 when one
exceeds its bound (docs/EVAL_JSON.md, "Devices"): the dump's attention score MSE, output error
and KL within BOUND (default 1e-6); the per-layer and per-head attention figures and every top-8
overlap within LOOSE (default 5e-2: the CPU's fp32 rounding on heads with tiny errors, and fp32
near-ties in top-8); every other number (reconstruction errors, bits, counts) and every string
identical.
"""
import json
import math
import sys

SKIP = {"timing_s", "threads", "tiles"}
ATTENTION = {"attn_score_mse", "attn_output_rel_err", "kl", "topk_overlap"}


def bound_of(path, bound, loose):
    name = path.rsplit(".", 1)[-1]
    if name not in ATTENTION:
        return 0.0
    return bound if path.count("[]") == 1 and name != "topk_overlap" else loose


def walk(a, b, path, worst, errors):
    if isinstance(a, dict):
        if set(a) != set(b):
            errors.append(f"{path}: keys differ: {sorted(set(a) ^ set(b))}")
            return
        for k in a:
            if k not in SKIP:
                walk(a[k], b[k], f"{path}.{k}", worst, errors)
    elif isinstance(a, list):
        if len(a) != len(b):
            errors.append(f"{path}: {len(a)} vs {len(b)} entries")
            return
        for x, y in zip(a, b):
            walk(x, y, path + "[]", worst, errors)
    elif isinstance(a, bool) or isinstance(a, str) or a is None or isinstance(a, int) and isinstance(b, int):
        if a != b:
            errors.append(f"{path}: {a!r} vs {b!r}")
    else:
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            r = 0.0 if math.isnan(a) and math.isnan(b) else math.inf
        else:
            m = max(abs(a), abs(b))
            r = 0.0 if m == 0 else abs(a - b) / m
        worst[path] = max(worst.get(path, 0.0), r)


def main():
    cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
    bound = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
    loose = float(sys.argv[4]) if len(sys.argv) > 4 else 5e-2
    worst, errors = {}, []
    walk(cpu, gpu, "", worst, errors)
    for path, r in sorted(worst.items()):
        if r > 0:
            print(f"{path:50s} max relative difference {r:.3g} (bound {bound_of(path, bound, loose):g})")
    over = {p: r for p, r in worst.items() if r > bound_of(p, bound, loose)}
    print(f"{len(worst)} numeric fields, largest relative difference {max(worst.values(), default=0):.3g}")
    for e in errors:
        print("MISMATCH", e)
    for p, r in over.items():
        print(f"OVER BOUND {p}: {r:.3g}")
    sys.exit(1 if errors or over else 0)


if __name__ == "__main__":
    main()
