#!/usr/bin/env python3
"""KIVI's own CUDA kernels on `kvlab check-attention make` cases (docs/FORMATS.md 9.4).

Builds KIVI's extension (jy-yuan/KIVI quant/csrc, a torch extension) from its source with
torch.utils.cpp_extension, imports KIVI's quant/matmul.py, and runs the decode attention the way
KIVI's models/llama_kivi.py does (LlamaFlashAttention_KIVI, decode branch): q . K_hat^T of the
packed keys by cuda_bmm_fA_qB_outer (KIVI's kernel, fp16 output), q . K^T of the fp16 rows by
torch.matmul, the logits concatenated and divided by sqrt(D) in fp16, softmax in fp32 cast to
fp16, p . V_hat of the packed values by cuda_bmm_fA_qB_outer, plus torch.matmul over the fp16
rows, in fp16. KIVI has no sink: kvlab's sink rows (tokens [0, S)) take the fp16-row path too.
KIVI batches equal lengths only, so each sequence runs as KIVI batch 1 (GQA: the kernel maps
query head h to KV head h / (Hq / Hkv), as kvlab does).

Writes DIR/NAME.out.npz per case ('out' (B, Hq, D) float16, for `kvlab check-attention verify
CASE OUT --operands fp16`) and DIR/NAME.parts.npz (per sequence b: the kernel's logits
'qk{b}' (Hq, n_k) fp16 and its 'pv{b}' (Hq, D) fp16 with the probabilities 'p{b}' (Hq, L) it
was fed), to attribute errors. --bench 2 4 times KIVI's kernels at B=8, L=32K, kivi-2 and kivi-4.
Usage: kivi_check_attention.py --kivi KIVI_DIR --out-dir DIR [--bench BITS...] [CASE.npz ...]"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kivi_layout  # noqa: E402
from attend_sdpa import median_ms  # noqa: E402  (L2 evicted before each run, as attend-bench)

# KIVI's quant/setup.py nvcc flags, less -std=c++17: newer torch headers refuse C++17 (2.15:
# '#error C++20 or later compatible compiler is required'), so the standard is torch's own.
NVCC_FLAGS = ["-O3", "-DENABLE_BF16", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
              "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "--threads=8"]


def build_kivi(kivi_dir, build_dir):
    """KIVI's extension, and KIVI's cuda_bmm_fA_qB_outer (quant/matmul.py imports it as kivi_gemv)."""
    from torch.utils.cpp_extension import load
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.makedirs(build_dir, exist_ok=True)
    csrc = os.path.join(kivi_dir, "quant", "csrc")
    ext = load("kivi_gemv", [os.path.join(csrc, "pybind.cpp"), os.path.join(csrc, "gemv_cuda.cu")],
               extra_cflags=["-O3", "-fopenmp", "-DENABLE_BF16"], extra_cuda_cflags=NVCC_FLAGS,
               build_directory=build_dir)
    sys.modules["kivi_gemv"] = ext
    sys.path.insert(0, kivi_dir)
    from quant.matmul import cuda_bmm_fA_qB_outer
    return ext, cuda_bmm_fA_qB_outer


def repeat_kv(x, n):
    """transformers' repeat_kv: (B, Hkv, L, D) -> (B, Hkv * n, L, D), query head h on KV head h // n."""
    B, H, L, D = x.shape
    return x[:, :, None].expand(B, H, n, L, D).reshape(B, H * n, L, D)


