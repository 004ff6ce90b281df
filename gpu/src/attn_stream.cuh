// Streaming decode attention (D = 128, 4 query heads per KV head). The split kernel kept ~1 KB of
// loads in flight per SM (one 4-byte word per thread per channel, 212 registers, 2 blocks/SM);
// here each of the block's kStreamWarps warps walks its own tiles with its own online softmax,
// and the tiles' bytes are staged in shared memory by cp.async one tile ahead, so the bytes in
// flight cost shared memory instead of registers and no __syncthreads runs per tile. The block
// merges its warps into one split partial (combine_splits then merges the splits).
// fp16 tiles and the token-by-token rest: every K_hat / V_hat is core's fp32 value (recipe:
// code * scale + zero, no FMA; fp16 exactly), logits and P V fp32 FMA chains. Packed tiles
// (kivi, int8): codes times q * scale and p * scale (int8: p, its per-channel value scale then
// scales the output column) on tensor cores, zeros apart (attn_mma.cuh, docs/FORMATS.md 9.2, 9.3).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "attn_mma.cuh"
#include "attn_types.h"
#include "kvlab/half.h"
#include "kvlab/recipe.h"

namespace kvlab::gpu::attn {

constexpr int kSD = 128, kSG = 4;  // head dim, query heads per KV head

// Shared memory of one warp: two stages of (key tile, value tile), the tile's probabilities,
// and (kivi) the key parameters per channel and value parameters per token as fp32. int8 (CH):
// values channel-major like the keys, one symmetric scale per channel over every token, so no
// per-tile parameters (the scales fold into q and into the output). Kitty (BO): the key tile's
// low plane as kivi-2's codes, then up to kMaxSlots rows of the page's high plane (boosted slots).
constexpr int kMaxSlots = kStreamMaxSlots;
template <int KB, bool BO = false>
struct StreamGeo {
  static constexpr bool CH = KB == 8;
  static constexpr int TT = stream_tile_tokens(KB);
  static constexpr int TPL = TT / 32;                // key tokens per lane in the logits
  static constexpr int KROW = KB ? TT * KB / 8 : 0;  // bytes of one channel's codes in a tile (16; int8 32)
  static constexpr int KBYTES = KB ? kSD * KROW : TT * kSD * 2;
  static constexpr int VROW = CH   ? TT
                              : KB ? kSD * KB / 8
                                   : kSD * 2;  // bytes of one value row (token; int8 channel)
  static constexpr int VBYTES = CH ? kSD * VROW : TT * VROW;
  static constexpr int HBYTES = BO ? kMaxSlots * KROW : 0;  // high plane rows (slots)
  static constexpr int VOFF = KBYTES + HBYTES;              // value tile in a stage
  static constexpr int STAGE = VOFF + VBYTES;
  static constexpr int PARAMS = (KB && !CH ? (kSD + TT) * 8 : 0) + (BO ? kMaxSlots : 0);  // + slot -> channel
  static constexpr int WARP = 2 * STAGE + TT * kSG * 4 + PARAMS;
  static constexpr int SMEM = kSD * kSG * 4 + kStreamWarps * WARP;
  static_assert(KB == 0 || KROW == (CH ? 32 : 16), "the MMA fragments read 16-byte key rows (int8: 32)");
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 16 bytes into shared memory: cp.async, or byte loads where the global rows are not 16-byte
// aligned (int8 rows are L bytes long: any L is served, aligned rows at full speed).
__device__ __forceinline__ void copy16(void* smem, const uint8_t* g, bool async) {
  if (async) {
    cp_async16(smem, g);
    return;
  }
  for (int i = 0; i < 16; ++i) static_cast<uint8_t*>(smem)[i] = __ldg(g + i);
}

// (float)code for code < 2^23 by the 2^23 magic number (LOP + FADD; I2F runs at quarter rate).
__device__ __forceinline__ float code_float(uint32_t code) {
  return __fsub_rn(__uint_as_float(0x4B000000u | code), 8388608.0f);
}
__device__ __forceinline__ float sdequant(uint32_t code, float s, float z) {
  return __fadd_rn(__fmul_rn(code_float(code), s), z);  // == KvlabRecipe::asym_dequant
}
__device__ __forceinline__ float sparam(const void* p, int64_t i, bool half) {
  return half ? half_to_float(__ldg(static_cast<const uint16_t*>(p) + i))
              : __ldg(static_cast<const float*>(p) + i);
}
// fp16 tile rows are 256 bytes: 16-byte chunk ch of row t lives at chunk ch ^ (t & 7), so the 8
// lanes of a 16-byte load phase (8 rows, same chunk) and a row read by 32 lanes hit distinct banks.
__device__ __forceinline__ int swz(int t, int ch) { return t * 256 + ((ch ^ (t & 7)) << 4); }

template <int KB, bool DBG, bool BO = false>
struct StreamWarp {
  using G = StreamGeo<KB, BO>;
  static constexpr int TT = G::TT, TPL = G::TPL;
  const AttnSeq& sq;     // in shared memory
  float *dbg_k, *dbg_v;  // copied: a reference to the kernel's parameter would put it in local memory
  const float (*sQ)[kSG];
  unsigned char* base;  // stage i at base + i * STAGE (no array: a dynamic index would put the warp's state
                        // in local memory)
  float (*sP)[kSG];
  float2 *kpar, *vpar;
  uint8_t* slot_ch;  // Kitty: the channel of each boosted slot of the current page
  int h, lane, mb, gid, tig;
  bool async_ok;                      // int8: both roles' rows 16-byte aligned (kivi: always, stream_refusal)
  float m[kSG], l[kSG], acc[kSG][4];  // the lane's channels 4 lane .. 4 lane + 3
  // Packed tiles on tensor cores (attn_mma.cuh). P V: oacc[m] is the MMA fragment of channels
  // 16 gid + 2m (+1) and columns 2 tig (+1) (tig < 2: hi of heads 2 tig, 2 tig + 1; else lo),
  // in units of 2^(CX - evc) per column head (int8: channels 16m + gid, + 8); pz: sum p * value
  // zero per head. Logits: the key operand of the current key group (kfrag, exponent of its
  // split, bias q . zero).
  static constexpr int NM = KB ? TT / 16 : 1;
  // Codes times the MMA's factors come out in units of 2^-CX: kivi codes are subnormals (2^-24 each),
  // int8 codes their integer values.
  static constexpr int CX = G::CH ? 0 : 24;
  float oacc[8][4], pz[kSG], rescale[kSG];
  int evc[2], ev_own;
  uint32_t kfrag[8][2];
  uint32_t kfrag_hi[kMaxSlots / 16][2];  // Kitty: the key operand of the boosted slots' high bits
  float kesc[2], kbias[2];
  float2 vp[KB ? TPL : 1];  // value parameters of the lane's tokens of the tile, in flight (load_params)
  int64_t kg_cur;
  // fp16 logits: the scaled q of the lane's 16 channels (8 (lane % 8) .. and 64 + 8 (lane % 8) ..)
  // in registers; read from shared memory per token they saturated the L1/shared pipe (ncu).
  float qr[KB ? 1 : 64];

