// Decode attention over codebook (VQ / CQ) caches (attn_types.h AttnVq, docs/FORMATS.md 9.5).
// One block per (split, KV head, sequence); each of the kVqWarps warps walks its own tiles of
// kVqTile tokens, the tiles' code rows staged by cp.async one tile ahead; online softmax per
// warp, warps merged in order. decode_vq (every spec): the first n_smem entries of every key and
// value codebook of the head staged in shared memory (`kvlab vq reorder` sorts the entries by
// use, so these are the hot ones: VQ-LLM's placement), the others read from global memory (L2);
// logits with lane = token (K_hat of each channel = the sum of its stages' entries in stage
// order from 0.0f, vq_decode's fp32 sum: core's bytes; then q . K_hat as an fp32 FMA chain), P V
// with lane = 4 channels (V_hat the same sum). decode_cq48 (CQ-4c8b, 4 query heads): a cluster of
// two blocks per KV head, each with half of the groups' q . entry table and value entries in
// shared memory, adding each other's partial logits (below).
#include <cstdint>
#include <stdexcept>
#include <string>
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
// decode_stream does: each warp has written its own at w0 + warp * wbytes ([GQ][C] outputs, then
// m[GQ], l[GQ]); the block reads every warp's. The block's outputs are channels [c0, c0 + C) of
// its GQ query heads hq0 .. of the sequence's Hq; write_ml: this block also writes (max, sum).
template <int GQ, int W, int C>
__device__ __forceinline__ void merge_warp_areas(const AttnArgs& a, const unsigned char* w0, int wbytes,
                                                 int b, int hq0, int Hq, int split, int c0, bool write_ml) {
  __syncthreads();
  for (int i = threadIdx.x; i < GQ * C; i += W * 32) {
    const int g = i / C, c = i % C;
    float M = -__builtin_huge_valf();
    for (int x = 0; x < W; ++x) M = fmaxf(M, reinterpret_cast<const float*>(w0 + x * wbytes)[GQ * C + g]);
    float o = 0.0f, lsum = 0.0f;
    if (M != -__builtin_huge_valf())
      for (int x = 0; x < W; ++x) {
        const float* wm = reinterpret_cast<const float*>(w0 + x * wbytes);
        const float e = exp2f(__fsub_rn(wm[GQ * C + g], M));
        o = __fmaf_rn(e, wm[g * C + c], o);
        lsum = __fmaf_rn(e, wm[GQ * C + GQ + g], lsum);
      }
    const int64_t row = ((int64_t)b * Hq + hq0 + g) * a.splits + split;
    a.part_o[row * kD + c0 + c] = o;
    if (c == 0 && write_ml) {
      a.part_ml[row * 2] = M;
      a.part_ml[row * 2 + 1] = lsum;
    }
  }
}

// A warp's (max, sum) into its area after the outputs ([GQ][C] floats, written by the caller).
template <int GQ, int C>
__device__ __forceinline__ void store_warp_ml(const float (&m)[GQ], const float (&l)[GQ], unsigned char* wmem,
                                              int lane) {
  float* mo = reinterpret_cast<float*>(wmem);
  if (lane == 0)
    for (int g = 0; g < GQ; ++g) {
      mo[GQ * C + g] = m[g];
      mo[GQ * C + GQ + g] = l[g];
    }
}

