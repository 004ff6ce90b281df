// Decode attention over codebook (VQ / CQ) caches (attn_types.h AttnVq, docs/FORMATS.md 9.5).
// One block per (split, KV head, sequence); each of the kVqWarps warps walks its own tiles of
// kVqTile tokens, the tiles' code rows staged by cp.async one tile ahead; online softmax per
// warp, warps merged in order. decode_vq (every spec): the first n_smem entries of every key and
// value codebook of the head staged in shared memory (`kvlab vq reorder` sorts the entries by
// use, so these are the hot ones: VQ-LLM's placement), the others read from global memory (L2);
// logits with lane = token (K_hat of each channel = the sum of its stages' entries in stage
// order from 0.0f, vq_decode's fp32 sum: core's bytes; then q . K_hat as an fp32 FMA chain), P V
// with lane = 4 channels (V_hat the same sum). decode_cq48 (CQ-4c8b, 4 query heads): two blocks
// per KV head, the keys through a table of q . entry, every entry in shared memory (below).
#include <cstdint>
#include <type_traits>

#include "attn_kinds.h"
#include "attn_types.h"

namespace kvlab::gpu::attn {

namespace {

constexpr int kD = 128, kThreads = kVqWarps * 32;

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Words of one staged code row: odd, so the 32 lanes reading word w of 32 rows hit 32 banks.
KV_HD int vq_row_stride(const AttnVq& v) { return (v.row_bytes / 4) | 1; }
// Bytes of one warp's area: two stages of (key rows, value rows) and the tile's probabilities;
// at the end the same bytes hold the warp's output for the merge.
KV_HD int vq_warp_bytes(const AttnVq& v, int group) {
  const int tiles = 2 * 2 * kVqTile * vq_row_stride(v) * 4 + kVqTile * group * 4;
  const int merge = (group * kD + 2 * group) * 4;
  return tiles > merge ? tiles : merge;
}

// CW consecutive floats (CW = 4: one 16-byte load; the host picks it when vec % 4 == 0).
template <int CW>
__device__ __forceinline__ void load_cw(const float* p, bool global, float* out) {
  if constexpr (CW == 4) {
    const float4 x = global ? __ldg(reinterpret_cast<const float4*>(p)) : *reinterpret_cast<const float4*>(p);
    out[0] = x.x;
    out[1] = x.y;
    out[2] = x.z;
    out[3] = x.w;
  } else {
    out[0] = global ? __ldg(p) : *p;
  }
}

// Code i (= stage * groups + group) of a staged row: `bits` bits at bit i * bits, LSB first.
__device__ __forceinline__ uint32_t row_code(const uint32_t* row, int i, int bits) {
  const int o = i * bits, w = o >> 5, sh = o & 31;
  uint32_t x = row[w] >> sh;
  if (sh + bits > 32) x |= row[w + 1] << (32 - sh);
  return x & ((1u << bits) - 1u);
}

// The W warps' (max, sum, output) merged in warp order into this split's partial, as
// decode_stream does: each warp writes its own at wmem, the block then reads every warp's
// (w0 + x * wbytes). The block's GQ query heads are hq0 .. of the sequence's Hq.
template <int GQ, int W>
__device__ __forceinline__ void merge_warps(const AttnArgs& a, const float (&m)[GQ], const float (&l)[GQ],
                                            const float (&acc)[GQ][4], unsigned char* wmem,
                                            const unsigned char* w0, int wbytes, int b, int hq0, int Hq,
                                            int split) {
  const int tid = threadIdx.x, lane = tid % 32;
  float* mo = reinterpret_cast<float*>(wmem);  // [GQ][kD] then m[GQ], l[GQ]
  for (int g = 0; g < GQ; ++g)
    for (int x = 0; x < 4; ++x) mo[g * kD + 4 * lane + x] = acc[g][x];
  if (lane == 0)
    for (int g = 0; g < GQ; ++g) {
      mo[GQ * kD + g] = m[g];
      mo[GQ * kD + GQ + g] = l[g];
    }
  __syncthreads();
  for (int i = tid; i < GQ * kD; i += W * 32) {
    const int g = i / kD, c = i % kD;
    float M = -__builtin_huge_valf();
    for (int x = 0; x < W; ++x) M = fmaxf(M, reinterpret_cast<const float*>(w0 + x * wbytes)[GQ * kD + g]);
    float o = 0.0f, lsum = 0.0f;
    if (M != -__builtin_huge_valf())
      for (int x = 0; x < W; ++x) {
        const float* wm = reinterpret_cast<const float*>(w0 + x * wbytes);
        const float e = exp2f(__fsub_rn(wm[GQ * kD + g], M));
        o = __fmaf_rn(e, wm[g * kD + c], o);
        lsum = __fmaf_rn(e, wm[GQ * kD + GQ + g], lsum);
      }
    const int64_t row = ((int64_t)b * Hq + hq0 + g) * a.splits + split;
    a.part_o[row * kD + c] = o;
    if (c == 0) {
      a.part_ml[row * 2] = M;
      a.part_ml[row * 2 + 1] = lsum;
    }
  }
}

// Online softmax of one tile's logits s (one token per lane; -inf: none): p -> sP[lane], the
// running max and sum, and the accumulators rescaled.
template <int GQ>
__device__ __forceinline__ void tile_softmax(const float (&s)[GQ], float (&m)[GQ], float (&l)[GQ],
                                             float (&acc)[GQ][4], float (*sP)[GQ], int lane) {
  for (int g = 0; g < GQ; ++g) {
    float mx = s[g];
    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_new = fmaxf(m[g], mx);  // finite: the tile has a token
    const float p = exp2f(__fsub_rn(s[g], m_new));
    sP[lane][g] = p;
    float sum = p;
    for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
    const float alpha = exp2f(__fsub_rn(m[g], m_new));
    l[g] = __fmaf_rn(l[g], alpha, sum);
    m[g] = m_new;
    for (int x = 0; x < 4; ++x) acc[g][x] = __fmul_rn(acc[g][x], alpha);
  }
  __syncwarp();
}

// cp.async of tile `tile`'s key and value code rows (RW words each) into dk, dv (rows of SW words).
__device__ __forceinline__ void issue_rows(const uint8_t* kcodes, const uint8_t* vcodes, int row_bytes, int L,
                                           int tile, uint32_t* dk, uint32_t* dv, int RW, int SW, int lane) {
  const int t0 = tile * kVqTile, n = min(kVqTile, L - t0);
  const uint8_t* sk = kcodes + (int64_t)t0 * row_bytes;
  const uint8_t* sv = vcodes + (int64_t)t0 * row_bytes;
  for (int j = lane; j < n * RW; j += 32) {
    const int r = j / RW, w = j % RW;
    cp_async4(dk + r * SW + w, sk + (int64_t)j * 4);
    cp_async4(dv + r * SW + w, sv + (int64_t)j * 4);
  }
}

// CW: channels read per codebook lookup (4 when vec % 4 == 0, else 1).
template <int GQ, bool DBG, int CW>
__global__ void __launch_bounds__(kThreads, 1) decode_vq(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) unsigned char sq_raw[sizeof(AttnSeq)];  // no constructor in shared memory
  const AttnSeq& sq = *reinterpret_cast<const AttnSeq*>(sq_raw);
  const AttnVq v = a.vq;  // a copy: a reference to the parameter would live in local memory
  const int b = blockIdx.z, h = blockIdx.y, split = blockIdx.x, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int vec = v.vec, bits = v.bits, R = v.stages, G = kD / vec, E = 1 << bits, n_s = v.n_smem;
  const int SW = vq_row_stride(v), RW = v.row_bytes / 4;
  float(*sQ)[GQ] = reinterpret_cast<float(*)[GQ]>(smem);
  float* kb = reinterpret_cast<float*>(smem + kD * GQ * 4);  // (stages, groups, n_smem, vec)
  float* vb = kb + R * kD * n_s;
  unsigned char* wmem = reinterpret_cast<unsigned char*>(vb + R * kD * n_s) + warp * vq_warp_bytes(v, GQ);
  uint32_t* rows = reinterpret_cast<uint32_t*>(wmem);  // [stage][role][token][SW]
  float(*sP)[GQ] = reinterpret_cast<float(*)[GQ]>(wmem + 2 * 2 * kVqTile * SW * 4);