  __device__ __forceinline__ StreamWarp(const AttnSeq& s, const AttnArgs& args, const float (*q)[kSG],
                                        unsigned char* w, int head)
      : sq(s), dbg_k(args.dbg_k), dbg_v(args.dbg_v), sQ(q), h(head) {
    base = w;
    sP = reinterpret_cast<float(*)[kSG]>(w + 2 * G::STAGE);
    kpar = reinterpret_cast<float2*>(w + 2 * G::STAGE + TT * kSG * 4);
    vpar = kpar + kSD;
    slot_ch = reinterpret_cast<uint8_t*>(vpar + TT);
    lane = threadIdx.x % 32;
    gid = lane >> 2;
    tig = lane & 3;
    mb = stream_main_begin(KB, s.S);
    auto al = [](const void* p, int64_t row) {
      return ((reinterpret_cast<uintptr_t>(p) | (uintptr_t)row) & 15) == 0;
    };
    async_ok = !G::CH || (al(s.k.codes, s.k.f.row_bytes) && al(s.v.codes, s.v.f.row_bytes));
    if constexpr (KB > 0) {
      for (int x = 0; x < 8; ++x)
        for (int i = 0; i < 4; ++i) oacc[x][i] = 0.0f;
      for (int g = 0; g < kSG; ++g) pz[g] = 0.0f;
      evc[0] = evc[1] = ev_own = 0;
      kg_cur = -1;
    }
    if constexpr (KB == 0) {
#pragma unroll
      for (int x = 0; x < 16; ++x)
#pragma unroll
        for (int g = 0; g < kSG; ++g) qr[x * kSG + g] = q[64 * (x / 8) + 8 * (lane & 7) + x % 8][g];
    }
    for (int g = 0; g < kSG; ++g) {
      m[g] = -__builtin_huge_valf();
      l[g] = 0.0f;
      for (int i = 0; i < 4; ++i) acc[g][i] = 0.0f;
    }
  }

  __device__ __forceinline__ unsigned char* stage(int i) const { return base + i * G::STAGE; }

  // cp.async of main tile `tile` (tokens mb + tile TT ..) into stage buffer s.
  __device__ __forceinline__ void issue(int tile, unsigned char* s) const {
    const int r0 = tile * TT;
    if constexpr (KB > 0) {
      const PackedLayout& kf = sq.k.f;
      constexpr int CK = G::KROW / 16;  // 16-byte chunks per channel row
      if constexpr (BO) {  // page p's low plane rows (channels), then its high plane rows (slots)
        const int64_t p = r0 / kf.G, o = (r0 % kf.G) * KB / 8, rb = packed_bytes(kf.G, KB);
        const uint8_t* lo = sq.k.codes + h * kf.slice_low() + kf.page_low(p) + o;
        for (int j = lane; j < kSD; j += 32) cp_async16(s + j * G::KROW, lo + j * rb);
        const uint8_t* hi = sq.k.high + h * kf.slice_high() + kf.page_high(p) + o;
        for (int j = lane; j < kf.k; j += 32) cp_async16(s + G::KBYTES + j * G::KROW, hi + j * rb);
      } else {
        const uint8_t* kb = sq.k.codes + (int64_t)h * kSD * kf.row_bytes + (int64_t)r0 * KB / 8;
        for (int j = lane; j < kSD * CK; j += 32)
          copy16(s + (j / CK) * G::KROW + (j % CK) * 16,
                 kb + (int64_t)(j / CK) * kf.row_bytes + (j % CK) * 16, async_ok);
      }
      if constexpr (G::CH) {  // value rows are channels too
        const int64_t vr = sq.v.f.row_bytes;
        const uint8_t* vb = sq.v.codes + (int64_t)h * kSD * vr + r0;
        for (int j = lane; j < kSD * CK; j += 32)
          copy16(s + G::VOFF + (j / CK) * G::VROW + (j % CK) * 16, vb + (j / CK) * vr + (j % CK) * 16,
                 async_ok);
      } else {
        const uint8_t* vb = sq.v.codes + ((int64_t)h * sq.v.f.T + r0) * G::VROW;
        for (int j = lane; j < G::VBYTES / 16; j += 32) cp_async16(s + G::VOFF + j * 16, vb + j * 16);
      }
    } else {
      const int64_t rows = sq.L;  // fp16 method: row t is token t
      const uint16_t* kb = sq.k_fp + ((int64_t)h * rows + r0) * kSD;
      const uint16_t* vb = sq.v_fp + ((int64_t)h * rows + r0) * kSD;
      for (int j = lane; j < TT * 16; j += 32) {
        cp_async16(s + swz(j / 16, j % 16), kb + j * 8);
        cp_async16(s + G::VOFF + swz(j / 16, j % 16), vb + j * 8);
      }
    }
  }

  // Key parameters (per channel) and value parameters (per token) of a packed tile, as fp32.
  __device__ __forceinline__ void load_params(int tile) {
    const int r0 = tile * TT;
    const PackedLayout &kf = sq.k.f, &vf = sq.v.f;
    const int64_t kg = r0 / kf.G;  // one key group per tile (host check: G % TT == 0 or 1 group)
    // every load first, then the stores: one memory latency per tile (a store after each load
    // waited for it, up to six latencies per tile); the value parameters are stored by mma_tile
    // after the logits, by when they have arrived
#pragma unroll
    for (int j = 0; j < TPL; ++j) {
      const int64_t i = ((int64_t)h * vf.T + r0 + lane + 32 * j) * vf.groups;  // one value group per token
      vp[j] = make_float2(sparam(sq.v.scale, i, vf.half_params), sparam(sq.v.zero, i, vf.half_params));
    }
    if (kg != kg_cur) {  // key parameters: once per group
      float2 kp[kSD / 32];
      uint8_t slot[kSD / 32];
#pragma unroll
      for (int j = 0; j < kSD / 32; ++j) {
        const int c = lane + 32 * j;
        // Kitty: parameters (head, page, channel); kivi: (head, channel, group)
        const int64_t i =
            BO ? ((int64_t)h * kf.groups + kg) * kSD + c : ((int64_t)h * kSD + c) * kf.groups + kg;
        kp[j] = make_float2(sparam(sq.k.scale, i, kf.half_params), sparam(sq.k.zero, i, kf.half_params));
        if constexpr (BO) slot[j] = __ldg(sq.k.index + i);
      }
#pragma unroll
      for (int j = 0; j < kSD / 32; ++j) {
        kpar[lane + 32 * j] = kp[j];
        if (BO && slot[j] != 0xFF) slot_ch[slot[j]] = (uint8_t)(lane + 32 * j);
      }
    }
#pragma unroll
    for (int j = 0; j < TPL; ++j) vpar[lane + 32 * j] = vp[j];
  }

