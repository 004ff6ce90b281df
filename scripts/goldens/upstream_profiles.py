"""Reference outputs of the upstream fp16 quantizers, for tests/core/profiles_golden_test.cpp.

Runs, with PyTorch on CUDA in fp16, the arithmetic of
  - jy-yuan/KIVI quant/new_pack.py (triton_quantize_and_pack_along_last_dim: min/max,
    scale = (mx - mn) / (2**bits - 1), (x - mn) / scale, clamp, round, int32), and
  - Summer-Summer/Kitty src/kitty_sim/utils_quant.py (build_promote_mask: mean |k| over the
    page, topk; fake_quant_groupwise_lastdim: range clamped at eps=1e-4, promoted channels
    at 4 bits, q * scale + mn),
op for op as upstream writes them (re-typed here, not imported), on inputs that stress
ties, constant groups, tiny and huge ranges. Writes .npy files into OUT_DIR:
    <case>_x.npy       input, fp16, kvlab layout (H, T, D)
    <case>_codes.npy   uint8 codes, kvlab layout (H, T, D)
    <case>_scale.npy   fp16 scales, kvlab layout (H, D, groups) or (H, T, groups)
    <case>_zero.npy    fp16 minima, same shape
    <case>_dq.npy      fp16 dequantized values, (H, T, D)
    <case>_mask.npy    uint8 boost mask (H, D) (Kitty cases)
Usage: python3 upstream_profiles.py OUT_DIR   (needs torch with CUDA)
"""
import os
import sys

import numpy as np
import torch

dev = "cuda"


def inputs(seed, H, T, D):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(H, T, D, generator=g) * torch.linspace(0.05, 6.0, D)
    x[0, :, 1] = 0.75                                          # a constant channel
    x[0, :, 2] = torch.arange(T) % 4 * 0.5 - 0.25              # values on exact ties
    x[-1, :, 3] = torch.randn(T, generator=g) * 1e-6           # range near fp16 subnormals
    x[-1, :, 4] = 3.0 + torch.arange(T) * 2.0 ** -10           # tiny range at a large offset
    x[-1, 5, :] = 0.0                                          # a zero token row
    return x.half()


def kivi_along_last_dim(data, group, bits):
    # data (N, L) fp16 on CUDA; groups of `group` along the last dim (new_pack.py)
    N, L = data.shape
    data = data.reshape(N, L // group, group)
    mn = data.min(dim=-1).values
    mx = data.max(dim=-1).values
    scale = (mx - mn) / (2 ** bits - 1)
    data = data - mn.unsqueeze(-1)
    data.div_(scale.unsqueeze(-1))
    data = data.clamp_(0, 2 ** bits - 1).round_().to(torch.int32)
    dq = data.to(torch.float16) * scale.unsqueeze(-1) + mn.unsqueeze(-1)  # unpack_and_dequant_*
    return data.reshape(N, L), scale, mn, dq.reshape(N, L)


def kitty_fake_quant(x, bits, mask, promote_bits):
    # x (N, L) fp16: one group per row (group = page = L), mask (N, 1) bool (utils_quant.py)
    mn = x.min(dim=-1, keepdim=True).values
    mx = x.max(dim=-1, keepdim=True).values
    eps = 1e-4
    scale_base = (mx - mn).clamp(min=eps) / (2 ** bits - 1)
    scale_promote = (mx - mn).clamp(min=eps) / (2 ** promote_bits - 1)
    scale = torch.where(mask, scale_promote, scale_base)
    max_val = torch.where(mask, torch.full_like(scale, 2 ** promote_bits - 1), torch.full_like(scale, 2 ** bits - 1))
    q = ((x - mn) / scale).clamp(torch.zeros_like(max_val), max_val).round()
    dq = q * scale + mn
    return q.to(torch.int32), scale, mn, dq


def save(out, case, **arrays):
    for k, v in arrays.items():
        np.save(os.path.join(out, f"{case}_{k}.npy"), v)


def main(out):
    os.makedirs(out, exist_ok=True)
    # KIVI keys: per channel, groups of G tokens (input transposed to (H, D, T) as llama_kivi.py does)
    for bits, G in ((2, 32), (4, 32)):
        x = inputs(1, 2, 64, 16)
        H, T, D = x.shape
        kt = x.transpose(1, 2).contiguous().to(dev).reshape(H * D, T)
        codes, scale, mn, dq = kivi_along_last_dim(kt, G, bits)
        save(out, f"kivi_k{bits}", x=x.numpy(),
             codes=codes.reshape(H, D, T).transpose(1, 2).cpu().numpy().astype(np.uint8),
             scale=scale.reshape(H, D, -1).cpu().numpy(), zero=mn.reshape(H, D, -1).cpu().numpy(),
             dq=dq.reshape(H, D, T).transpose(1, 2).cpu().numpy())
    # KIVI values: per token, groups of G channels
    for bits, G in ((2, 16), (4, 8)):
        x = inputs(2, 2, 40, 16)
        H, T, D = x.shape
        codes, scale, mn, dq = kivi_along_last_dim(x.to(dev).reshape(H * T, D), G, bits)
        save(out, f"kivi_v{bits}", x=x.numpy(), codes=codes.reshape(H, T, D).cpu().numpy().astype(np.uint8),
             scale=scale.reshape(H, T, -1).cpu().numpy(), zero=mn.reshape(H, T, -1).cpu().numpy(),
             dq=dq.reshape(H, T, D).cpu().numpy())
    # Kitty keys: one page of T tokens, k = int(D * ratio + 1e-6) channels promoted to 4 bits
    for ratio in (0.125, 0.25):
        x = inputs(3, 2, 128, 32)
        H, T, D = x.shape
        ks = x.transpose(1, 2).contiguous().to(dev)               # (H, D, T) as kitty_simulate.py
        k_chan = int(D * ratio + 1e-6)
        score = ks.abs().mean(dim=-1)
        _, top = score.topk(k_chan, dim=-1)
        mask = torch.zeros(H, D, dtype=torch.bool, device=dev)
        mask.scatter_(-1, top, True)
        codes, scale, mn, dq = kitty_fake_quant(ks.reshape(H * D, T), 2, mask.reshape(H * D, 1), 4)
        save(out, f"kitty_k_boost{int(ratio * 1000)}", x=x.numpy(),
             codes=codes.reshape(H, D, T).transpose(1, 2).cpu().numpy().astype(np.uint8),
             scale=scale.reshape(H, D, 1).cpu().numpy(), zero=mn.reshape(H, D, 1).cpu().numpy(),
             dq=dq.reshape(H, D, T).transpose(1, 2).cpu().numpy(), mask=mask.cpu().numpy().astype(np.uint8))
    # Kitty values: per token, group = head dim, no promotion
    x = inputs(4, 2, 40, 32)
    H, T, D = x.shape
    mask = torch.zeros(H * T, 1, dtype=torch.bool, device=dev)
    codes, scale, mn, dq = kitty_fake_quant(x.to(dev).reshape(H * T, D), 2, mask, 4)
    save(out, "kitty_v2", x=x.numpy(), codes=codes.reshape(H, T, D).cpu().numpy().astype(np.uint8),
         scale=scale.reshape(H, T, 1).cpu().numpy(), zero=mn.reshape(H, T, 1).cpu().numpy(),
         dq=dq.reshape(H, T, D).cpu().numpy())
    print(f"wrote goldens to {out} with torch {torch.__version__} on {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main(sys.argv[1])
