"""A `kvlab check-attention make` case (docs/FORMATS.md 9.4) in KIVI's cache layout: the tensors
that jy-yuan/KIVI's models/llama_kivi.py keeps in past_key_value and hands to its CUDA kernels
(quant/matmul.py cuda_bmm_fA_qB_outer), for one sequence (KIVI's batch dim 1). numpy only: the
GPU driver (scripts/kivi_check_attention.py) and the CPU test (tests/eval/kivi_layout_test.py)
share it.

The repacking is a reinterpretation, no arithmetic (FORMATS 2.1): a kvlab code row of n codes
of b bits, LSB first, is KIVI's row of n / (32 / b) int32 words, little-endian. Keys: kvlab rows
are channels over tokens (Hkv, D, n*b/8) -> key_states_quant_trans (1, Hkv, D, n*b/32);
scale/zero (Hkv, D, n/G) fp16 are key_scale_trans / key_mn_trans as they are. Values: rows are
tokens over channels (Hkv, n, D*b/8) -> value_states_quant (1, Hkv, n, D*b/32); scale/zero
(Hkv, n, D/Gv) are value_scale / value_mn. Fields KIVI's layout cannot hold raise CaseError.
Also KIVI's kernel in numpy (cuda_bmm_fA_qB_outer, its indexing), for the CPU test."""
import numpy as np


class CaseError(ValueError):
    """A case that KIVI's kernels cannot take, or a malformed case file; names file and array."""


def method_spec(z, path):
    m = bytes(z["method"]).decode()
    family, _, rest = m.partition(":")
    if family != "kivi":
        raise CaseError(f"{path}: method '{m}': KIVI's kernels take the kivi family only")
    spec = dict(kv.split("=", 1) for kv in rest.split(","))
    if spec.get("params") != "fp16":
        raise CaseError(f"{path}: method '{m}': KIVI's kernels read fp16 scales and zeros (params=fp16)")
    for role in ("kbits", "vbits"):
        if spec.get(role) not in ("2", "4"):
            raise CaseError(f"{path}: method '{m}': {role}={spec.get(role)}, KIVI's kernels take 2 or 4 bits")
    return m, spec


def array(z, path, name, dtype, shape):
    if name not in z.files:
        raise CaseError(f"{path}: array '{name}' missing (docs/FORMATS.md 9.4)")
    a = z[name]
    if a.dtype != np.dtype(dtype) or tuple(a.shape) != tuple(shape):
        raise CaseError(f"{path}: array '{name}': {a.dtype} {a.shape}, want {np.dtype(dtype)} {tuple(shape)}")
    return a


def words(codes):
    """kvlab packed rows (uint8, row bytes a multiple of 4) as KIVI's int32 words."""
    return np.ascontiguousarray(codes).view("<i4")