  // Online softmax over the logits s[j] of tokens lane TPL + j (-inf: no token); p -> sP. MMA
  // (a packed tile): the fp32 accumulators are still 0 there (the rest runs after every tile), so
  // only the MMA sums are rescaled; otherwise (the rest, fp16 tiles) only the fp32 accumulators:
  // fold_mma has moved the MMA sums into them before the rest.
  template <bool MMA = false>
  __device__ __forceinline__ void softmax(float (&s)[TPL][kSG]) {
    for (int g = 0; g < kSG; ++g) {
      float mx = s[0][g];
      for (int j = 1; j < TPL; ++j) mx = fmaxf(mx, s[j][g]);
      for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[g], mx);
      float sum = 0.0f;
      for (int j = 0; j < TPL; ++j) {
        const float p = exp2f(__fsub_rn(s[j][g], m_new));
        sP[lane * TPL + j][g] = p;
        sum = __fadd_rn(sum, p);
      }
      for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
      const float alpha = exp2f(__fsub_rn(m[g], m_new));
      l[g] = __fmaf_rn(l[g], alpha, sum);
      m[g] = m_new;
      if constexpr (!MMA)
        for (int i = 0; i < 4; ++i) acc[g][i] = __fmul_rn(acc[g][i], alpha);
      rescale[g] = alpha;
    }
    if constexpr (KB > 0 && MMA) {  // the MMA sums
      const float f0 = (tig & 1) ? rescale[2] : rescale[0];
      const float f1 = (tig & 1) ? rescale[3] : rescale[1];
      for (int x = 0; x < 8; ++x) {
        oacc[x][0] = __fmul_rn(oacc[x][0], f0);
        oacc[x][1] = __fmul_rn(oacc[x][1], f1);
        oacc[x][2] = __fmul_rn(oacc[x][2], f0);
        oacc[x][3] = __fmul_rn(oacc[x][3], f1);
      }
      if constexpr (!G::CH)
        for (int g = 0; g < kSG; ++g) pz[g] = __fmul_rn(pz[g], rescale[g]);
    }
    __syncwarp();
  }

  __device__ __forceinline__ float* dbg_row(float* base, int t) const {
    return base + sq.dbg + ((int64_t)h * sq.L + t) * kSD;
  }

  // Key tokens of rows gid and gid + 8 of key M-block x (tokens of the tile): the lane reads byte
  // gid & 3 of words 2 (gid >> 2) + e of its channels' rows, each byte TB = 8 / KB tokens.
  // int8: the lane reads word gid of its rows (tokens 4 gid .. 4 gid + 3), block x rows gid and
  // gid + 8 are tokens 4 gid + 2x and 4 gid + 2x + 1.
  __device__ __forceinline__ int key_token(int x) const {
    if constexpr (G::CH) return 4 * gid + 2 * x;
    constexpr int TB = 8 / (KB < 8 ? KB : 1), H = TB / 2;
    return (2 * (gid >> 2) + x / H) * (32 / KB) + (gid & 3) * TB + 2 * (x % H);
  }
  // kivi tiles: code_pair leaves the codes of M-block x, row `row` (0: fragment row gid, 1: gid + 8)
  // at this bit, so that row of the MMA's sums is 2^row_shift too large (attn_mma.cuh).
  __host__ __device__ static constexpr int row_shift(int x, int row) {
    return KB && !G::CH ? 2 * KB * (x % (4 / KB)) + KB * row : 0;
  }
  // Channel of the key operand's register half r of channel block kb (the MMA's k index
  // 2 tig + (r & 1) + 8 (r >> 1)); int8 permutes k so that the 4 tig lanes read 4 consecutive
  // 32-byte rows (distinct banks): index 2 tig + j + 8 i is channel tig + 4 j + 8 i.
  __device__ __forceinline__ int key_chan(int kb, int r) const {
    return G::CH ? 16 * kb + tig + 4 * (r & 1) + 8 * (r >> 1) : 16 * kb + 2 * tig + (r & 1) + 8 * (r >> 1);
  }
  // Key scale of channel c for the current group (int8: one per channel, from global memory).
  __device__ __forceinline__ float kscale(int c) const {
    if constexpr (G::CH)
      return sparam(sq.k.scale, ((int64_t)h * kSD + c) * sq.k.f.groups, sq.k.f.half_params);
    else
      return kpar[c].x;
  }