  if (tid == 0) *reinterpret_cast<AttnSeq*>(sq_raw) = a.seqs[b];
  for (int i = tid; i < kD * GQ; i += kThreads) {
    const int c = i / GQ, g = i % GQ;
    sQ[c][g] = a.q[((int64_t)b * a.Hkv * GQ + h * GQ + g) * kD + c] * a.scale_log2;
  }
  // the hot entries: run j of n_smem * vec floats is entries [0, n_smem) of book j (stage, group)
  const int run = n_s * vec, nruns = R * G;
  const float* gk = v.k_books + (int64_t)h * R * kD * E;  // this head's books, E * vec floats each
  const float* gv = v.v_books + (int64_t)h * R * kD * E;
  for (int i = tid * CW; i < nruns * run; i += kThreads * CW) {
    const int j = i / run, r = i % run;
    load_cw<CW>(gk + (int64_t)j * E * vec + r, true, kb + i);
    load_cw<CW>(gv + (int64_t)j * E * vec + r, true, vb + i);
  }
  __syncthreads();

  const int L = sq.L;
  const uint8_t* kcodes = sq.k.codes + (int64_t)h * L * v.row_bytes;
  const uint8_t* vcodes = sq.v.codes + (int64_t)h * L * v.row_bytes;
  float* dbg_k = DBG ? a.dbg_k + sq.dbg + (int64_t)h * L * kD : nullptr;
  float* dbg_v = DBG ? a.dbg_v + sq.dbg + (int64_t)h * L * kD : nullptr;
  // K_hat (or V_hat) of channels c0 .. c0 + CW - 1 of a staged row: the entries of every stage,
  // from shared memory when hot, else global, summed in stage order from 0.0f as vq_decode does
  auto hat = [&](const uint32_t* row, int c0, const float* sbook, const float* gbook, float* out) {
    const int g = c0 / vec, j = c0 % vec;
    for (int x = 0; x < CW; ++x) out[x] = 0.0f;
    for (int st = 0; st < R; ++st) {
      const int e = (int)row_code(row, st * G + g, bits);
      float ent[CW];
      if (e < n_s)
        load_cw<CW>(sbook + ((st * G + g) * n_s + e) * vec + j, false, ent);
      else
        load_cw<CW>(gbook + ((int64_t)(st * G + g) * E + e) * vec + j, true, ent);
      for (int x = 0; x < CW; ++x) out[x] = __fadd_rn(out[x], ent[x]);
    }
  };

