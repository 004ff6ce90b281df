#!/usr/bin/env python3
"""scripts/kivi_layout.py, the repacking of `kvlab check-attention make` cases into KIVI's cache
layout that scripts/kivi_check_attention.py feeds KIVI's CUDA kernels, checked without a GPU:
1. KIVI's own packing (a numpy port of jy-yuan/KIVI quant/new_pack.py pack_tensor) applied to
   kvlab's codes gives the repacked words, and KIVI's unpack_tensor gives kvlab's codes and
   bytes back: 0 mismatches;
2. KIVI's kernels' indexing (quant/matmul.py cuda_bmm_fA_qB_outer's transposes and
   quant/csrc/gemv_cuda.cu bgemv{2,4}_kernel_outer_dim's word, shift and group index), emulated
   in fp32 on the repacked tensors (scripts/kivi_layout.py), attends as llama_kivi.py does and
   passes `verify`;
3. cases KIVI's layout cannot hold are refused naming file and reason.
Usage: kivi_layout_test.py KVLAB SCRIPTS_DIR WORKDIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, sys.argv[2])  # scripts/
import kivi_layout  # noqa: E402

f32 = np.float32


def pack_tensor(data, bits, pack_dim):
    """new_pack.py pack_tensor: 32/bits codes per int32 along pack_dim, code j at bits [j*b, (j+1)*b)."""
    per = 32 // bits
    shape = list(data.shape)
    shape[pack_dim] //= per
    code = np.zeros(shape, np.uint32)
    for row in range(shape[pack_dim]):
        for j in range(per):
            src = np.take(data, row * per + j, axis=pack_dim).astype(np.uint32)
            idx = [slice(None)] * data.ndim
            idx[pack_dim] = row
            code[tuple(idx)] |= src << np.uint32(bits * j)
    return code.view(np.int32)


def unpack_tensor(code, bits, pack_dim):
    """new_pack.py unpack_tensor: the inverse."""
    per = 32 // bits
    n = code.shape[pack_dim] * per
    words = np.take(code.view(np.uint32), np.arange(n) // per, axis=pack_dim)
    shift = (np.arange(n) % per * bits).astype(np.uint32)
    shape = [1] * code.ndim
    shape[pack_dim] = n
    return (words >> shift.reshape(shape)) & np.uint32(2**bits - 1)


def unpack_kvlab(codes, bits, n):
    """kvlab rows (..., row_bytes), LSB first (FORMATS 2.1) -> codes (..., n)."""
    b = np.unpackbits(codes, axis=-1, bitorder="little")[..., : n * bits]
    return (b.reshape(*codes.shape[:-1], n, bits).astype(np.uint32) << np.arange(bits, dtype=np.uint32)).sum(-1)


def repeat_kv(x, n):
    return np.repeat(x, n, axis=1)


def attend(q, seq, kbits, vbits):
    """kivi_check_attention.py's kivi_attend in numpy fp32: logits in token order (sink, packed,
    fp16 rows), softmax, p . V in the same order."""
    Hq, D = q.shape[1], q.shape[3]
    rep = Hq // seq["k_full"].shape[1]
    S, nk, nv = seq["S"], seq["k_n"], seq["v_n"]
    logits = [q @ repeat_kv(seq["k_sink"].astype(f32), rep).transpose(0, 1, 3, 2)]
    if nk:
        logits.append(kivi_layout.cuda_bmm_fA_qB_outer(seq["k_group"], q, seq["k_quant"], seq["k_scale"], seq["k_mn"], kbits))
    logits.append(q @ repeat_kv(seq["k_full"].astype(f32), rep).transpose(0, 1, 3, 2))
    s = np.concatenate(logits, axis=-1) / f32(np.sqrt(D))
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p[..., :S] @ repeat_kv(seq["v_sink"].astype(f32), rep)
    if nv:
        out += kivi_layout.cuda_bmm_fA_qB_outer(seq["v_group"], p[..., S:S + nv], seq["v_quant"], seq["v_scale"], seq["v_mn"],
                                    vbits)
    return out + p[..., S + nv:] @ repeat_kv(seq["v_full"].astype(f32), rep)


def run(*args, expect_rc=0, expect_text=None):
    r = subprocess.run(args, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode != expect_rc or (expect_text and expect_text not in text):
        sys.exit(f"{' '.join(args)}: exit {r.returncode} (want {expect_rc}), want '{expect_text}' in:\n{text}")
    return text


def check_packing(z, seqs, spec):
    """KIVI's pack_tensor of kvlab's codes == the repacked words; KIVI's unpack_tensor of them ==
    kvlab's codes, repacked LSB first == kvlab's bytes. Returns the number of words compared."""
    words = 0
    for b, seq in enumerate(seqs):
        for role in ("k", "v"):  # KIVI packs both along the last dim (tokens of keys, channels of values)
            n = seq[role + "_n"]
            if n == 0:
                continue
            bits = int(spec[role + "bits"])
            raw = z[f"{role}{b}_codes"]
            codes = unpack_kvlab(raw, bits, raw.shape[-1] * 8 // bits)[None]
            kivi = pack_tensor(codes, bits, 3)
            mism = int((kivi != seq[role + "_quant"]).sum())
            back = unpack_tensor(seq[role + "_quant"], bits, 3)
            mism += int((back != codes).sum())
            rebytes = np.packbits(np.unpackbits(back[0, ..., None].astype(np.uint8), axis=-1, bitorder="little")
                                  [..., :bits].reshape(*back.shape[1:-1], -1), axis=-1, bitorder="little")
            mism += int((rebytes != raw).sum())
            if mism:
                sys.exit(f"sequence {b} {role}: {mism} mismatches between kvlab's codes and KIVI's packing")
            words += kivi.size
    return words


def main():
    kvlab, work = sys.argv[1], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    for method, lengths in (("kivi-2", "300,1000,77,1"), ("kivi-4", "129,1000"), ("kivi-2-sink", "300,1000,5"),
                            ("kivi:kbits=2,vbits=4,group=32,vgroup=16", "100,517")):
        case = os.path.join(work, method.replace(":", "_").replace(",", "_").replace("=", "") + ".npz")
        out = case[:-4] + ".out.npz"
        run(kvlab, "check-attention", "make", "--method", method, "--lengths", lengths, "--heads", "8", "--kv-heads",
            "2", "--out", case)
        _, spec, q, seqs = kivi_layout.read_case(case)
        words = check_packing(np.load(case), seqs, spec)
        res = np.stack([attend(q[b][None, :, None, :], seq, int(spec["kbits"]), int(spec["vbits"]))[0, :, 0]
                        for b, seq in enumerate(seqs)])
        np.savez(out, out=res.astype(f32))
        text = run(kvlab, "check-attention", "verify", case, out, "--operands", "fp32", expect_text="PASS")
        print(f"{method} lengths {lengths}: {words} KIVI words = KIVI's packing of kvlab's codes, 0 mismatches; "
              f"KIVI's kernel indexing emulated: {text.strip().splitlines()[-1]}")
    for method, want in (("kitty", "kivi family only"), ("kivi:params=fp32", "fp16 scales and zeros"),
                         ("kivi:kbits=3", "2 or 4 bits"), ("kivi:group=8", "multiple of 16 tokens"),
                         ("kivi:vgroup=24", "groups a multiple of 16 channels")):
        case = os.path.join(work, "refused.npz")
        run(kvlab, "check-attention", "make", "--method", method, "--lengths", "300", "--heads", "4", "--kv-heads",
            "2", "--out", case)
        try:
            kivi_layout.read_case(case)
            sys.exit(f"{method}: read_case accepted a case KIVI's kernels cannot take")
        except kivi_layout.CaseError as e:
            if want not in str(e) or case not in str(e):
                sys.exit(f"{method}: error '{e}' does not name the file and '{want}'")
            print(f"{method}: refused: {e}")


if __name__ == "__main__":
    main()