def kivi_attend(bmm, q, seq, kbits, vbits):
    """One sequence, as llama_kivi.py's decode branch. q (1, Hq, 1, D) fp16; returns the output
    (1, Hq, 1, D) fp16 and the kernels' parts."""
    Hq, D = q.shape[1], q.shape[3]
    t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(q.device)
         for k, v in seq.items() if isinstance(v, np.ndarray)}
    rep = Hq // t["k_full"].shape[1]
    S, nk, nv = seq["S"], seq["k_n"], seq["v_n"]
    logits, parts = [], {}
    if S:
        logits.append(torch.matmul(q, repeat_kv(t["k_sink"], rep).transpose(2, 3)))
    if nk:
        qk = bmm(seq["k_group"], q, t["k_quant"], t["k_scale"], t["k_mn"], kbits)
        parts["qk"] = qk
        logits.append(qk)
    if t["k_full"].shape[2]:
        logits.append(torch.matmul(q, repeat_kv(t["k_full"], rep).transpose(2, 3)))
    attn_weights = torch.cat(logits, dim=-1) / math.sqrt(D)
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
    parts["p"] = attn_weights
    if nv == 0:  # KIVI: value_states_quant is None
        v = torch.cat([t["v_sink"], t["v_full"]], dim=2)
        return torch.matmul(attn_weights, repeat_kv(v, rep)), parts
    out = bmm(seq["v_group"], attn_weights[:, :, :, S:S + nv].contiguous(), t["v_quant"], t["v_scale"],
              t["v_mn"], vbits)
    parts["pv"] = out.clone()
    if t["v_full"].shape[2]:
        out += torch.matmul(attn_weights[:, :, :, S + nv:], repeat_kv(t["v_full"], rep))
    if S:
        out += torch.matmul(attn_weights[:, :, :, :S], repeat_kv(t["v_sink"], rep))
    return out, parts


def save_npz(path, **arrays):
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def run_case(bmm, case, out_dir, device="cuda"):
    """One case file through kivi_attend; writes NAME.out.npz and NAME.parts.npz to out_dir."""
    method, spec, q, seqs = kivi_layout.read_case(case)
    out = np.empty(q.shape, np.float16)
    parts = {}
    for b, seq in enumerate(seqs):
        qb = torch.from_numpy(q[b]).to(device).half()[None, :, None, :]
        o, p = kivi_attend(bmm, qb, seq, int(spec["kbits"]), int(spec["vbits"]))
        out[b] = o[0, :, 0].cpu().numpy()
        parts.update({f"{k}{b}": v[0, :, 0].cpu().numpy() for k, v in p.items()})
    name = os.path.basename(case).removesuffix(".npz")
    save_npz(os.path.join(out_dir, name + ".out.npz"), out=out)
    save_npz(os.path.join(out_dir, name + ".parts.npz"), **parts)
    print(f"{name}: {method}, lengths {[s['L'] for s in seqs]}, packed keys {[s['k_n'] for s in seqs]}, "
          f"values {[s['v_n'] for s in seqs]}: out {out.shape} written")