  // The key operand of key group kg: q * scale per channel as hi / lo fp16 (this lane: head
  // gid & 3, lo when gid >= 4; channels 16 kb + 2 tig (+1, +8, +9)), the exponent of the split and
  // the bias q . zero of the heads of this lane's logit columns (2 (tig & 1), + 1).
  __device__ __forceinline__ void key_group() {
    const int g = gid & 3;
    // q * scale is formed twice (max, then split) rather than held: fewer live registers
    auto qs = [&](int kb, int r) {
      const int c = key_chan(kb, r);
      return __fmul_rn(sQ[c][g], kscale(c));
    };
    float mx = 0.0f, bz = 0.0f;
#pragma unroll
    for (int kb = 0; kb < 8; ++kb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int c = key_chan(kb, r);
        mx = fmaxf(mx, fabsf(qs(kb, r)));
        if constexpr (!G::CH) bz = __fmaf_rn(sQ[c][g], kpar[c].y, bz);  // int8: symmetric, no zero
      }
    for (int off = 1; off < 4; off <<= 1) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      bz = __fadd_rn(bz, __shfl_xor_sync(0xffffffffu, bz, off));
    }
    const int E = split_exponent(mx, 0);
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      kfrag[kb][0] = pack2(split_half(qs(kb, 0), E, gid >= 4), split_half(qs(kb, 1), E, gid >= 4));
      kfrag[kb][1] = pack2(split_half(qs(kb, 2), E, gid >= 4), split_half(qs(kb, 3), E, gid >= 4));
    }
    if constexpr (BO) {  // slot s carries channel slot_ch[s]'s q * scale (0 past the page's k slots)
      auto qh = [&](int sb, int r) {
        const int sl = 16 * sb + 2 * tig + (r & 1) + 8 * (r >> 1);
        if (sl >= sq.k.f.k) return (uint16_t)0;
        const int c = slot_ch[sl];
        return split_half(__fmul_rn(sQ[c][g], kpar[c].x), E, gid >= 4);
      };
#pragma unroll
      for (int sb = 0; sb < kMaxSlots / 16; ++sb) {
        kfrag_hi[sb][0] = pack2(qh(sb, 0), qh(sb, 1));
        kfrag_hi[sb][1] = pack2(qh(sb, 2), qh(sb, 3));
      }
    }
    for (int i = 0; i < 2; ++i) {
      const int src = 4 * (2 * (tig & 1) + i);  // lane gid = head, tig 0
      kesc[i] = mul_pow2(1.0f, CX - __shfl_sync(0xffffffffu, E, src));
      kbias[i] = __shfl_sync(0xffffffffu, bz, src);
    }
  }

  // Logits of a staged kivi tile: codes x key operand into lc (M-block x: tokens key_token(x), + 1).
  __device__ __forceinline__ void key_mma_kivi(const unsigned char* s, int t0, float (&lc)[NM][4]) {
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      const int c0 = 16 * kb + 2 * tig;
      const unsigned char* row = s + c0 * G::KROW + 8 * (gid >> 2);
      uint2 w[4];
      for (int r = 0; r < 4; ++r)
        w[r] = *reinterpret_cast<const uint2*>(row + ((r & 1) + 8 * (r >> 1)) * G::KROW);
#pragma unroll
      for (int x = 0; x < NM; ++x) {
        constexpr int H = 4 / KB;  // M-blocks per word
        const int e = x / H, sh = 2 * KB * (x % H);
        const uint32_t p01 = pair_bytes(e ? w[0].y : w[0].x, e ? w[1].y : w[1].x, gid & 3);
        const uint32_t p89 = pair_bytes(e ? w[2].y : w[2].x, e ? w[3].y : w[3].x, gid & 3);
        const uint32_t a[4] = {code_pair<KB>(p01, sh), code_pair<KB>(p01, sh + KB), code_pair<KB>(p89, sh),
                               code_pair<KB>(p89, sh + KB)};
        if (DBG)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = c0 + hi + 8 * (r >> 1), t = key_token(x) + (r & 1);
              const uint32_t code =
                  (((a[r] >> (16 * hi)) & 0xFFFFu) >> row_shift(x, r & 1)) | (high_code(s, t0, t, c) << KB);
              dbg_row(dbg_k, t0 + t)[c] = sdequant(code, kpar[c].x, kpar[c].y);
            }
        mma16816(lc[x], a[0], a[1], a[2], a[3], kfrag[kb][0], kfrag[kb][1]);
      }
    }
    if constexpr (BO) {  // the boosted slots' high bits: codes * 4 (exact subnormals) x the slots' operand
#pragma unroll
      for (int sb = 0; sb < kMaxSlots / 16; ++sb) {
        if (16 * sb >= sq.k.f.k) break;
        const unsigned char* row = s + G::KBYTES + (16 * sb + 2 * tig) * G::KROW + 8 * (gid >> 2);
        uint2 w[4];
        for (int r = 0; r < 4; ++r)
          w[r] = *reinterpret_cast<const uint2*>(row + ((r & 1) + 8 * (r >> 1)) * G::KROW);
#pragma unroll
        for (int x = 0; x < NM; ++x) {
          constexpr int H = 4 / KB;
          const int e = x / H, sh = 2 * KB * (x % H);
          const uint32_t p01 = pair_bytes(e ? w[0].y : w[0].x, e ? w[1].y : w[1].x, gid & 3);
          const uint32_t p89 = pair_bytes(e ? w[2].y : w[2].x, e ? w[3].y : w[3].x, gid & 3);
          mma16816(lc[x], code_pair<KB>(p01, sh) << 2, code_pair<KB>(p01, sh + KB) << 2,
                   code_pair<KB>(p89, sh) << 2, code_pair<KB>(p89, sh + KB) << 2, kfrag_hi[sb][0],
                   kfrag_hi[sb][1]);
        }
      }
    }
  }

  // Kitty: the high 2 bits of channel c's code at tile token t (0 when c is not boosted), from the
  // staged high plane (debug path only).
  __device__ __forceinline__ uint32_t high_code(const unsigned char* s, int t0, int t, int c) const {
    if constexpr (!BO) return 0;
    const PackedLayout& kf = sq.k.f;
    const int64_t p = (t0 - mb) / kf.G;
    const uint8_t slot = __ldg(sq.k.index + ((int64_t)h * kf.groups + p) * kSD + c);
    if (slot == 0xFF) return 0;
    return (s[G::KBYTES + slot * G::KROW + t / 4] >> (2 * (t % 4))) & 3u;
  }

  // Logits of a staged int8 tile: the lane reads word gid (tokens 4 gid ..) of rows key_chan(kb, r);
  // a register pairs byte 2x (+1) of two rows (channels key_chan(kb, 2i), key_chan(kb, 2i + 1)).
  __device__ __forceinline__ void key_mma_int8(const unsigned char* s, int t0, float (&lc)[NM][4]) {
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      uint32_t w[4];
      for (int r = 0; r < 4; ++r)
        w[r] = *reinterpret_cast<const uint32_t*>(s + key_chan(kb, r) * G::KROW + 4 * gid);
#pragma unroll
      for (int x = 0; x < NM; ++x) {
        const uint32_t a[4] = {
            int8_pair(pair_bytes(w[0], w[1], 2 * x)), int8_pair(pair_bytes(w[0], w[1], 2 * x + 1)),
            int8_pair(pair_bytes(w[2], w[3], 2 * x)), int8_pair(pair_bytes(w[2], w[3], 2 * x + 1))};
        if (DBG)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = key_chan(kb, hi + 2 * (r >> 1)), t = key_token(x) + (r & 1);
              const float code = __half2float(__ushort_as_half((uint16_t)(a[r] >> (16 * hi))));
              dbg_row(dbg_k, t0 + t)[c] = __fmul_rn(code, kscale(c));  // == KvlabRecipe::sym_dequant
            }
        mma16816(lc[x], a[0], a[1], a[2], a[3], kfrag[kb][0], kfrag[kb][1]);
      }
    }
  }

  // P V of a staged kivi tile: the lane's 16 channels 16 gid .. of token rows 16 kb + 2 tig (+1,
  // +8, +9); M-block x holds channels 16 gid + 2x (row gid) and + 1 (row gid + 8).
  __device__ __forceinline__ void value_mma_kivi(const unsigned char* sv, int t0,
                                                 const uint32_t (&vb)[NM][2]) {
#pragma unroll
    for (int kb = 0; kb < NM; ++kb) {
      const int tr = 16 * kb + 2 * tig;
      uint2 w[4];
      for (int r = 0; r < 4; ++r) {
        const unsigned char* row = sv + (tr + (r & 1) + 8 * (r >> 1)) * G::VROW;
        if constexpr (KB == 4)
          w[r] = *reinterpret_cast<const uint2*>(row + 8 * gid);
        else
          w[r] = make_uint2(*reinterpret_cast<const uint32_t*>(row + 4 * gid), 0u);
      }
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        constexpr int H = 4 / KB;  // M-blocks per byte... of channel pairs
        const int bi = x / H, sh = 2 * KB * (x % H);
        const int wi = bi >> 2;
        const uint32_t p01 = pair_bytes(wi ? w[0].y : w[0].x, wi ? w[1].y : w[1].x, bi & 3);
        const uint32_t p89 = pair_bytes(wi ? w[2].y : w[2].x, wi ? w[3].y : w[3].x, bi & 3);
        const uint32_t a[4] = {code_pair<KB>(p01, sh), code_pair<KB>(p01, sh + KB), code_pair<KB>(p89, sh),
                               code_pair<KB>(p89, sh + KB)};
        if (DBG)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = 16 * gid + 2 * x + (r & 1), t = tr + hi + 8 * (r >> 1);
              const uint32_t code = ((a[r] >> (16 * hi)) & 0xFFFFu) >> row_shift(x, r & 1);
              dbg_row(dbg_v, t0 + t)[c] = sdequant(code, vpar[t].x, vpar[t].y);
            }
        mma16816(oacc[x], a[0], a[1], a[2], a[3], vb[kb][0], vb[kb][1]);
      }
    }
  }

  // Value scale of channel c (int8: one per channel over every token).
  __device__ __forceinline__ float vscale(int c) const {
    return sparam(sq.v.scale, ((int64_t)h * kSD + c) * sq.v.f.groups, sq.v.f.half_params);
  }

  // P V of a staged int8 tile (channel rows): M-block x is channels 16x + gid (rows gid) and + 8;
  // the lane reads 8 bytes (tokens 8 tig ..) of each, word kb for k block kb; a word's bytes 0, 2
  // are k indices 2 tig, 2 tig + 1 and bytes 1, 3 are 2 tig + 8, + 9 (value_token).
  __device__ __forceinline__ void value_mma_int8(const unsigned char* sv, int t0,
                                                 const uint32_t (&vb)[NM][2]) {
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      const uint2 w0 = *reinterpret_cast<const uint2*>(sv + (16 * x + gid) * G::VROW + 8 * tig);
      const uint2 w1 = *reinterpret_cast<const uint2*>(sv + (16 * x + gid + 8) * G::VROW + 8 * tig);
#pragma unroll
      for (int kb = 0; kb < NM; ++kb) {
        const uint32_t u0 = kb ? w0.y : w0.x, u1 = kb ? w1.y : w1.x;
        const uint32_t a[4] = {int8_pair(u0), int8_pair(u1), int8_pair(u0 >> 8), int8_pair(u1 >> 8)};
        if (DBG)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = 16 * x + gid + 8 * (r & 1), t = value_token(kb, 2 * (r >> 1) + hi);
              const float code = __half2float(__ushort_as_half((uint16_t)(a[r] >> (16 * hi))));
              dbg_row(dbg_v, t0 + t)[c] = __fmul_rn(code, vscale(c));
            }
        mma16816(oacc[x], a[0], a[1], a[2], a[3], vb[kb][0], vb[kb][1]);
      }
    }
  }

  // Token of the value operand's register half r (k index 2 tig + (r & 1) + 8 (r >> 1)) of k block kb.
  __device__ __forceinline__ int value_token(int kb, int r) const {
    return G::CH ? 8 * tig + 4 * kb + 2 * (r & 1) + (r >> 1) : 16 * kb + 2 * tig + (r & 1) + 8 * (r >> 1);
  }

  // One staged packed tile on tensor cores: logits (codes x key operand + bias) into sP, the
  // online softmax, then P V (codes x (p * value scale) + sum p * value zero; int8: codes x p, the
  // scale applied to the output column in add_mma).
  __device__ __forceinline__ void mma_tile(int tile, const unsigned char* s) {
    const int t0 = mb + tile * TT;
    const int64_t kg = (int64_t)tile * TT / sq.k.f.G;
    if (!G::CH && kg != kg_cur) {  // int8: one group, built before the loop (fewer live registers)
      key_group();
      kg_cur = kg;
    }
    float lc[NM][4];
    for (int x = 0; x < NM; ++x)
      for (int i = 0; i < 4; ++i) lc[x][i] = 0.0f;
    if constexpr (G::CH)
      key_mma_int8(s, t0, lc);
    else
      key_mma_kivi(s, t0, lc);
      // hi + lo (columns n and n + 4 sit in lanes tig and tig ^ 2), times 2^(CX - E), plus q . zero
#pragma unroll
    for (int x = 0; x < NM; ++x) {
      float v[4];
      for (int i = 0; i < 4; ++i) v[i] = __fadd_rn(lc[x][i], __shfl_xor_sync(0xffffffffu, lc[x][i], 2));
      if (tig < 2) {
        const int t = key_token(x);
        for (int i = 0; i < 4; ++i) {  // kivi: kesc times 2^-row_shift (a power of two: exact)
          const float f = G::CH ? kesc[i & 1] : __fmul_rn(kesc[i & 1], 1.0f / (1 << row_shift(x, i >> 1)));
          sP[t + (i >> 1)][2 * tig + (i & 1)] = __fmaf_rn(v[i], f, kbias[i & 1]);
        }
      }
    }
    __syncwarp();
    float lg[TPL][kSG];
    for (int j = 0; j < TPL; ++j)
      for (int g = 0; g < kSG; ++g) lg[j][g] = sP[lane * TPL + j][g];
    __syncwarp();
    softmax<true>(lg);

    // value operand: p (kivi: p * scale) of tokens value_token(kb, r), head gid & 3, hi or lo
    const int g = gid & 3;
    float xv[NM][4], mx = 0.0f, zs = 0.0f;
#pragma unroll
    for (int kb = 0; kb < NM; ++kb)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int t = value_token(kb, r);
        const float p = sP[t][g];
        if constexpr (G::CH) {
          xv[kb][r] = p;
        } else {
          const float2 par = vpar[t];
          xv[kb][r] = __fmul_rn(p, par.x);
          zs = __fmaf_rn(p, par.y, zs);
        }
        mx = fmaxf(mx, fabsf(xv[kb][r]));
      }
    for (int off = 1; off < 4; off <<= 1) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      if constexpr (!G::CH) zs = __fadd_rn(zs, __shfl_xor_sync(0xffffffffu, zs, off));
    }
    ev_own = split_exponent(mx, ev_own);
    if constexpr (!G::CH)
      for (int gg = 0; gg < kSG; ++gg) pz[gg] = __fadd_rn(pz[gg], __shfl_sync(0xffffffffu, zs, 4 * gg));
    for (int i = 0; i < 2; ++i) {
      const int en = __shfl_sync(0xffffffffu, ev_own, 4 * (2 * (tig & 1) + i));
      const float f = mul_pow2(1.0f, en - evc[i]);  // exact: the accumulator moves to the new units
      for (int x = 0; x < 8; ++x) {
        oacc[x][i] = __fmul_rn(oacc[x][i], f);
        oacc[x][i + 2] = __fmul_rn(oacc[x][i + 2], f);
      }
      evc[i] = en;
    }
    uint32_t vb[NM][2];