// decode_vq's merge: lane = channels 4 lane .. 4 lane + 3 of every query head.
template <int GQ, int W>
__device__ __forceinline__ void merge_warps(const AttnArgs& a, const float (&m)[GQ], const float (&l)[GQ],
                                            const float (&acc)[GQ][4], unsigned char* wmem,
                                            const unsigned char* w0, int wbytes, int b, int hq0, int Hq,
                                            int split) {
  const int lane = threadIdx.x % 32;
  float* mo = reinterpret_cast<float*>(wmem);  // [GQ][kD] then m[GQ], l[GQ]
  for (int g = 0; g < GQ; ++g)
    for (int x = 0; x < 4; ++x) mo[g * kD + 4 * lane + x] = acc[g][x];
  store_warp_ml<GQ, kD>(m, l, wmem, lane);
  merge_warp_areas<GQ, W, kD>(a, w0, wbytes, b, hq0, Hq, split, 0, true);
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

// CQ-4c8b (vec 4, 8-bit codes, one stage) with 4 query heads: a cluster of two blocks per (split,
// KV head, sequence); block r holds groups [16 r, 16 r + 16) (channels [64 r, 64 r + 64)), so that
// no table or book entry is read twice (one block of kCqWarps warps per SM):
// - its table T[entry][group] of q . entry for the 4 query heads (float4, 64 KiB, fp32 FMA from
//   the key books) and its groups' value entries V[entry][group] (float4, 64 KiB);
// - warp w of both blocks takes the same tiles. Logits: lane = token, the fp32 sum of the T values
//   of its 16 codes (lane i visits the groups i, i + 1, ... (mod 16), so a quarter warp's 16-byte
//   gathers hit 8 different bank quads), sent to the peer's warp w by st.async, which completes a
//   transaction on the peer's mbarrier; logit = own + peer's partial (fp32 addition commutes: both
//   blocks hold the same logits, the same softmax and the same (max, sum));
// - P V over its groups only: lane = (group pair gp, gp + 8; token t % 4), so one probability load
//   serves two value gathers; the 4 token classes are added at the end.
// Code rows (the block's 16 bytes of each) are 16-byte loads one tile ahead in registers; value
// codes go word-major to shared memory. The debug path writes K_hat (from the key books at the
// codes the table was read at) and V_hat of the block's groups.
constexpr int kCqG = 16, kCqE = 256, kCqWarps = 16, kCqThreads = kCqWarps * 32;
constexpr int kCqVS = 36;                       // words per staged value-code word row (32 tokens, padded)
constexpr int kCqHalfBytes = kCqE * kCqG * 16;  // T, and V
// One warp's area: the tile's value codes (4 word rows), probabilities (4 heads) and two slots of
// the peer's partial logits; reused for the merge (4 x 64 outputs + 4 (max, sum)).
constexpr int kCqCodeBytes = 4 * kCqVS * 4, kCqProbBytes = kVqTile * 16, kCqSlotBytes = kVqTile * 16;
constexpr int kCqWarpBytes = kCqCodeBytes + kCqProbBytes + 2 * kCqSlotBytes;
static_assert(kCqWarpBytes >= (4 * 64 + 8) * 4, "the merge reuses the warp's area");
static_assert(kCqWarpBytes >= kD * 4 * 4 / kCqWarps, "q (4 heads) is staged in the warps' areas");
constexpr int kCqSmem = 2 * kCqHalfBytes + kCqWarps * kCqWarpBytes + kCqWarps * 2 * 8;  // + mbarriers

// The 16 code bytes of a half row, rotated by `by` bytes: byte k of the result is byte (k + by) % 16.
__device__ __forceinline__ void rotate_half_row(uint32_t (&x)[4], int by) {
#pragma unroll
  for (int s = 1; s < 4; s <<= 1) {  // whole words: a barrel shifter, every index static
    uint32_t y[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) y[i] = ((by >> 2) & s) ? x[(i + s) & 3] : x[i];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = y[i];
  }
  uint32_t y[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = __funnelshift_r(x[i], x[(i + 1) & 3], 8 * (by & 3));
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = y[i];
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// The same shared-memory offset in block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_addr(uint32_t a, int rank) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(rank));
  return d;
}
// 16 bytes into the peer's shared memory, completing 16 bytes of a transaction on its mbarrier.
__device__ __forceinline__ void st_async16(uint32_t dst, float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
          dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
// The one arrival of a phase, expecting `bytes` of transactions.
__device__ __forceinline__ void mbar_expect(uint32_t bar, int bytes) {
  asm volatile(
      "{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 "
        "%0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return (int)r;
}

// The largest of the warp's 32 values (no NaN), exactly, in one redux.sync instead of 5 shuffles:
// the float's bits as a signed integer, the magnitude bits flipped for negatives, order as floats.
__device__ __forceinline__ float warp_max(float x) {
  const int i = __float_as_int(x), key = i < 0 ? i ^ 0x7FFFFFFF : i;
  const int k = __reduce_max_sync(0xffffffffu, key);
  return __int_as_float(k < 0 ? k ^ 0x7FFFFFFF : k);
}

// tile_softmax for decode_cq48 (4 heads, 8 channels per lane), with each lane's own running sum
// of its tokens' probabilities (l, rescaled as the outputs are), added across the lanes once at
// the end: 20 shuffles fewer per tile (shuffles are shared-memory wavefronts too).
__device__ __forceinline__ void tile_softmax_lanes(const float (&s)[4], float (&m)[4], float (&l)[4],
                                                   float (&acc)[4][8], float (*sP)[4], int lane) {
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const float mx = warp_max(s[g]);
    const float m_new = fmaxf(m[g], mx);  // finite: the tile has a token
    const float p = exp2f(__fsub_rn(s[g], m_new));
    sP[lane][g] = p;
    const float alpha = exp2f(__fsub_rn(m[g], m_new));
    l[g] = __fmaf_rn(l[g], alpha, p);
    m[g] = m_new;
#pragma unroll
    for (int x = 0; x < 8; ++x) acc[g][x] = __fmul_rn(acc[g][x], alpha);
  }
  __syncwarp();
}

template <bool DBG>
__global__ void __launch_bounds__(kCqThreads, 1) decode_cq48(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) unsigned char sq_raw[sizeof(AttnSeq)];  // no constructor in shared memory
  const AttnSeq& sq = *reinterpret_cast<const AttnSeq*>(sq_raw);
  const int b = blockIdx.z, h = blockIdx.y >> 1, r = cluster_rank(), split = blockIdx.x, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, g0 = kCqG * r;
  float4* T = reinterpret_cast<float4*>(smem);                 // [entry][group]: 4 heads' q . entry
  float4* V = reinterpret_cast<float4*>(smem + kCqHalfBytes);  // [entry][group]: value entries
  unsigned char* w0 = smem + 2 * kCqHalfBytes;
  unsigned char* wmem = w0 + warp * kCqWarpBytes;
  uint32_t* sV = reinterpret_cast<uint32_t*>(wmem);  // [word][kCqVS]: value codes, token t at col(t)
  float(*sP)[4] = reinterpret_cast<float(*)[4]>(wmem + kCqCodeBytes);
  const float4* slot = reinterpret_cast<const float4*>(wmem + kCqCodeBytes + kCqProbBytes);  // [2][32]
  const uint32_t bar = smem_addr(w0 + kCqWarps * kCqWarpBytes) + 16 * warp;                  // 2 mbarriers
  float(*sQ)[4] = reinterpret_cast<float(*)[4]>(w0);  // until the table is built

  if (tid == 0) *reinterpret_cast<AttnSeq*>(sq_raw) = a.seqs[b];
  for (int i = tid; i < kD * 4; i += kCqThreads) {
    const int c = i / 4, g = i % 4;
    sQ[c][g] = a.q[((int64_t)b * a.Hkv * 4 + 4 * h + g) * kD + c] * a.scale_log2;
  }
  if (lane == 0) {
    mbar_init(bar);
    mbar_init(bar + 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const float4* gk = reinterpret_cast<const float4*>(a.vq.k_books) + (int64_t)h * 2 * kCqG * kCqE;
  const float4* gv = reinterpret_cast<const float4*>(a.vq.v_books) + (int64_t)h * 2 * kCqG * kCqE;
  for (int i = tid; i < kCqG * kCqE; i += kCqThreads) {  // i = entry * 16 + group
    const int g = i % kCqG, e = i / kCqG, c = 4 * (g0 + g);
    const float4 k = __ldg(gk + (g0 + g) * kCqE + e);
    float t[4];
    for (int x = 0; x < 4; ++x)
      t[x] = __fmaf_rn(sQ[c + 3][x], k.w,
                       __fmaf_rn(sQ[c + 2][x], k.z, __fmaf_rn(sQ[c + 1][x], k.y, __fmul_rn(sQ[c][x], k.x))));
    T[i] = make_float4(t[0], t[1], t[2], t[3]);
    V[i] = __ldg(gv + (g0 + g) * kCqE + e);
  }
  // Both blocks' tables and mbarriers are ready; sQ's bytes go to the warps (the peer writes into
  // our slots only after this).
  cluster_sync();

  const int L = sq.L;
  const uint8_t* kcodes = sq.k.codes + (int64_t)h * L * 32 + 16 * r;
  const uint8_t* vcodes = sq.v.codes + (int64_t)h * L * 32 + 16 * r;
  float* dbg_k = DBG ? a.dbg_k + sq.dbg + (int64_t)h * L * kD : nullptr;
  float* dbg_v = DBG ? a.dbg_v + sq.dbg + (int64_t)h * L * kD : nullptr;
  const int ntiles = (L + kVqTile - 1) / kVqTile, per = (ntiles + a.splits - 1) / a.splits;
  const int ts = split * per, te = min(ntiles, ts + per);
  // m, acc[head] (channels of group gp (0-3) and gp + 8 (4-7)) per warp; l per lane (its tokens)
  float m[4], l[4], acc[4][8];
  for (int g = 0; g < 4; ++g) {
    m[g] = -__builtin_huge_valf();
    l[g] = 0.0f;
    for (int x = 0; x < 8; ++x) acc[g][x] = 0.0f;
  }
  // goff[k]: byte offset 16 g of group g = (lane + k) % 16 in a T row, bytes 2-3 zero
  uint32_t goff[kCqG];
#pragma unroll
  for (int k = 0; k < kCqG; ++k) goff[k] = (uint32_t)(((lane + k) & (kCqG - 1)) * 16);
  const unsigned char* Tb = reinterpret_cast<const unsigned char*>(T);
  const unsigned char* Vb = reinterpret_cast<const unsigned char*>(V);
  // P V: this lane's groups gp, gp + 8 and token class tc (tokens 4 i + tc, staged at col tc * 8 + i)
  const int gp = lane & 7, tc = lane >> 3;
  const uint32_t* vw0 = sV + (gp >> 2) * kCqVS + tc * 8;        // group gp's code words
  const uint32_t* vw1 = sV + (2 + (gp >> 2)) * kCqVS + tc * 8;  // group gp + 8's
  const uint32_t vsel = 0x6604u | (uint32_t)(gp & 3) << 4;      // byte 0: 16 g, byte 1: the code, 2-3: 0
  const uint32_t vo0 = (uint32_t)gp * 16, vo1 = (uint32_t)(gp + 8) * 16;
  const int col = (lane & 3) * 8 + (lane >> 2);  // where token `lane` stages its value codes
  const uint32_t my_slot = smem_addr(slot), peer = (uint32_t)(r ^ 1);
  const uint32_t peer_slot = peer_addr(my_slot, (int)peer), peer_bar = peer_addr(bar, (int)peer);
  uint4 kn = make_uint4(0, 0, 0, 0), vn = kn;  // the next tile's half rows of this lane's token
  auto fetch = [&](int tile) {
    const int t = tile * kVqTile + lane;
    if (tile < te && t < L) {
      kn = __ldcs(reinterpret_cast<const uint4*>(kcodes + (int64_t)t * 32));
      vn = __ldcs(reinterpret_cast<const uint4*>(vcodes + (int64_t)t * 32));
    }
  };
  int tile = ts + warp;
  fetch(tile);
  for (int it = 0; tile < te; ++it, tile += kCqWarps) {
    uint32_t kr[4] = {kn.x, kn.y, kn.z, kn.w};
    sV[0 * kCqVS + col] = vn.x;
    sV[1 * kCqVS + col] = vn.y;
    sV[2 * kCqVS + col] = vn.z;
    sV[3 * kCqVS + col] = vn.w;
    fetch(tile + kCqWarps);
    const int t0 = tile * kVqTile, n = min(kVqTile, L - t0);

    // ---- partial logits of this block's groups: lane = token, groups from `lane` on
    float4 part = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lane < n) {
      rotate_half_row(kr, lane & (kCqG - 1));
#pragma unroll
      for (int k = 0; k < kCqG; ++k) {
        const uint32_t off = __byte_perm(kr[k >> 2], goff[k], 0x6604u | (uint32_t)(k & 3) << 4);  // T[e][g]
        const float4 t = *reinterpret_cast<const float4*>(Tb + off);
        part.x = __fadd_rn(part.x, t.x);
        part.y = __fadd_rn(part.y, t.y);
        part.z = __fadd_rn(part.z, t.z);
        part.w = __fadd_rn(part.w, t.w);
        if (DBG) {
          const int g = (int)(off & 0xFFu) >> 4;
          const float4 kh = __ldg(gk + (g0 + g) * kCqE + (off >> 8));
          float* o = dbg_k + (int64_t)(t0 + lane) * kD + 4 * (g0 + g);
          o[0] = __fadd_rn(0.0f, kh.x);  // vq_decode's 0 + entry (-0 becomes +0)
          o[1] = __fadd_rn(0.0f, kh.y);
          o[2] = __fadd_rn(0.0f, kh.z);
          o[3] = __fadd_rn(0.0f, kh.w);
        }
      }
    }
    // ---- exchange with the peer's warp: slot it % 2, phase (it / 2) % 2 of its mbarrier
    const int si = it & 1;
    st_async16(peer_slot + si * kCqSlotBytes + lane * 16, part, peer_bar + si * 8);
    if (lane == 0) mbar_expect(bar + si * 8, kCqSlotBytes);
    mbar_wait(bar + si * 8, (it >> 1) & 1);  // every lane: one waiting lane + __syncwarp measured 1.3x slower
    const float4 o = slot[si * kVqTile + lane];
    float s[4] = {__fadd_rn(part.x, o.x), __fadd_rn(part.y, o.y), __fadd_rn(part.z, o.z),
                  __fadd_rn(part.w, o.w)};
    if (lane >= n)
      for (int g = 0; g < 4; ++g) s[g] = -__builtin_huge_valf();
    tile_softmax_lanes(s, m, l, acc, sP, lane);  // ends with __syncwarp: sV and sP are visible

    // ---- P V: tokens 4 i + tc, i = 0..7; 4 tokens' code words per load; full tiles without the test
    auto pv = [&](auto full) {
#pragma unroll
      for (int i4 = 0; i4 < 8; i4 += 4) {
        if (!decltype(full)::value && 4 * i4 + tc >= n) break;
        const uint4 c0 = *reinterpret_cast<const uint4*>(vw0 + i4),
                    c1 = *reinterpret_cast<const uint4*>(vw1 + i4);
        const uint32_t cw0[4] = {c0.x, c0.y, c0.z, c0.w}, cw1[4] = {c1.x, c1.y, c1.z, c1.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int t = 4 * (i4 + j) + tc;
          if (!decltype(full)::value && t >= n) break;
          const float4 p = *reinterpret_cast<const float4*>(sP[t]);
          const float4 x0 = *reinterpret_cast<const float4*>(Vb + __byte_perm(cw0[j], vo0, vsel));
          const float4 x1 = *reinterpret_cast<const float4*>(Vb + __byte_perm(cw1[j], vo1, vsel));
          if (DBG) {
            float* o0 = dbg_v + (int64_t)(t0 + t) * kD + 4 * (g0 + gp);
            float* o1 = o0 + 32;  // group gp + 8
            o0[0] = __fadd_rn(0.0f, x0.x);
            o0[1] = __fadd_rn(0.0f, x0.y);
            o0[2] = __fadd_rn(0.0f, x0.z);
            o0[3] = __fadd_rn(0.0f, x0.w);
            o1[0] = __fadd_rn(0.0f, x1.x);
            o1[1] = __fadd_rn(0.0f, x1.y);
            o1[2] = __fadd_rn(0.0f, x1.z);
            o1[3] = __fadd_rn(0.0f, x1.w);
          }
          const float pr[4] = {p.x, p.y, p.z, p.w};
          const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
          for (int g = 0; g < 4; ++g)
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[g][c] = __fmaf_rn(pr[g], xv[c], acc[g][c]);
        }
      }
    };
    if (n == kVqTile)
      pv(std::true_type{});
    else
      pv(std::false_type{});
    __syncwarp();  // every lane is done with sV and sP before the next tile overwrites them
  }
  // the 32 lanes' probability sums, and the 4 token classes' outputs (the same in every lane of a
  // group pair: fp32 addition commutes)
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    for (int off = 16; off; off >>= 1) l[g] = __fadd_rn(l[g], __shfl_xor_sync(0xffffffffu, l[g], off));
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      acc[g][c] = __fadd_rn(acc[g][c], __shfl_xor_sync(0xffffffffu, acc[g][c], 8));
      acc[g][c] = __fadd_rn(acc[g][c], __shfl_xor_sync(0xffffffffu, acc[g][c], 16));
    }
  }
  float* mo = reinterpret_cast<float*>(wmem);  // [4][64] then m[4], l[4]
  if (tc == 0)
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 4; ++c) {
        mo[g * 64 + 4 * gp + c] = acc[g][c];
        mo[g * 64 + 32 + 4 * gp + c] = acc[g][4 + c];
      }
  store_warp_ml<4, 64>(m, l, wmem, lane);
  merge_warp_areas<4, kCqWarps, 64>(a, w0, kCqWarpBytes, b, 4 * h, a.Hkv * 4, split, 64 * r, r == 0);
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
  const dim3 grid(a.splits, a.Hkv * vq_head_blocks(a.vq, group), B);
  const int threads = vq_warps(a.vq, group) * 32, bytes = vq_smem_bytes(a.vq, group, a.vq.n_smem);
  if (!cq_fast(a.vq, group)) {
    k<<<grid, threads, bytes, s>>>(a);
    return true;
  }
  // decode_cq48: the two blocks of a KV head (consecutive in y) form a cluster
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = dim3(threads);
  lc.dynamicSmemBytes = bytes;
  lc.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 1;
  at[0].val.clusterDim.y = 2;
  at[0].val.clusterDim.z = 1;
  lc.attrs = at;
  lc.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&lc, k, a);
  if (e != cudaSuccess)
    throw std::runtime_error(
        std::string("kvlab-gpu: launch of the codebook cluster kernel (decode_cq48) failed: ") +
        cudaGetErrorString(e));
  return true;
}

}  // namespace kvlab::gpu::attn