def bench(ext, bmm, reps, bits):
    """KIVI's kernels at B=8, L=32768, 32/8 heads, D=128, kivi-2 or kivi-4 (G = Gv = 128, residual
    128): kvlab's schedule packs all 32768 keys and 32640 values. Random codes and parameters."""
    B, Hq, Hkv, D, L, G, R = 8, 32, 8, 128, 32768, 128, 128
    nv, f = L - R, 32 // bits
    torch.manual_seed(0)

    def params(*shape):
        return (torch.rand(*shape, device="cuda") * 0.1 + 0.01).half(), (torch.randn(*shape, device="cuda")).half()

    def codes(*shape):
        return torch.randint(-2**31, 2**31 - 1, shape, device="cuda", dtype=torch.int32)
    kq, (ks, kz) = codes(B, Hkv, D, L // f), params(B, Hkv, D, L // G)
    vq, (vs, vz) = codes(B, Hkv, nv, D // f), params(B, Hkv, nv, D // G)
    vfull = torch.randn(B, Hkv, R, D, device="cuda").half()
    q = torch.randn(B, Hq, 1, D, device="cuda").half()
    p = torch.softmax(torch.randn(B, Hq, 1, L, device="cuda"), -1).half()
    # the raw kernel calls on operands already in the kernel's order (cuda_bmm_fA_qB_outer
    # transposes and copies codes, scales and zeros on every call)
    kq_t = kq.reshape(-1, D, L // f).transpose(1, 2).contiguous()
    ks_t, kz_t = (x.reshape(-1, D, L // G).transpose(1, 2).contiguous() for x in (ks, kz))
    vq_t = vq.reshape(-1, nv, D // f).transpose(1, 2).contiguous()
    vs_t, vz_t = (x.reshape(-1, nv, D // G).transpose(1, 2).contiguous() for x in (vs, vz))
    qf, pf = q.view(-1, 1, D).contiguous(), p[..., :nv].reshape(-1, 1, nv).contiguous()

    def step():
        s = bmm(G, q, kq, ks, kz, bits) / math.sqrt(D)
        w = torch.softmax(s, dim=-1, dtype=torch.float32).half()
        o = bmm(G, w[..., :nv].contiguous(), vq, vs, vz, bits)
        o += torch.matmul(w[..., nv:], repeat_kv(vfull, Hq // Hkv))
        return o
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), reps, flush)
    copy_gbps = 2 * src.numel() / (copy_ms * 1e6)
    kbytes = kq.numel() * 4 + 2 * ks.numel() * 2
    vbytes = vq.numel() * 4 + 2 * vs.numel() * 2
    rows = [("q.K_hat kernel (gemv_forward_cuda_outer_dim)", kbytes,
             lambda: ext.gemv_forward_cuda_outer_dim(qf, kq_t, ks_t, kz_t, bits, G, Hq, Hkv)),
            ("p.V_hat kernel (gemv_forward_cuda_outer_dim)", vbytes,
             lambda: ext.gemv_forward_cuda_outer_dim(pf, vq_t, vs_t, vz_t, bits, G, Hq, Hkv)),
            ("q.K_hat as the model calls it (cuda_bmm_fA_qB_outer)", kbytes, lambda: bmm(G, q, kq, ks, kz, bits)),
            ("p.V_hat as the model calls it (cuda_bmm_fA_qB_outer)", vbytes,
             lambda: bmm(G, p[..., :nv].contiguous(), vq, vs, vz, bits)),
            ("decode step as llama_kivi.py (both + softmax + fp16 rows)", kbytes + vbytes + vfull.numel() * 2, step)]
    print(f"KIVI bench: {torch.cuda.get_device_name()}, torch {torch.__version__}, B={B} L={L} Hq={Hq} Hkv={Hkv} "
          f"D={D} kivi-{bits} (G=128), median of {reps} after a 256 MiB L2-evicting write; copy {copy_gbps:.0f} GB/s")
    print("| what | ms | packed MB read | GB/s | of copy |\n|---|---|---|---|---|")
    for name, nbytes, f in rows:
        ms = median_ms(f, reps, flush)
        print(f"| {name} | {ms:.4f} | {nbytes / 1e6:.1f} | {nbytes / (ms * 1e6):.0f} | "
              f"{100 * nbytes / (ms * 1e6) / copy_gbps:.1f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--kivi", required=True, help="KIVI source tree (jy-yuan/KIVI)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--build-dir", default="/tmp/kivi_gemv_build")
    ap.add_argument("--bench", type=int, nargs="*", choices=(2, 4), help="time kivi-BITS at B=8, L=32K (2 and 4)")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    ext, bmm = build_kivi(a.kivi, a.build_dir)
    print(f"built KIVI's extension: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name()}, arch {os.environ['TORCH_CUDA_ARCH_LIST']}")
    for case in a.cases:
        try:
            run_case(bmm, case, a.out_dir)
        except kivi_layout.CaseError as e:
            sys.exit(f"kivi_check_attention: {e}")
    for bits in a.bench or []:
        bench(ext, bmm, a.reps, bits)


if __name__ == "__main__":
    main()