#pragma unroll
    for (int kb = 0; kb < NM; ++kb) {
      vb[kb][0] = pack2(split_half(xv[kb][0], ev_own, gid >= 4), split_half(xv[kb][1], ev_own, gid >= 4));
      vb[kb][1] = pack2(split_half(xv[kb][2], ev_own, gid >= 4), split_half(xv[kb][3], ev_own, gid >= 4));
    }
    if constexpr (G::CH)
      value_mma_int8(s + G::VOFF, t0, vb);
    else
      value_mma_kivi(s + G::VOFF, t0, vb);
    __syncwarp();
  }

  // Adds the tensor-core sums to the warp's merged output mo[g][c] (hi + lo, back to fp32 units;
  // int8: times the channel's value scale, one FMA).
  __device__ __forceinline__ void add_mma(float* mo) const {
    for (int x = 0; x < 8; ++x) {
      float v[4];
      for (int i = 0; i < 4; ++i) v[i] = __fadd_rn(oacc[x][i], __shfl_xor_sync(0xffffffffu, oacc[x][i], 2));
      if (tig < 2)
        for (int i = 0; i < 4; ++i) {
          if constexpr (G::CH) {
            const int c = 16 * x + gid + 8 * (i >> 1);
            float* o = mo + (2 * tig + (i & 1)) * kSD + c;
            if (sq.v.f.T > 0) *o = __fmaf_rn(mul_pow2(v[i], -evc[i & 1]), vscale(c), *o);
          } else {
            float* o = mo + (2 * tig + (i & 1)) * kSD + 16 * gid + 2 * x + (i >> 1);
            *o = __fmaf_rn(v[i], mul_pow2(1.0f, 24 - evc[i & 1] - row_shift(x, i >> 1)), *o);
          }
        }
    }
  }

  // After the last tile: the MMA sums (and sum p * zero) into the fp32 accumulators acc, through
  // the warp's stage buffers mo (free then), so that the rest holds no MMA state (registers).
  __device__ __forceinline__ void fold_mma(float* mo) {
    for (int g = 0; g < kSG; ++g)
      for (int i = 0; i < 4; ++i) mo[g * kSD + 4 * lane + i] = pz[g];  // acc is 0 here
    __syncwarp();
    add_mma(mo);
    __syncwarp();
    for (int g = 0; g < kSG; ++g)
      for (int i = 0; i < 4; ++i) acc[g][i] = mo[g * kSD + 4 * lane + i];
    __syncwarp();
  }

  // One staged fp16 tile: logits, softmax, P V.
  __device__ __forceinline__ void tile(int tile, const unsigned char* s) {
    if constexpr (KB > 0) {
      mma_tile(tile, s);
      return;
    }
    const int t0 = mb + tile * TT;
    float lg[TPL][kSG];
    {
      // 8 lanes per token, 4 tokens per pass: lane part reads chunks part and part + 8
      // (channels 8 part .. and 64 + 8 part ..), then the 8 partial sums meet by xor shuffles.
      const int part = lane & 7, tq = lane >> 3;
      for (int pass = 0; pass < TT / 4; ++pass) {
        const int t = pass * 4 + tq;
        float sg[kSG] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint4 w = *reinterpret_cast<const uint4*>(s + swz(t, part + 8 * half));
          const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int c = 64 * half + 8 * part + i;
            const float k = half_to_float((uint16_t)(i & 1 ? u[i / 2] >> 16 : u[i / 2] & 0xFFFFu));
            if (DBG) dbg_row(dbg_k, t0 + t)[c] = k;
#pragma unroll
            for (int g = 0; g < kSG; ++g) sg[g] = __fmaf_rn(qr[(8 * half + i) * kSG + g], k, sg[g]);
          }
        }
        for (int off = 1; off < 8; off <<= 1)
          for (int g = 0; g < kSG; ++g) sg[g] = __fadd_rn(sg[g], __shfl_xor_sync(0xffffffffu, sg[g], off));
        if (part == 0)
          for (int g = 0; g < kSG; ++g) sP[t][g] = sg[g];
      }
      __syncwarp();
      for (int g = 0; g < kSG; ++g) lg[0][g] = sP[lane][g];
      __syncwarp();
    }
    softmax(lg);
    const unsigned char* sv = s + G::VOFF;
    const float4* p4 = reinterpret_cast<const float4*>(sP);