  const int ntiles = (L + kVqTile - 1) / kVqTile, per = (ntiles + a.splits - 1) / a.splits;
  const int ts = split * per, te = min(ntiles, ts + per);
  auto issue = [&](int tile, int stage) {
    uint32_t* dk = rows + stage * 2 * kVqTile * SW;
    issue_rows(kcodes, vcodes, v.row_bytes, L, tile, dk, dk + kVqTile * SW, RW, SW, lane);
  };

  float m[GQ], l[GQ], acc[GQ][4];
  for (int g = 0; g < GQ; ++g) {
    m[g] = -__builtin_huge_valf();
    l[g] = 0.0f;
    for (int x = 0; x < 4; ++x) acc[g][x] = 0.0f;
  }
  int tile = ts + warp;
  if (tile < te) issue(tile, 0);
  cp_commit();
  for (int k = 0; tile < te; ++k, tile += kVqWarps) {
    if (tile + kVqWarps < te) issue(tile + kVqWarps, (k + 1) & 1);
    cp_commit();
    cp_wait<1>();
    __syncwarp();
    const uint32_t* krows = rows + (k & 1) * 2 * kVqTile * SW;
    const uint32_t* vrows = krows + kVqTile * SW;
    const int t0 = tile * kVqTile, n = min(kVqTile, L - t0);

    // ---- logits: lane = token
    float s[GQ];
    for (int g = 0; g < GQ; ++g) s[g] = lane < n ? 0.0f : -__builtin_huge_valf();
    if (lane < n) {
      const uint32_t* row = krows + lane * SW;
      for (int c0 = 0; c0 < kD; c0 += CW) {
        float kh[CW];
        hat(row, c0, kb, gk, kh);
        for (int x = 0; x < CW; ++x) {
          if (DBG) dbg_k[(int64_t)(t0 + lane) * kD + c0 + x] = kh[x];
          for (int g = 0; g < GQ; ++g) s[g] = __fmaf_rn(sQ[c0 + x][g], kh[x], s[g]);
        }
      }
    }
    tile_softmax<GQ>(s, m, l, acc, sP, lane);
    // ---- P V: lane = channels 4 lane .. 4 lane + 3
    for (int tt = 0; tt < n; ++tt) {
      const uint32_t* row = vrows + tt * SW;
      float val[4];
      for (int x = 0; x < 4; x += CW) hat(row, 4 * lane + x, vb, gv, val + x);
      if (DBG)
        for (int x = 0; x < 4; ++x) dbg_v[(int64_t)(t0 + tt) * kD + 4 * lane + x] = val[x];
      for (int g = 0; g < GQ; ++g) {
        const float p = sP[tt][g];
        for (int x = 0; x < 4; ++x) acc[g][x] = __fmaf_rn(p, val[x], acc[g][x]);
      }
    }
    __syncwarp();  // every lane is done with this stage before the next issue overwrites it
  }
  cp_wait<0>();
  __syncwarp();

