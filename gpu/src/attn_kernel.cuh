// Split-K decode attention over kvlab's packed caches (flash decoding): one block per
// (split, KV head, sequence) walks its tiles of tokens with an online softmax for the GQA group's
// query heads, reading the packed codes directly (no dequantized copy in memory); a second kernel
// combines the splits. Dequantization calls core's recipe (recipe.h), so every K_hat / V_hat value
// is core's fp32 value (the debug path writes them out to prove it); products and sums are fp32.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "attn_types.h"
#include "kvlab/half.h"
#include "kvlab/recipe.h"

namespace kvlab::gpu::attn {

constexpr int kCPT = 16;  // channels per thread in the PV phase and the fp16 QK phase
constexpr float kNegInf = -__builtin_huge_valf();

// 4 bytes of a packed row starting at p (byte loads where the row is not word aligned).
__device__ __forceinline__ uint32_t load_word(const uint8_t* p, bool aligned, int64_t left) {
  if (aligned) return __ldg(reinterpret_cast<const uint32_t*>(p));
  uint32_t w = 0;
  for (int i = 0; i < 4 && i < left; ++i) w |= (uint32_t)__ldg(p + i) << (8 * i);
  return w;
}

__device__ __forceinline__ float load_param(const void* p, int64_t i, bool half) {
  return half ? half_to_float(__ldg(static_cast<const uint16_t*>(p) + i))
              : __ldg(static_cast<const float*>(p) + i);
}

// Core's dequantization of one code (asym: code * s + zero; sym: sign-extended code * s).
__device__ __forceinline__ float dequant(uint32_t code, float s, float z, bool sym, int bits) {
  return sym ? KvlabRecipe::sym_dequant(code, {s, 0.0f}, bits) : KvlabRecipe::asym_dequant(code, {s, z});
}

// 16 consecutive halves from a 32-byte aligned address.
__device__ __forceinline__ void load_half16(const uint16_t* p, float* out) {
  const uint4* v = reinterpret_cast<const uint4*>(p);
  const uint4 w[2] = {__ldg(v), __ldg(v + 1)};
  const uint32_t* u = reinterpret_cast<const uint32_t*>(w);
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = half_to_float((uint16_t)(u[i] & 0xFFFFu));
    out[2 * i + 1] = half_to_float((uint16_t)(u[i] >> 16));
  }
}