#pragma unroll 4
    for (int t = 0; t < TT; ++t) {
      const float4 p = p4[t];
      float v[4];
      const uint2 w = *reinterpret_cast<const uint2*>(sv + swz(t, lane >> 1) + (lane & 1) * 8);
      v[0] = half_to_float((uint16_t)(w.x & 0xFFFFu));
      v[1] = half_to_float((uint16_t)(w.x >> 16));
      v[2] = half_to_float((uint16_t)(w.y & 0xFFFFu));
      v[3] = half_to_float((uint16_t)(w.y >> 16));
      if (DBG)
        for (int i = 0; i < 4; ++i) dbg_row(dbg_v, t0 + t)[4 * lane + i] = v[i];
      for (int i = 0; i < 4; ++i) {
        acc[0][i] = __fmaf_rn(p.x, v[i], acc[0][i]);
        acc[1][i] = __fmaf_rn(p.y, v[i], acc[1][i]);
        acc[2][i] = __fmaf_rn(p.z, v[i], acc[2][i]);
        acc[3][i] = __fmaf_rn(p.w, v[i], acc[3][i]);
      }
    }
    __syncwarp();
  }

  // K_hat / V_hat of packed token r (of the packed range) straight from global memory (the rest path).
  __device__ __forceinline__ float khat_packed(int64_t r, int c) const {
    const PackedLayout& f = sq.k.f;
    const int64_t row = (int64_t)h * kSD + c;
    if constexpr (G::CH)
      return KvlabRecipe::sym_dequant(__ldg(sq.k.codes + row * f.row_bytes + r),
                                      {sparam(sq.k.scale, row * f.groups + r / f.G, f.half_params), 0.0f}, 8);
    if constexpr (BO) {  // page p, token o of it: low plane row c, high plane row slot
      const int64_t p = r / f.G, o = r % f.G, rb = packed_bytes(f.page_tokens(p), KB);
      const int64_t i = ((int64_t)h * f.groups + p) * kSD + c;
      uint32_t code =
          (__ldg(sq.k.codes + h * f.slice_low() + f.page_low(p) + c * rb + o * KB / 8) >> (o * KB % 8)) &
          ((1u << KB) - 1u);
      const uint8_t slot = __ldg(sq.k.index + i);
      if (slot != 0xFF)
        code |= ((__ldg(sq.k.high + h * f.slice_high() + f.page_high(p) +
                        slot * packed_bytes(f.page_tokens(p), 2) + o / 4) >>
                  (2 * (o % 4))) &
                 3u)
                << KB;
      return sdequant(code, sparam(sq.k.scale, i, f.half_params), sparam(sq.k.zero, i, f.half_params));
    }
    const uint32_t code =
        (__ldg(sq.k.codes + row * f.row_bytes + r * KB / 8) >> (r * KB % 8)) & ((1u << KB) - 1u);
    const int64_t i = row * f.groups + r / f.G;
    return sdequant(code, sparam(sq.k.scale, i, f.half_params), sparam(sq.k.zero, i, f.half_params));
  }
  __device__ __forceinline__ float vhat_packed(int64_t r, int c) const {
    const PackedLayout& f = sq.v.f;
    if constexpr (G::CH) {  // channel rows, like the keys
      const int64_t crow = (int64_t)h * kSD + c;
      return KvlabRecipe::sym_dequant(__ldg(sq.v.codes + crow * f.row_bytes + r),
                                      {sparam(sq.v.scale, crow * f.groups + r / f.G, f.half_params), 0.0f},
                                      8);
    }
    const int64_t row = (int64_t)h * f.T + r;
    const uint32_t code =
        (__ldg(sq.v.codes + row * f.row_bytes + c * KB / 8) >> (c * KB % 8)) & ((1u << KB) - 1u);
    const int64_t i = row * f.groups + c / f.G;
    return sdequant(code, sparam(sq.v.scale, i, f.half_params), sparam(sq.v.zero, i, f.half_params));
  }
  // fp16 row of token t of a role whose packed range is [S, S + T): the sink, then the tokens after it.
  __device__ __forceinline__ const uint16_t* fp_row(const uint16_t* base, int t, int T) const {
    const int row = t < sq.S ? t : t - T;
    return base + ((int64_t)h * (sq.L - T) + row) * kSD;
  }

  // The partial logits of rest token t over channels c1 .. c1 + kSD / 4 into lg (an fp32 FMA
  // chain), K_hat 8 channels at a time: the loads of a batch are in flight together (one load per
  // element in a dependent loop cost a memory latency per element).
  template <bool PACKED>
  __device__ __forceinline__ void rest_logits(int t, int c1, float (&lg)[kSG]) const {
    const uint4* fp = reinterpret_cast<const uint4*>(fp_row(sq.k_fp, t, (int)sq.k.f.T));  // 16-byte rows
#pragma unroll 1
    for (int c0 = c1; c0 < c1 + kSD / 4; c0 += 8) {
      float k[8];
      if constexpr (PACKED) {
#pragma unroll
        for (int i = 0; i < 8; ++i) k[i] = khat_packed(t - sq.S, c0 + i);
      } else {
        const uint4 w = __ldg(fp + c0 / 8);
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
          k[i] = half_to_float((uint16_t)(i & 1 ? u[i / 2] >> 16 : u[i / 2] & 0xFFFFu));
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (DBG) dbg_row(dbg_k, t)[c0 + i] = k[i];
        const float4 q = *reinterpret_cast<const float4*>(sQ[c0 + i]);
        lg[0] = __fmaf_rn(q.x, k[i], lg[0]);
        lg[1] = __fmaf_rn(q.y, k[i], lg[1]);
        lg[2] = __fmaf_rn(q.z, k[i], lg[2]);
        lg[3] = __fmaf_rn(q.w, k[i], lg[3]);
      }
    }
  }

  // V_hat of the lane's channels 4 lane .. 4 lane + 3 of rest token t (warp-uniform).
  __device__ __forceinline__ void rest_values(int t, float (&v)[4]) const {
    const int Vq = (int)sq.v.f.T;
    if (KB > 0 && t >= sq.S && t < sq.S + Vq) {
#pragma unroll
      for (int x = 0; x < 4; ++x) v[x] = vhat_packed(t - sq.S, 4 * lane + x);
    } else {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(fp_row(sq.v_fp, t, Vq)) + lane);
      v[0] = half_to_float((uint16_t)(w.x & 0xFFFFu));
      v[1] = half_to_float((uint16_t)(w.x >> 16));
      v[2] = half_to_float((uint16_t)(w.y & 0xFFFFu));
      v[3] = half_to_float((uint16_t)(w.y >> 16));
    }
  }

  // kRestTokens tokens of the rest (index i0 .. of n; before main_begin, then after the main
  // tiles): four lanes per token for the logits (a quarter of the channels each, summed by two
  // xor shuffles), P V one token per step with every token's values loaded at once. Small chunks
  // spread the rest over many warps: at B = 1 one warp per block carried 32 tokens x 128
  // channels of serial loads, and the block's other warps waited for it at the merge (ncu:
  // barrier 8.4 of 14.8 cycles per instruction).
  __device__ __forceinline__ void rest(int i0, int n, int M) {
    const int i = i0 + lane / 4, quarter = lane % 4;
    const int t = i < mb ? i : i + M;
    float lg[TPL][kSG], part[kSG] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < TPL; ++j)
      for (int g = 0; g < kSG; ++g) lg[j][g] = -__builtin_huge_valf();
    if (i < n) {
      if (KB > 0 && t >= sq.S && t < sq.S + (int)sq.k.f.T)
        rest_logits<true>(t, quarter * kSD / 4, part);
      else
        rest_logits<false>(t, quarter * kSD / 4, part);
    }
    for (int g = 0; g < kSG; ++g) {
      part[g] = __fadd_rn(part[g], __shfl_xor_sync(0xffffffffu, part[g], 1));
      part[g] = __fadd_rn(part[g], __shfl_xor_sync(0xffffffffu, part[g], 2));
      if (i < n && quarter == 0) lg[0][g] = part[g];
    }
    // softmax() places lane's probabilities at sP[lane * TPL]: token j's is at sP[4 j * TPL]
    softmax(lg);
    const int cnt = min(kRestTokens, n - i0);
    auto token = [&](int j) { return i0 + j < mb ? i0 + j : i0 + j + M; };
    float v[kRestTokens][4];