  merge_warps<GQ, kVqWarps>(a, m, l, acc, wmem, reinterpret_cast<const unsigned char*>(vb + R * kD * n_s),
                            vq_warp_bytes(v, GQ), b, h * GQ, a.Hkv * GQ, split);
}

// CQ-4c8b (vec 4, 8-bit codes, one stage) with 4 query heads: two blocks per (split, KV head,
// sequence), each for one pair of the query heads, so that every table and book entry lives in
// shared memory (64 KiB + 128 KiB; one block of kCqWarps warps per SM):
// - keys through a table T[entry][group] of q . entry for the pair's 2 query heads (float2),
//   built per block from the key books (fp32 FMA); a logit is the fp32 sum of the 32 T values of
//   its codes. Lane = token, and lane i visits the groups in the order i, i + 1, ... (mod 32), so
//   the 16 lanes of one 8-byte gather read 16 consecutive groups: 16 banks, no conflict.
// - values from the books in shared memory, V[entry][group] (float4): lane = group, so a gather
//   hits 32 consecutive 16-byte slots whatever the codes, no conflict.
// Code rows come from global memory as 16-byte loads, one tile ahead in registers; the value rows
// go word-major to shared memory, where lane g reads 4 tokens' codes of its group at once. The
// debug path (pair 0 only) writes K_hat from the key books at the codes the table was read at.
constexpr int kCqG = 32, kCqE = 256, kCqWarps = 16, kCqThreads = kCqWarps * 32;
constexpr int kCqVS = 36;  // words per staged value-code word row: word w of tokens 0..31, padded
constexpr int kCqTableBytes = kCqE * kCqG * 8, kCqBookBytes = kCqE * kCqG * 16;
// One warp's area: the tile's value codes (8 word rows) and probabilities (2 heads), reused for
// the merge (2 x 128 outputs + 2 (max, sum)).
constexpr int kCqWarpBytes = 8 * kCqVS * 4 + kVqTile * 2 * 4;
static_assert(kCqWarpBytes >= (2 * kD + 4) * 4, "the merge reuses the warp's area");
constexpr int kCqSmem = kCqTableBytes + kCqBookBytes + kCqWarps * kCqWarpBytes;

// The 32 code bytes of a row, rotated by `by` bytes: byte k of the result is byte (k + by) % 32.
__device__ __forceinline__ void rotate_row(uint32_t (&x)[8], int by) {
#pragma unroll
  for (int s = 1; s < 8; s <<= 1) {  // whole words: a barrel shifter, every index static
    uint32_t y[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = ((by >> 2) & s) ? x[(i + s) & 7] : x[i];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = y[i];
  }
  uint32_t y[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = __funnelshift_r(x[i], x[(i + 1) & 7], 8 * (by & 3));
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = y[i];
}

// 32 bytes of a code row (16-byte aligned) from global memory, not kept in L1.
__device__ __forceinline__ void load_row(const uint8_t* p, uint32_t (&x)[8]) {
  const uint4 a = __ldcs(reinterpret_cast<const uint4*>(p)),
              b = __ldcs(reinterpret_cast<const uint4*>(p) + 1);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

template <bool DBG>
__global__ void __launch_bounds__(kCqThreads, 1) decode_cq48(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) unsigned char sq_raw[sizeof(AttnSeq)];  // no constructor in shared memory
  const AttnSeq& sq = *reinterpret_cast<const AttnSeq*>(sq_raw);
  const int b = blockIdx.z, h = blockIdx.y >> 1, pair = blockIdx.y & 1, split = blockIdx.x, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, hq0 = 4 * h + 2 * pair;
  float2* T = reinterpret_cast<float2*>(smem);                  // [entry][group]: 2 heads' q . entry
  float4* V = reinterpret_cast<float4*>(smem + kCqTableBytes);  // [entry][group]: value entries
  unsigned char* w0 = smem + kCqTableBytes + kCqBookBytes;
  unsigned char* wmem = w0 + warp * kCqWarpBytes;
  uint32_t* sV = reinterpret_cast<uint32_t*>(wmem);  // [word][kCqVS]: value code rows, word-major
  float(*sP)[2] = reinterpret_cast<float(*)[2]>(wmem + 8 * kCqVS * 4);
  float(*sQ)[2] = reinterpret_cast<float(*)[2]>(w0);  // until the table is built

  if (tid == 0) *reinterpret_cast<AttnSeq*>(sq_raw) = a.seqs[b];
  for (int i = tid; i < kD * 2; i += kCqThreads) {
    const int c = i / 2, g = i % 2;
    sQ[c][g] = a.q[((int64_t)b * a.Hkv * 4 + hq0 + g) * kD + c] * a.scale_log2;
  }
  __syncthreads();
  const float4* gk = reinterpret_cast<const float4*>(a.vq.k_books) + (int64_t)h * kCqG * kCqE;
  const float4* gv = reinterpret_cast<const float4*>(a.vq.v_books) + (int64_t)h * kCqG * kCqE;
  for (int i = tid; i < kCqG * kCqE; i += kCqThreads) {  // i = entry * 32 + group
    const int g = i % kCqG, e = i / kCqG, c = 4 * g;
    const float4 k = __ldg(gk + g * kCqE + e);
    float t[2];
    for (int x = 0; x < 2; ++x)
      t[x] = __fmaf_rn(sQ[c + 3][x], k.w,
                       __fmaf_rn(sQ[c + 2][x], k.z, __fmaf_rn(sQ[c + 1][x], k.y, __fmul_rn(sQ[c][x], k.x))));
    T[i] = make_float2(t[0], t[1]);
    V[i] = __ldg(gv + g * kCqE + e);
  }
  __syncthreads();  // sQ's bytes go to the warps from here

  const int L = sq.L;
  const uint8_t* kcodes = sq.k.codes + (int64_t)h * L * 32;
  const uint8_t* vcodes = sq.v.codes + (int64_t)h * L * 32;
  const bool dbg = DBG && pair == 0;
  float* dbg_k = DBG ? a.dbg_k + sq.dbg + (int64_t)h * L * kD : nullptr;
  float* dbg_v = DBG ? a.dbg_v + sq.dbg + (int64_t)h * L * kD : nullptr;
  const int ntiles = (L + kVqTile - 1) / kVqTile, per = (ntiles + a.splits - 1) / a.splits;
  const int ts = split * per, te = min(ntiles, ts + per);
  float m[2], l[2], acc[2][4];
  for (int g = 0; g < 2; ++g) {
    m[g] = -__builtin_huge_valf();
    l[g] = 0.0f;
    for (int x = 0; x < 4; ++x) acc[g][x] = 0.0f;
  }
  // byte k % 4 of goff[k / 4]: the byte offset 8 g of group g = (lane + k) % 32 in a T row
  uint32_t goff[8];
  for (int w = 0; w < 8; ++w) {
    goff[w] = 0;
    for (int j = 0; j < 4; ++j) goff[w] |= (uint32_t)(((lane + 4 * w + j) & (kCqG - 1)) * 8) << (8 * j);
  }
  const unsigned char* Tb = reinterpret_cast<const unsigned char*>(T);
  const unsigned char* Vb = reinterpret_cast<const unsigned char*>(V);
  const uint32_t* vw = sV + (lane >> 2) * kCqVS;                   // this lane's group's code words
  const uint32_t vsel = 0x4440u | (lane & 3), lane16 = lane << 4;  // its code byte; V[.][lane]
  uint32_t kn[8] = {}, vn[8] = {};  // the next tile's rows of this lane's token
  auto fetch = [&](int tile) {
    const int t = tile * kVqTile + lane;
    if (tile < te && t < L) {
      load_row(kcodes + (int64_t)t * 32, kn);
      load_row(vcodes + (int64_t)t * 32, vn);
    }
  };
  int tile = ts + warp;
  fetch(tile);
  for (; tile < te; tile += kCqWarps) {
    uint32_t kr[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      kr[i] = kn[i];
      sV[i * kCqVS + lane] = vn[i];
    }
    fetch(tile + kCqWarps);
    const int t0 = tile * kVqTile, n = min(kVqTile, L - t0);

    // ---- logits: lane = token, groups from `lane` on; one byte_perm pairs two codes with their
    // groups' byte offsets: (e << 8) | 8 g = the byte offset of T[e][g]
    float s[2];
    for (int g = 0; g < 2; ++g) s[g] = lane < n ? 0.0f : -__builtin_huge_valf();
    if (lane < n) {
      rotate_row(kr, lane);
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const uint32_t a01 = __byte_perm(kr[w], goff[w], 0x1504), a23 = __byte_perm(kr[w], goff[w], 0x3726);
        const uint32_t off[4] = {a01 & 0xFFFFu, a01 >> 16, a23 & 0xFFFFu, a23 >> 16};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 t = *reinterpret_cast<const float2*>(Tb + off[j]);
          s[0] = __fadd_rn(s[0], t.x);
          s[1] = __fadd_rn(s[1], t.y);
          if (dbg) {
            const int g = (off[j] & 0xFFu) >> 3;
            const float4 kh = __ldg(gk + g * kCqE + (off[j] >> 8));
            float* o = dbg_k + (int64_t)(t0 + lane) * kD + 4 * g;
            o[0] = __fadd_rn(0.0f, kh.x);  // vq_decode's 0 + entry (-0 becomes +0)
            o[1] = __fadd_rn(0.0f, kh.y);
            o[2] = __fadd_rn(0.0f, kh.z);
            o[3] = __fadd_rn(0.0f, kh.w);
          }
        }
      }
    }
    tile_softmax<2>(s, m, l, acc, sP, lane);  // ends with __syncwarp: sV and sP are visible
    // ---- P V: lane = group (channels 4 lane ..), its codes at byte lane % 4 of word lane / 4;
    // 4 tokens' words and 2 tokens' probabilities per load; full tiles without the length test
    auto pv = [&](auto full) {
      for (int t4 = 0; t4 < n; t4 += 4) {
        const uint4 w4 = *reinterpret_cast<const uint4*>(vw + t4);
        const float4 p01 = *reinterpret_cast<const float4*>(sP[t4]),
                     p23 = *reinterpret_cast<const float4*>(sP[t4 + 2]);
        const uint32_t w[4] = {w4.x, w4.y, w4.z, w4.w};
        const float p[4][2] = {{p01.x, p01.y}, {p01.z, p01.w}, {p23.x, p23.y}, {p23.z, p23.w}};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (!decltype(full)::value && t4 + j >= n) break;
          const uint32_t e = __byte_perm(w[j], 0, vsel);
          const float4 x = *reinterpret_cast<const float4*>(Vb + ((e << 9) | lane16));  // V[e][lane]
          if (dbg) {
            float* o = dbg_v + (int64_t)(t0 + t4 + j) * kD + 4 * lane;
            o[0] = __fadd_rn(0.0f, x.x);
            o[1] = __fadd_rn(0.0f, x.y);
            o[2] = __fadd_rn(0.0f, x.z);
            o[3] = __fadd_rn(0.0f, x.w);
          }
          const float xv[4] = {x.x, x.y, x.z, x.w};
          for (int g = 0; g < 2; ++g)
            for (int c = 0; c < 4; ++c) acc[g][c] = __fmaf_rn(p[j][g], xv[c], acc[g][c]);
        }
      }
    };
    if (n == kVqTile)
      pv(std::true_type{});
    else
      pv(std::false_type{});
    __syncwarp();  // every lane is done with sV and sP before the next tile overwrites them
  }
  merge_warps<2, kCqWarps>(a, m, l, acc, wmem, w0, kCqWarpBytes, b, hq0, a.Hkv * 4, split);
}