def kivi_sequence(z, path, spec, b, Hkv, D):
    """Sequence b of case z in KIVI's layout: a dict of numpy arrays with KIVI's leading batch dim 1,
    plus the fp16 rows (sink: tokens [0, S); full: the tokens after the packed ones) and groups."""
    L, S = int(z["lengths"][b]), int(z["sink"][b])
    seq = {"L": L, "S": S}
    for role in ("k", "v"):
        bits = int(spec[role + "bits"])
        per_word = 32 // bits
        n = int(array(z, path, f"{role}{b}_packed", "<i4", (1,))[0])
        fp = array(z, path, f"{role}{b}_fp16", "<f2", (Hkv, L - n, D))
        seq[role + "_n"] = n
        seq[role + "_sink"] = fp[None, :, :S]
        seq[role + "_full"] = fp[None, :, S:]
        if role == "k":
            G = n if spec["group"] == "all" else int(spec["group"])
            if n and (n % G or G % per_word):
                raise CaseError(f"{path}: sequence {b}: {n} packed key tokens in groups of {G}: KIVI's key kernel "
                                f"takes whole groups of a multiple of {per_word} tokens")
        else:
            G = D if spec["vgroup"] == "all" else int(spec["vgroup"])
            if D % G or G % per_word:
                raise CaseError(f"{path}: value groups of {G} channels over D = {D}: KIVI's value kernel takes "
                                f"D a multiple of the group and groups a multiple of {per_word} channels")
        seq[role + "_group"] = G
        if n == 0:
            continue
        rows, cols = (D, n) if role == "k" else (n, D)
        codes = array(z, path, f"{role}{b}_codes", "|u1", (Hkv, rows, cols * bits // 8))
        groups = cols // G
        seq[role + "_quant"] = words(codes)[None]
        seq[role + "_scale"] = array(z, path, f"{role}{b}_scale", "<f2", (Hkv, rows, groups))[None]
        seq[role + "_mn"] = array(z, path, f"{role}{b}_zero", "<f2", (Hkv, rows, groups))[None]
    return seq


def read_case(path):
    """The case file as (method, spec, q (B, Hq, D) float32, [kivi_sequence(b) for each b])."""
    z = np.load(path)
    method, spec = method_spec(z, path)
    q = z["q"]
    if q.dtype != np.float32 or q.ndim != 3:
        raise CaseError(f"{path}: array 'q': {q.dtype} {q.shape}, want float32 (B, Hq, D)")
    B, Hq, D = q.shape
    Hkv = z["k0_fp16"].shape[0]
    if Hq % Hkv:
        raise CaseError(f"{path}: {Hq} query heads for {Hkv} KV heads")
    array(z, path, "lengths", "<i4", (B,))
    array(z, path, "sink", "<i4", (B,))
    return method, spec, q, [kivi_sequence(z, path, spec, b, Hkv, D) for b in range(B)]


# KIVI's kernel in numpy: its indexing, for tests/eval/kivi_layout_test.py.
def gemv_outer_dim(fA, weight, scales, zeros, bits, G, nh, nh_kv):
    """bgemv{2,4}_kernel_outer_dim: fA (BS, 1, IC), weight (BS_kv, OC / pf, IC) int32, scales and
    zeros (BS_kv, OC / G, IC) fp16; out[bs, oc] = sum_ic fA * (scale * code + zero), where code is
    field oc % pf of word oc / pf, its group that of the word's first code (oc_start_idx / G), and
    the KV slice bs / (nh / nh_kv). fp32, as the kernel (which rounds its output to fp16)."""
    pf = 32 // bits
    OC = zeros.shape[1] * G
    oc = np.arange(OC)
    code = (weight.view(np.uint32)[:, oc // pf, :] >> (bits * (oc % pf)).astype(np.uint32)[None, :, None]) & (
        2**bits - 1)
    g = oc // pf * pf // G
    deq = scales[:, g, :].astype(np.float32) * code.astype(np.float32) + zeros[:, g, :].astype(np.float32)
    kv = np.arange(fA.shape[0]) // (nh // nh_kv)
    return np.einsum("bi,boi->bo", fA[:, 0, :].astype(np.float32), deq[kv], dtype=np.float32)[:, None, :]


def cuda_bmm_fA_qB_outer(G, fA, qB, scales, zeros, bits):
    """quant/matmul.py cuda_bmm_fA_qB_outer: fA (B, nh, M, K), qB (B, nh_kv, K, N / pf), scales and
    zeros (B, nh_kv, K, N / G), transposed to the kernel's order."""
    B, nh, M, K = fA.shape
    nh_kv = qB.shape[1]
    qB = qB.reshape(-1, K, qB.shape[-1]).transpose(0, 2, 1)
    scales = scales.reshape(B * nh_kv, scales.shape[-2], scales.shape[-1]).transpose(0, 2, 1)
    zeros = zeros.reshape(B * nh_kv, zeros.shape[-2], zeros.shape[-1]).transpose(0, 2, 1)
    c = gemv_outer_dim(fA.reshape(-1, M, K), qB, scales, zeros, bits, G, nh, nh_kv)
    return c.reshape(B, nh, M, -1)