#pragma unroll
    for (int j = 0; j < kRestTokens; ++j)
      if (j < cnt) rest_values(token(j), v[j]);
#pragma unroll
    for (int j = 0; j < kRestTokens; ++j) {
      if (j >= cnt) break;
      if (DBG)
        for (int x = 0; x < 4; ++x) dbg_row(dbg_v, token(j))[4 * lane + x] = v[j][x];
      const float4 p = *reinterpret_cast<const float4*>(sP[4 * j * TPL]);
      for (int x = 0; x < 4; ++x) {
        acc[0][x] = __fmaf_rn(p.x, v[j][x], acc[0][x]);
        acc[1][x] = __fmaf_rn(p.y, v[j][x], acc[1][x]);
        acc[2][x] = __fmaf_rn(p.z, v[j][x], acc[2][x]);
        acc[3][x] = __fmaf_rn(p.w, v[j][x], acc[3][x]);
      }
    }
    __syncwarp();
  }
};

// After __syncthreads: the block's warps, each of which left its unnormalized output [kSG][kSD],
// then m[kSG], l[kSG] at the start of its `warp_bytes` area of `warps`, merged in warp order into
// this split's partial (max, sum, unnormalized output). Shared by the streaming kernels.
__device__ __forceinline__ void merge_warp_partials(const unsigned char* warps, int warp_bytes,
                                                    const AttnArgs& a, int b, int h, int split) {
  for (int i = threadIdx.x; i < kSG * kSD; i += blockDim.x) {
    const int g = i / kSD, c = i % kSD;
    const float* wm[kStreamWarps];
    float M2 = -__builtin_huge_valf();
    for (int x = 0; x < kStreamWarps; ++x) {
      wm[x] = reinterpret_cast<const float*>(warps + x * warp_bytes);
      M2 = fmaxf(M2, wm[x][kSG * kSD + g]);
    }
    float o = 0.0f, lsum = 0.0f;
    if (M2 != -__builtin_huge_valf())
      for (int x = 0; x < kStreamWarps; ++x) {
        const float e = exp2f(__fsub_rn(wm[x][kSG * kSD + g], M2));
        o = __fmaf_rn(e, wm[x][g * kSD + c], o);
        lsum = __fmaf_rn(e, wm[x][kSG * kSD + kSG + g], lsum);
      }
    const int64_t row = ((int64_t)b * a.Hkv * kSG + h * kSG + g) * a.splits + split;
    a.part_o[row * kSD + c] = o;
    if (c == 0) {
      a.part_ml[row * 2] = M2;
      a.part_ml[row * 2 + 1] = lsum;
    }
  }
}