// Dynamic shared memory a block may ask for (the opt-in limit less the static AttnSeq).
int optin_smem() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  return n - (int)sizeof(AttnSeq);
}

template <int GQ, bool DBG, int CW>
auto vq_kernel() {
  static bool ready = false;  // raise the dynamic shared memory limit once per kernel
  if (!ready) {
    cudaFuncSetAttribute(decode_vq<GQ, DBG, CW>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_smem());
    ready = true;
  }
  return decode_vq<GQ, DBG, CW>;
}

template <int GQ, bool DBG>
auto pick(int cw) {
  return cw == 4 ? vq_kernel<GQ, DBG, 4>() : vq_kernel<GQ, DBG, 1>();
}

template <bool DBG>
auto cq_kernel() {
  static bool ready = false;
  if (!ready) {
    cudaFuncSetAttribute(decode_cq48<DBG>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_smem());
    ready = true;
  }
  return decode_cq48<DBG>;
}

// CQ-4c8b with 4 query heads, where the shared memory holds every entry: decode_cq48.
bool cq_fast(const AttnVq& v, int group) {
  return group == 4 && v.vec == 4 && v.bits == 8 && v.stages == 1 && optin_smem() >= kCqSmem;
}

// The kernel of (query heads per KV head, debug, vec): null when none is built.
void (*kernel_of(int group, bool dbg, const AttnVq& v))(AttnArgs) {
  if (cq_fast(v, group)) return dbg ? cq_kernel<true>() : cq_kernel<false>();
  const int cw = v.vec % 4 == 0 ? 4 : 1;
  if (group == 4) return dbg ? pick<4, true>(cw) : pick<4, false>(cw);
  if (group == 1) return dbg ? pick<1, true>(cw) : pick<1, false>(cw);
  return nullptr;
}

}  // namespace

