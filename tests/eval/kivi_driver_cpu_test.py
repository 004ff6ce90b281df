#!/usr/bin/env python3
"""scripts/kivi_check_attention.py's attention (llama_kivi.py's decode branch in torch fp16) on
the CPU, with KIVI's CUDA kernel replaced by its numpy emulation (scripts/kivi_layout.py, fp32
sums, output rounded to fp16 as the kernel does): its outputs pass `kvlab check-attention verify
--operands fp16`, and scripts/kivi_parts_check.py finds the saved kernel parts within one fp16
rounding. Everything the GPU run does but build and call KIVI's extension.
Usage: kivi_driver_cpu_test.py KVLAB SCRIPTS_DIR WORKDIR (a python with torch and numpy)"""
import os
import subprocess
import sys

import numpy as np
import torch

kvlab, scripts, work = sys.argv[1:4]
sys.path.insert(0, scripts)
import kivi_check_attention  # noqa: E402
import kivi_layout  # noqa: E402
import kivi_parts_check  # noqa: E402


def bmm(G, fA, qB, scales, zeros, bits):
    """KIVI's cuda_bmm_fA_qB_outer on the CPU: the numpy emulation, fp16 out."""
    c = kivi_layout.cuda_bmm_fA_qB_outer(G, fA.float().numpy(), qB.numpy(), scales.numpy(), zeros.numpy(), bits)
    return torch.from_numpy(c).half()


def main():
    os.makedirs(work, exist_ok=True)
    for method, lengths in (("kivi-2", "300,1000,77,1"), ("kivi-4", "640"), ("kivi-2-sink", "300,5,700")):
        name = method.replace("-", "_")
        case = os.path.join(work, name + ".npz")
        subprocess.run([kvlab, "check-attention", "make", "--method", method, "--lengths", lengths, "--out", case],
                       check=True, capture_output=True)
        kivi_check_attention.run_case(bmm, case, work, device="cpu")
        r = subprocess.run([kvlab, "check-attention", "verify", case, os.path.join(work, name + ".out.npz"),
                            "--operands", "fp16"], capture_output=True, text=True)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr
        if r.returncode != 0 or not last.startswith("PASS"):
            sys.exit(f"{method}: verify exit {r.returncode}: {last}")
        worst = kivi_parts_check.worst_errors(case, os.path.join(work, name + ".parts.npz"))
        if not (0 < worst["qk"] <= 1.05 and 0 < worst["pv"] <= 1.05):  # one rounding + fp32 sums
            sys.exit(f"{method}: kernel parts off by more than one fp16 rounding (or not saved): {worst}")
        print(f"{method} lengths {lengths}: {last}; parts within {max(worst.values()):.3f} u")
    # a file KIVI's kernels cannot take is refused by name, before any kernel runs
    bad = os.path.join(work, "int8.npz")
    subprocess.run([kvlab, "check-attention", "make", "--method", "int8", "--lengths", "50", "--out", bad], check=True,
                   capture_output=True)
    try:
        kivi_check_attention.run_case(bmm, bad, work, device="cpu")
        sys.exit("an int8 case was accepted")
    except kivi_layout.CaseError as e:
        print(f"int8: refused: {e}")
    if np.load(os.path.join(work, "kivi_2.out.npz"))["out"].dtype != np.float16:
        sys.exit("out is not float16")


if __name__ == "__main__":
    main()