template <int KB, bool DBG, bool BO = false>
__global__ void __launch_bounds__(kStreamWarps * 32, KB == 8 ? 3
                                                     : KB    ? 4
                                                             : 1) decode_stream(AttnArgs a) {
  using G = StreamGeo<KB, BO>;
  constexpr int TT = G::TT;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) unsigned char sq_raw[sizeof(AttnSeq)];  // no constructor in shared memory
  const AttnSeq& sq = *reinterpret_cast<const AttnSeq*>(sq_raw);
  float(*sQ)[kSG] = reinterpret_cast<float(*)[kSG]>(smem);
  const int b = blockIdx.z, h = blockIdx.y, split = blockIdx.x, tid = threadIdx.x, warp = tid / 32;
  if (tid == 0) *reinterpret_cast<AttnSeq*>(sq_raw) = a.seqs[b];
  for (int i = tid; i < kSD * kSG; i += blockDim.x) {
    const int c = i / kSG, g = i % kSG;
    sQ[c][g] = a.q[((int64_t)b * a.Hkv * kSG + h * kSG + g) * kSD + c] * a.scale_log2;
  }
  __syncthreads();
  unsigned char* wmem = smem + kSD * kSG * 4 + warp * G::WARP;
  StreamWarp<KB, DBG, BO> w(sq, a, sQ, wmem, h);

  const int L = sq.L;
  const int M = stream_main_tokens(KB, L, (int)sq.k.f.T, (int)sq.v.f.T);
  const int ntiles = M / TT, per = (ntiles + a.splits - 1) / a.splits;
  // the warps take runs of R consecutive tiles in turn (stream_run_tiles): a packed run is 128
  // tokens, one kivi key group (its MMA operand is built once) and whole 32-byte sectors of every
  // key row; the block's warps sweep neighbouring runs together
  constexpr int R = stream_run_tiles(KB);
  const int ts = split * per, te = min(ntiles, ts + per);
  auto tile_of = [&](int k) { return ts + (k / R) * (R * kStreamWarps) + warp * R + k % R; };
  int tile = tile_of(0);
  if (tile < te) w.issue(tile, w.stage(0));
  cp_async_commit();
  if constexpr (G::CH)
    if (tile < te) w.key_group();
  for (int k = 0; tile < te; ++k, tile = tile_of(k)) {
    if (tile_of(k + 1) < te) w.issue(tile_of(k + 1), w.stage((k + 1) & 1));
    cp_async_commit();
    if constexpr (KB > 0 && !G::CH) w.load_params(tile);
    cp_async_wait<1>();
    __syncwarp();
    w.tile(tile, w.stage(k & 1));
  }
  cp_async_wait<0>();
  float* mo = reinterpret_cast<float*>(wmem);  // [kSG][kSD] then m[kSG], l[kSG]
  if constexpr (KB > 0) w.fold_mma(mo);
  // the rest: chunk r of kRestTokens tokens goes to split r % splits, warp (r / splits) % kStreamWarps
  const int nrest = L - M;
  for (int r = split + warp * a.splits; r * kRestTokens < nrest; r += a.splits * kStreamWarps)
    w.rest(r * kRestTokens, nrest, M);

  // merge the warps in warp order into this split's partial (max, sum, unnormalized output)
  for (int g = 0; g < kSG; ++g)
    for (int i = 0; i < 4; ++i) mo[g * kSD + 4 * w.lane + i] = w.acc[g][i];
  if (w.lane == 0)
    for (int g = 0; g < kSG; ++g) {  // constant indices keep m, l, acc in registers
      mo[kSG * kSD + g] = w.m[g];
      mo[kSG * kSD + kSG + g] = w.l[g];
    }
  __syncthreads();
  merge_warp_partials(smem + kSD * kSG * 4, G::WARP, a, b, h, split);
}

}  // namespace kvlab::gpu::attn