int vq_warps(const AttnVq& v, int group) { return cq_fast(v, group) ? kCqWarps : kVqWarps; }

int vq_head_blocks(const AttnVq& v, int group) { return cq_fast(v, group) ? 2 : 1; }

int vq_smem_bytes(const AttnVq& v, int group, int n_smem) {
  if (cq_fast(v, group)) return kCqSmem;  // every entry, whatever n_smem
  return kD * group * 4 + 2 * v.stages * kD * n_smem * 4 + kVqWarps * vq_warp_bytes(v, group);
}

int vq_max_smem_entries(const AttnVq& v, int group) {
  if (cq_fast(v, group)) return 1 << v.bits;
  const int room = optin_smem() - vq_smem_bytes(v, group, 0);
  if (room < 0) return -1;
  const int n = room / (2 * v.stages * kD * 4);
  return n < (1 << v.bits) ? n : (1 << v.bits);
}

int vq_blocks_per_sm(const AttnVq& v, int group) {
  int n = 0;
  const auto k = kernel_of(group, false, v);
  if (k)
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, vq_warps(v, group) * 32,
                                                  vq_smem_bytes(v, group, v.n_smem));
  return n;
}

bool launch_vq_kernel(int group, const AttnArgs& a, int B, cudaStream_t s) {
  const auto k = kernel_of(group, a.dbg_k != nullptr, a.vq);
  if (!k) return false;
  k<<<dim3(a.splits, a.Hkv * vq_head_blocks(a.vq, group), B), vq_warps(a.vq, group) * 32,
      vq_smem_bytes(a.vq, group, a.vq.n_smem), s>>>(a);
  return true;
}

}  // namespace kvlab::gpu::attn