template <int D, int GQ, int KB, bool KBOOST, int VB, bool VCH>
__global__ void __launch_bounds__(kAttnThreads) decode_split(AttnArgs a) {
  constexpr int TT = attn_tile_tokens(KB);
  constexpr int TPT = D / kCPT;           // threads per token row (fp16 QK, token-major PV)
  constexpr int NL = kAttnThreads / TPT;  // token lanes
  __shared__ float sS[GQ][TT + 4];        // logits, then probabilities, of the tile
  __shared__ __align__(16) float sQ[D][GQ];
  __shared__ float sO[GQ][D];
  __shared__ float sM[GQ], sL[GQ], sA[GQ];
  __shared__ __align__(16) unsigned char sq_raw[sizeof(AttnSeq)];  // no constructor in shared memory
  AttnSeq& sq = *reinterpret_cast<AttnSeq*>(sq_raw);

  const int b = blockIdx.z, h = blockIdx.y, split = blockIdx.x, tid = threadIdx.x;
  const int Hq = a.Hkv * GQ;
  if (tid == 0) sq = a.seqs[b];
  for (int i = tid; i < D * GQ; i += kAttnThreads) {
    const int c = i / GQ, g = i % GQ;
    sQ[c][g] = a.q[((int64_t)b * Hq + h * GQ + g) * D + c] * a.scale_log2;
  }
  for (int i = tid; i < GQ * D; i += kAttnThreads) sO[i / D][i % D] = 0.0f;
  if (tid < GQ) {
    sM[tid] = kNegInf;
    sL[tid] = 0.0f;
  }
  __syncthreads();

  const int L = sq.L, S = sq.S, Kq = (int)sq.k.f.T, Vq = (int)sq.v.f.T;
  const int ntiles = (S > 0) + (L - S + TT - 1) / TT;
  const int per = (ntiles + a.splits - 1) / a.splits;
  const int tile_begin = split * per, tile_end = min(ntiles, tile_begin + per);
  // PV ownership: a token lane and a block of kCPT channels; lanes of one token are adjacent
  // for token-major rows, lanes of one channel block adjacent for channel-major rows.
  const int tl = VCH ? tid % NL : tid / TPT;
  const int cb = VCH ? tid / NL : tid % TPT;
  float acc[GQ][kCPT];
  for (int g = 0; g < GQ; ++g)
    for (int i = 0; i < kCPT; ++i) acc[g][i] = 0.0f;
  float* dbg_k = a.dbg_k ? a.dbg_k + sq.dbg + (int64_t)h * L * D : nullptr;
  float* dbg_v = a.dbg_v ? a.dbg_v + sq.dbg + (int64_t)h * L * D : nullptr;

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int t0 = (S > 0 && tile == 0) ? 0 : S + (tile - (S > 0)) * TT;
    const int t1 = (S > 0 && tile == 0) ? S : min(L, t0 + TT);
    // ---- logits of the tile's packed keys: each thread one word of codes per channel
    if constexpr (KB > 0) {
      constexpr int TPW = 32 / KB;
      const int rw = t0 - S + tid * TPW;  // first packed token of this thread's word
      if (t0 >= S && rw < Kq && t0 + tid * TPW < t1) {
        const PackedLayout& f = sq.k.f;
        const bool half = f.half_params, sym = f.sym;
        const uint8_t* low;
        const uint8_t* high = nullptr;
        const uint8_t* index = nullptr;
        int64_t row_bytes, high_row = 0, pidx;
        int64_t pstride;  // between channels' parameters
        if constexpr (KBOOST) {
          const int64_t p = rw / f.G, o = rw % f.G, len = f.page_tokens(p);
          row_bytes = packed_bytes(len, KB);
          high_row = packed_bytes(len, 2);
          low = sq.k.codes + h * f.slice_low() + f.page_low(p) + o * KB / 8;
          high = sq.k.high + h * f.slice_high() + f.page_high(p) + o * 2 / 8;
          index = sq.k.index + ((int64_t)h * f.groups + p) * D;
          pidx = ((int64_t)h * f.groups + p) * D;
          pstride = 1;
        } else {
          row_bytes = f.row_bytes;
          low = sq.k.codes + (int64_t)h * D * row_bytes + (int64_t)rw * KB / 8;
          pidx = (int64_t)h * D * f.groups + rw / f.G;
          pstride = f.groups;
        }
        const bool aligned = (row_bytes & 3) == 0;
        const int64_t left = row_bytes - (int64_t)(rw % (KBOOST ? f.G : 0x7fffffff)) * KB / 8;
        float s[TPW][GQ];
        for (int j = 0; j < TPW; ++j)
          for (int g = 0; g < GQ; ++g) s[j][g] = 0.0f;
        for (int c = 0; c < D; ++c) {
          uint32_t w = load_word(low + c * row_bytes, aligned, left);
          uint32_t hw = 0;
          bool boosted = false;
          if constexpr (KBOOST) {
            const uint8_t slot = __ldg(index + c);
            boosted = slot != 0xFF;
            if (boosted)
              hw = load_word(high + slot * high_row, (high_row & 3) == 0, high_row - (rw % f.G) * 2 / 8);
          }
          const float sc = load_param(sq.k.scale, pidx + c * pstride, half);
          const float z = sym ? 0.0f : load_param(sq.k.zero, pidx + c * pstride, half);
          float qv[GQ];
          for (int g = 0; g < GQ; ++g) qv[g] = sQ[c][g];
          for (int j = 0; j < TPW; ++j) {
            uint32_t code = (w >> (j * KB)) & ((1u << KB) - 1u);
            if (KBOOST && boosted) code |= ((hw >> (2 * j)) & 3u) << KB;
            const float v = dequant(code, sc, z, sym, KB);
            if (dbg_k && rw + j < Kq) dbg_k[(int64_t)(S + rw + j) * D + c] = v;
            for (int g = 0; g < GQ; ++g) s[j][g] = __fmaf_rn(qv[g], v, s[j][g]);
          }
        }
        for (int j = 0; j < TPW; ++j)
          if (rw + j < Kq)
            for (int g = 0; g < GQ; ++g) sS[g][tid * TPW + j] = s[j][g];
      }
    }
    // ---- logits of the tile's fp16 keys (sink and residual): TPT lanes per token
    {
      const int f0 = t0 < S ? t0 : max(t0, S + Kq);
      const int nfp = L - Kq;
      const int lane_tok = tid / TPT, part = tid % TPT;
      for (int base = f0; base < t1; base += NL) {
        const int t = base + lane_tok;
        float s[GQ];
        for (int g = 0; g < GQ; ++g) s[g] = 0.0f;
        if (t < t1) {
          const int row = t < S ? t : t - Kq;
          float kv[kCPT];
          load_half16(sq.k_fp + ((int64_t)h * nfp + row) * D + part * kCPT, kv);
          for (int i = 0; i < kCPT; ++i) {
            const int c = part * kCPT + i;
            if (dbg_k) dbg_k[(int64_t)t * D + c] = kv[i];
            for (int g = 0; g < GQ; ++g) s[g] = __fmaf_rn(sQ[c][g], kv[i], s[g]);
          }
        }
        for (int off = 1; off < TPT; off <<= 1)
          for (int g = 0; g < GQ; ++g) s[g] = __fadd_rn(s[g], __shfl_xor_sync(0xffffffffu, s[g], off));
        if (t < t1 && part == 0)
          for (int g = 0; g < GQ; ++g) sS[g][t - t0] = s[g];
      }
    }
    __syncthreads();
    // ---- online softmax: one warp per query head
    const int n = t1 - t0;
    for (int g = tid / 32; g < GQ; g += kAttnThreads / 32) {
      const int lane = tid % 32;
      float mx = kNegInf;
      for (int i = lane; i < n; i += 32) mx = fmaxf(mx, sS[g][i]);
      for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(sM[g], mx);
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) {
        const float p = exp2f(__fsub_rn(sS[g][i], m_new));
        sS[g][i] = p;
        sum = __fadd_rn(sum, p);
      }
      for (int i = n + lane; i < ((n + 3) & ~3); i += 32) sS[g][i] = 0.0f;  // whole words for VCH
      for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(__fsub_rn(sM[g], m_new));
        sA[g] = alpha;
        sL[g] = __fmaf_rn(sL[g], alpha, sum);
        sM[g] = m_new;
      }
    }
    __syncthreads();
    for (int g = 0; g < GQ; ++g) {
      const float alpha = sA[g];
      for (int i = 0; i < kCPT; ++i) acc[g][i] = __fmul_rn(acc[g][i], alpha);
    }
    // ---- P V
    if constexpr (VCH) {
      // Channel-major packed values (every token packed): a word holds TPWV tokens of a channel.
      constexpr int TPWV = 32 / VB;
      const PackedLayout& f = sq.v.f;
      const bool half = f.half_params, sym = f.sym, aligned = (f.row_bytes & 3) == 0;
      const int nch = (n + TPWV - 1) / TPWV;
      for (int k = tl; k < nch; k += NL) {
        const int r = t0 - S + k * TPWV;
        float p[GQ][TPWV];
        for (int g = 0; g < GQ; ++g)
          for (int j = 0; j < TPWV; ++j) p[g][j] = sS[g][k * TPWV + j];
        for (int i = 0; i < kCPT; ++i) {
          const int c = cb * kCPT + i;
          const int64_t rowi = (int64_t)h * D + c;
          const uint32_t w = load_word(sq.v.codes + rowi * f.row_bytes + (int64_t)r * VB / 8, aligned,
                                       f.row_bytes - (int64_t)r * VB / 8);
          const int64_t pi = rowi * f.groups + r / f.G;
          const float sc = load_param(sq.v.scale, pi, half);
          const float z = sym ? 0.0f : load_param(sq.v.zero, pi, half);
          for (int j = 0; j < TPWV; ++j) {
            const float v = dequant((w >> (j * VB)) & ((1u << VB) - 1u), sc, z, sym, VB);
            if (dbg_v && r + j < Vq) dbg_v[(int64_t)(S + r + j) * D + c] = v;
            for (int g = 0; g < GQ; ++g) acc[g][i] = __fmaf_rn(p[g][j], v, acc[g][i]);
          }
        }
      }
    } else {
      for (int t = t0 + tl; t < t1; t += NL) {
        float v[kCPT];
        const bool packed = VB > 0 && t >= S && t < S + Vq;
        if (packed) {
          if constexpr (VB > 0) {
            const PackedLayout& f = sq.v.f;
            const int64_t r = (int64_t)h * Vq + (t - S);
            const uint8_t* row = sq.v.codes + r * f.row_bytes + cb * (kCPT * VB / 8);
            uint32_t w[VB / 2];
            if constexpr (VB == 2) {
              w[0] = __ldg(reinterpret_cast<const uint32_t*>(row));
            } else if constexpr (VB == 4) {
              const uint2 x = __ldg(reinterpret_cast<const uint2*>(row));
              w[0] = x.x;
              w[1] = x.y;
            } else {
              const uint4 x = __ldg(reinterpret_cast<const uint4*>(row));
              w[0] = x.x;
              w[1] = x.y;
              w[2] = x.z;
              w[3] = x.w;
            }
            const int64_t pi = r * f.groups + (cb * kCPT) / f.G;
            const float sc = load_param(sq.v.scale, pi, f.half_params);
            const float z = f.sym ? 0.0f : load_param(sq.v.zero, pi, f.half_params);
            constexpr int PER = 32 / VB;
            for (int i = 0; i < kCPT; ++i)
              v[i] = dequant((w[i / PER] >> ((i % PER) * VB)) & ((1u << VB) - 1u), sc, z, f.sym, VB);
          }
        } else {
          const int row = t < S ? t : t - Vq;
          load_half16(sq.v_fp + ((int64_t)h * (L - Vq) + row) * D + cb * kCPT, v);
        }
        if (dbg_v)
          for (int i = 0; i < kCPT; ++i) dbg_v[(int64_t)t * D + cb * kCPT + i] = v[i];
        float p[GQ];
        for (int g = 0; g < GQ; ++g) p[g] = sS[g][t - t0];
        for (int g = 0; g < GQ; ++g)
          for (int i = 0; i < kCPT; ++i) acc[g][i] = __fmaf_rn(p[g], v[i], acc[g][i]);
      }
    }
    __syncthreads();
  }
  // ---- sum the token lanes in lane order (deterministic), write this split's partials
  for (int lane = 0; lane < NL; ++lane) {
    if (tl == lane)
      for (int g = 0; g < GQ; ++g)
        for (int i = 0; i < kCPT; ++i) sO[g][cb * kCPT + i] = __fadd_rn(sO[g][cb * kCPT + i], acc[g][i]);
    __syncthreads();
  }
  for (int i = tid; i < GQ * D; i += kAttnThreads) {
    const int g = i / D, c = i % D;
    const int64_t row = ((int64_t)b * Hq + h * GQ + g) * a.splits + split;
    a.part_o[row * D + c] = sO[g][c];
    if (c == 0) {
      a.part_ml[row * 2] = sM[g];
      a.part_ml[row * 2 + 1] = sL[g];
    }
  }
}

template <int D, int GQ, int KB, bool KBOOST, int VB, bool VCH>
void launch_split(const AttnArgs& a, int B, cudaStream_t s) {
  decode_split<D, GQ, KB, KBOOST, VB, VCH><<<dim3(a.splits, a.Hkv, B), kAttnThreads, 0, s>>>(a);
}

// The kernels of one kind for every (D, heads per group) built; false when none matches.
template <int KB, bool KBOOST, int VB, bool VCH>
bool launch_kind(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  if (D == 128 && group == 4)
    launch_split<128, 4, KB, KBOOST, VB, VCH>(a, B, s);
  else if (D == 128 && group == 1)
    launch_split<128, 1, KB, KBOOST, VB, VCH>(a, B, s);
  else if (D == 64 && group == 4)
    launch_split<64, 4, KB, KBOOST, VB, VCH>(a, B, s);
  else
    return false;
  return true;
}

}  // namespace kvlab::gpu::attn
