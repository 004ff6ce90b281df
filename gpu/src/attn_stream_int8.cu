// The streaming decode kernel of int8 caches (group=all: one symmetric scale per (KV head,
// channel) over every token, keys and values channel-major; docs/FORMATS.md 9.2, 9.3). Like the
// shared streaming kernel (attn_stream.cuh), each of a block's warps walks its own 32-token
// tiles (the 4 warps in turn, so they read 128-byte lines of every row together), staged by
// cp.async, with its own online softmax; unlike it, a tile never leaves registers between the two
// products (no shared-memory round trip), and two tiles are in flight per warp (tile k + 1's
// logits beside tile k's softmax and P V; three stages, 2 blocks/SM):
//  - logits S = Q K^T with the key operand as the MMA's A: rows gid hold q * scale of head
//    gid & 3 as fp16 hi, rows gid + 8 its lo, so each lane gets the hi and lo sums of one head's
//    logits (8 tokens per tile) and adds them itself;
//  - the softmax of a head runs over the 4 lanes that hold it (2 shuffles for the max; the sum
//    stays per lane until the end), and the accumulators are rescaled only when a max grows;
//  - p (<= 1) is split at the fixed exponent 2^14 into hi + lo and is, as it stands in the
//    lane, the B operand of P V (columns gid: hi of head gid for gid < 4, lo of head gid - 4),
//    whose A operand is the value rows (channels) read in the same token order;
//  - the last, partial tile runs the same way (codes past L zero, their logits -inf), so every
//    token goes through the tensor cores.
#include "attn_kinds.h"
#include "attn_stream.cuh"

namespace kvlab::gpu::attn {

namespace {

constexpr int kTT = 32;                 // tokens per tile (stream_tile_tokens(8))
constexpr int kRow = kTT;               // bytes of one channel row of a tile
constexpr int kStage = 2 * kSD * kRow;  // key rows, then value rows
constexpr int kSync = 4;                // tiles between the block's barriers
constexpr int kStages = 3;  // tile k's values, tile k + 1's keys (logits in flight), tile k + 2 loading
constexpr int kWarpBytes = kStages * kStage;
constexpr int kSmem = kSD * kSG * 4 + kStreamWarps * kWarpBytes;
constexpr int kRun = 1;  // consecutive tiles a warp takes (stream_run_tiles(8)): the block's 4 warps read
                         // one 128-byte line of every row at once
constexpr float kPScale = 16384.0f;  // p * 2^14 <= 2^14: hi and lo fit fp16
static_assert(kTT == stream_tile_tokens(8) && kRun == stream_run_tiles(8), "attn_types.h's int8 tile");
static_assert((kSG * kSD + 2 * kSG) * 4 <= kWarpBytes, "the warp's merge rows fit its stages");

// Channel of the logits' k index 2 tig + e + 8 i of channel block kb: the 4 tig lanes read 4
// consecutive 32-byte rows (distinct banks).
__device__ __forceinline__ int key_channel(int kb, int tig, int r) {
  return 16 * kb + tig + 4 * (r & 1) + 8 * (r >> 1);
}

// fp16 hi (lo == false) or lo of y0, y1 as one register: hi = fp16(y), lo = fp16(y - hi).
__device__ __forceinline__ uint32_t split_pair(float y0, float y1, bool lo) {
  const __half2 hi = __floats2half2_rn(y0, y1);
  const float2 f = __half22float2(hi);
  const __half2 r = lo ? __floats2half2_rn(__fsub_rn(y0, f.x), __fsub_rn(y1, f.y)) : hi;
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The int8 codes in bytes 0 and 2 of x as an fp16 pair of their values, exactly: the bits
// 0x6400 | (code ^ 0x80) are the fp16 1024 + code + 128, and one f16x2 subtraction of 1152 leaves
// the code. k = 0x64806480 in a register makes the mask and the xor one LOP3 (a LOP3 takes one
// immediate; with two, ptxas emits two).
__device__ __forceinline__ uint32_t code_pair(uint32_t x, uint32_t k) {
  uint32_t m, r;
  asm("lop3.b32 %0, %1, 0x00FF00FF, %2, 0x6a;\n" : "=r"(m) : "r"(x), "r"(k));  // (x & 0x00FF00FF) ^ k
  asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(m), "r"(0x64806480u));
  return r;
}
// 0x64806480 where ptxas cannot fold it into an immediate.
__device__ __forceinline__ uint32_t opaque_magic() {
  uint32_t k;
  asm volatile("mov.b32 %0, 0x64806480;\n" : "=r"(k));
  return k;
}

// Byte sel & 7 of (x, y) in byte 0 and byte (sel >> 8) & 7 in byte 2 (bytes 1, 3: don't care).
__device__ __forceinline__ uint32_t prmt(uint32_t x, uint32_t y, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(y), "r"(sel));
  return r;
}

// cp.async of 16 bytes asking L2 for their whole 128-byte line: a tile's row is 32 bytes, and
// without the hint L2 fetched 64 bytes per request whose other half was evicted before the next
// tile (DRAM read 1.59x the cache's bytes; ncu, docs/PERFORMANCE.md).
__device__ __forceinline__ void cp_async16_line(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ float code_value(uint32_t pair, int hi) {
  return __half2float(__ushort_as_half((uint16_t)(pair >> (16 * hi))));
}

template <bool DBG>
struct Int8Warp {
  const AttnSeq& sq;
  float *dbg_k, *dbg_v;  // copied: a reference to the kernel's parameter would put it in local memory
  unsigned char* base;   // stage i at base + i * kStage
  int h, lane, gid, tig, L;
  bool async_ok;           // both roles' rows 16-byte aligned: full tiles by cp.async
  const uint8_t *kg, *vg;  // cp.async: this lane's first 16 bytes of its head's key / value rows
  int kstep, vstep;        // 16 rows of either role (stream_refusal: rows <= 2^24 bytes)
  uint32_t sel0, sel1;     // prmt selectors: bytes 2 (gid & 1) and + 1 of two words (key_pair)
  uint32_t qa[8][4];       // key operand (A) of channel block kb: rows gid hi, gid + 8 lo of head gid & 3
  float kesc;              // 2^-E of the lane's head: logits in log2 units
  float m, l;              // the lane's head: running max, the lane's share of the sum
  float oacc[8][4];        // P V: channels 16 mb + gid (+ 8), columns 2 tig, 2 tig + 1 (tig < 2 hi, else lo)
  uint32_t magic;          // opaque_magic()

  __device__ __forceinline__ Int8Warp(const AttnSeq& s, const AttnArgs& a, unsigned char* w, int head)
      : sq(s), dbg_k(a.dbg_k), dbg_v(a.dbg_v), base(w), h(head) {
    lane = threadIdx.x % 32;
    gid = lane >> 2;
    tig = lane & 3;
    L = s.L;
    auto al = [](const void* p, int64_t row) {
      return ((reinterpret_cast<uintptr_t>(p) | (uintptr_t)row) & 15) == 0;
    };
    async_ok = al(s.k.codes, s.k.f.row_bytes) && al(s.v.codes, s.v.f.row_bytes);
    const int64_t kr = s.k.f.row_bytes, vr = s.v.f.row_bytes;
    kg = s.k.codes + ((int64_t)h * kSD + (lane >> 1)) * kr + (lane & 1) * 16;
    vg = s.v.codes + ((int64_t)h * kSD + (lane >> 1)) * vr + (lane & 1) * 16;
    kstep = (int)(16 * kr);
    vstep = (int)(16 * vr);
    const uint32_t b = 2 * (gid & 1);
    sel0 = b | ((b + 4) << 8);
    sel1 = sel0 + 0x101u;
    m = -__builtin_huge_valf();
    l = 0.0f;
    magic = opaque_magic();
    for (int x = 0; x < 8; ++x)
      for (int i = 0; i < 4; ++i) oacc[x][i] = 0.0f;
  }

  __device__ __forceinline__ unsigned char* stage(int i) const { return base + i * kStage; }
  __device__ __forceinline__ float kscale(int c) const {
    return sparam(sq.k.scale, ((int64_t)h * kSD + c) * sq.k.f.groups, sq.k.f.half_params);
  }
  __device__ __forceinline__ float vscale(int c) const {
    return sparam(sq.v.scale, ((int64_t)h * kSD + c) * sq.v.f.groups, sq.v.f.half_params);
  }
  __device__ __forceinline__ float* dbg_at(float* p, int t, int c) const {
    return p + sq.dbg + ((int64_t)h * L + t) * kSD + c;
  }

  // Tile `tile`'s key and value rows into stage s: cp.async when whole and aligned, else byte
  // loads with the tokens past L as code 0.
  __device__ __forceinline__ void issue(int tile, unsigned char* s) const {
    const int r0 = tile * kTT, n = min(kTT, L - r0);
    const int64_t kr = sq.k.f.row_bytes, vr = sq.v.f.row_bytes;
    const uint8_t* kb = sq.k.codes + (int64_t)h * kSD * kr + r0;
    const uint8_t* vb = sq.v.codes + (int64_t)h * kSD * vr + r0;
    if (async_ok && n == kTT) {  // the lane's rows lane / 2 + 16 i, half lane % 2
      const int o = (lane >> 1) * kRow + (lane & 1) * 16;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        cp_async16_line(s + o + 16 * i * kRow, kg + r0 + i * kstep);
        cp_async16_line(s + kSD * kRow + o + 16 * i * kRow, vg + r0 + i * vstep);
      }
      return;
    }
    for (int i = lane; i < kSD * kTT; i += 32) {
      const int c = i / kTT, t = i % kTT;
      s[i] = t < n ? __ldg(kb + c * kr + t) : 0;
      s[kSD * kRow + i] = t < n ? __ldg(vb + c * vr + t) : 0;
    }
  }

  // The key operand: q * scale of the lane's head, scaled by 2^E (max over the head's channels
  // in [2^14, 2^15)) and split into hi (rows gid) and lo (rows gid + 8).
  __device__ __forceinline__ void key_operand(const float (*sQ)[kSG]) {
    const int g = gid & 3;
    auto qs = [&](int kb, int r) {
      const int c = key_channel(kb, tig, r);
      return __fmul_rn(sQ[c][g], kscale(c));
    };
    float mx = 0.0f;
#pragma unroll
    for (int kb = 0; kb < 8; ++kb)
#pragma unroll
      for (int r = 0; r < 4; ++r) mx = fmaxf(mx, fabsf(qs(kb, r)));
    for (int off = 1; off < 4; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const int E = split_exponent(mx, 0);
#pragma unroll
    for (int kb = 0; kb < 8; ++kb)
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // k indices 2 tig + 8 i, + 1
        const float a = qs(kb, 2 * i), b = qs(kb, 2 * i + 1);
        qa[kb][2 * i] = pack2(split_half(a, E, false), split_half(b, E, false));
        qa[kb][2 * i + 1] = pack2(split_half(a, E, true), split_half(b, E, true));
      }
    kesc = mul_pow2(1.0f, -E);
  }

  // A staged tile (tokens t0 .. t0 + 31, n of them valid). Token of logit block x, column
  // n: tok(x, n) = 8 (n >> 1) + 2 (n & 1) + (x & 1) + 4 (x >> 1) (lane gid reads 8-byte chunk
  // gid >> 1 of its key rows). P V k block j takes blocks 2j (k indices 2 tig, + 1) and 2j + 1
  // (2 tig + 8, + 9), i.e. tokens 8 tig + 4j + {0, 2} and + {1, 3}: bytes 0, 2 and 1, 3 of word
  // j of the lane's 8 bytes of each value row, so a value pair needs no prmt.
  // Logits of the staged tile at s into lc (n = 0: no tile, nothing written by the debug path).
  __device__ __forceinline__ void logits(const unsigned char* s, int t0, int n, float (&lc)[4][4]) const {
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int i = 0; i < 4; ++i) lc[x][i] = 0.0f;
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      uint2 w[4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
        w[r] = *reinterpret_cast<const uint2*>(s + key_channel(kb, tig, r) * kRow + 8 * (gid >> 1));
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const uint32_t sel = x & 1 ? sel1 : sel0;
        const uint32_t b0 = code_pair(prmt(x < 2 ? w[0].x : w[0].y, x < 2 ? w[1].x : w[1].y, sel), magic),
                       b1 = code_pair(prmt(x < 2 ? w[2].x : w[2].y, x < 2 ? w[3].x : w[3].y, sel), magic);
        const int t = 8 * (gid >> 1) + 2 * (gid & 1) + (x & 1) + 4 * (x >> 1);
        if (DBG && t < n)
          for (int r = 0; r < 4; ++r) {
            const int c = key_channel(kb, tig, r);
            *dbg_at(dbg_k, t0 + t, c) = __fmul_rn(code_value(r < 2 ? b0 : b1, r & 1), kscale(c));
          }
        mma16816(lc[x], qa[kb][0], qa[kb][1], qa[kb][2], qa[kb][3], b0, b1);
      }
    }
  }

  // Softmax and P V of the staged tile at s whose logits are lc.
  __device__ __forceinline__ void consume(const float (&lc)[4][4], int t0, int n, const unsigned char* s) {
    // the lane's logits (raw units): sc[x][e] of token tok(x, 2 tig + e), hi row + lo row
    float sc[4][2], mx = -__builtin_huge_valf();
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[x][e] = __fadd_rn(lc[x][e], lc[x][2 + e]);
        if (n < kTT && 8 * tig + 2 * e + (x & 1) + 4 * (x >> 1) >= n) sc[x][e] = -__builtin_huge_valf();
        mx = fmaxf(mx, sc[x][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, __fmul_rn(mx, kesc));  // kesc a power of two: exact
    if (__any_sync(0xffffffffu, m_new > m)) {  // rescale: the lane's columns are heads 2 (tig & 1), + 1
      const float alpha = exp2f(__fsub_rn(m, m_new));  // 1 where the max stayed, 0 on the first tile
      l = __fmul_rn(l, alpha);
      const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * (tig & 1));
      const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * (tig & 1) + 4);
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        oacc[x][0] = __fmul_rn(oacc[x][0], a0);
        oacc[x][1] = __fmul_rn(oacc[x][1], a1);
        oacc[x][2] = __fmul_rn(oacc[x][2], a0);
        oacc[x][3] = __fmul_rn(oacc[x][3], a1);
      }
      m = m_new;
    }
    float sum = 0.0f, y[4][2];
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = exp2f(__fmaf_rn(sc[x][e], kesc, -m));  // == (s kesc) - m, one rounding
        sum = __fadd_rn(sum, p);
        y[x][e] = __fmul_rn(p, kPScale);
      }
    l = __fadd_rn(l, sum);
    const bool lo = gid >= 4;
    uint32_t pb[2][2];  // B operand of k block j
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      pb[j][0] = split_pair(y[2 * j][0], y[2 * j][1], lo);
      pb[j][1] = split_pair(y[2 * j + 1][0], y[2 * j + 1][1], lo);
    }
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) {
      const unsigned char* sv = s + kSD * kRow + (16 * mb + gid) * kRow + 8 * tig;
      const uint2 v0 = *reinterpret_cast<const uint2*>(sv),
                  v1 = *reinterpret_cast<const uint2*>(sv + 8 * kRow);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t w0 = j ? v0.y : v0.x, w1 = j ? v1.y : v1.x;
        const uint32_t a[4] = {code_pair(w0, magic), code_pair(w1, magic), code_pair(w0 >> 8, magic),
                               code_pair(w1 >> 8, magic)};
        if (DBG)
          for (int r = 0; r < 4; ++r)
            for (int hi = 0; hi < 2; ++hi) {
              const int c = 16 * mb + gid + 8 * (r & 1), t = 8 * tig + 4 * j + 2 * hi + (r >> 1);
              if (t < n) *dbg_at(dbg_v, t0 + t, c) = __fmul_rn(code_value(a[r], hi), vscale(c));
            }
        mma16816(oacc[mb], a[0], a[1], a[2], a[3], pb[j][0], pb[j][1]);
      }
    }
    __syncwarp();
  }

  // The warp's partial into mo ([kSG][kSD], then m[kSG], l[kSG]): hi + lo, back from 2^14, times
  // the channel's value scale.
  __device__ __forceinline__ void finish(float* mo) {
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
#pragma unroll
    for (int x = 0; x < 8; ++x)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = __fadd_rn(oacc[x][i], __shfl_xor_sync(0xffffffffu, oacc[x][i], 2));
        const int c = 16 * x + gid + 8 * (i >> 1);
        if (tig < 2) mo[(2 * tig + (i & 1)) * kSD + c] = __fmul_rn(mul_pow2(v, -14), vscale(c));
      }
    if (tig == 0 && gid < 4) {
      mo[kSG * kSD + gid] = m;
      mo[kSG * kSD + kSG + gid] = l;
    }
  }
};

template <bool DBG>
__global__ void __launch_bounds__(kStreamWarps * 32, 2) decode_stream_int8(AttnArgs a) {
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
  unsigned char* wmem = smem + kSD * kSG * 4 + warp * kWarpBytes;
  Int8Warp<DBG> w(sq, a, wmem, h);

  // every token in tiles (the last one partial); runs of kRun tiles, the block's warps in turn
  const int ntiles = (sq.L + kTT - 1) / kTT, per = (ntiles + a.splits - 1) / a.splits;
  const int ts = split * per, te = min(ntiles, ts + per);
  auto tile_of = [&](int k) { return ts + (k / kRun) * (kRun * kStreamWarps) + warp * kRun + k % kRun; };
  // two tiles in flight: tile k + 1's logits are issued beside tile k's softmax and P V. Every
  // warp runs the block's trip count (its last tile may lie past te) so that a barrier every
  // kSync tiles keeps the 4 warps on the same 128-byte lines over long ranges.
  auto count = [&](int t) { return t < te ? min(kTT, sq.L - t * kTT) : 0; };
  const int trips = te > ts ? (te - ts + kStreamWarps - 1) / kStreamWarps : 0;
  int tile = tile_of(0);
  for (int i = 0; i < 2; ++i) {
    if (tile_of(i) < te) w.issue(tile_of(i), w.stage(i));
    cp_async_commit();
  }
  float lc[4][4];
  if (tile < te) {
    w.key_operand(sQ);
    cp_async_wait<1>();
    __syncwarp();
    w.logits(w.stage(0), tile * kTT, count(tile), lc);
  }
  for (int k = 0; k < trips; ++k) {
    if (k % kSync == kSync - 1) __syncthreads();
    const int next = tile_of(k + 1);
    if (tile_of(k + 2) < te) w.issue(tile_of(k + 2), w.stage((k + 2) % kStages));
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    float ln[4][4];  // past the last tile: a stale stage's logits, never used
    w.logits(w.stage((k + 1) % kStages), next * kTT, count(next), ln);
    if (tile < te) w.consume(lc, tile * kTT, count(tile), w.stage(k % kStages));
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int i = 0; i < 4; ++i) lc[x][i] = ln[x][i];
    tile = next;
  }
  cp_async_wait<0>();
  __syncwarp();
  float* mo = reinterpret_cast<float*>(wmem);
  w.finish(mo);
  __syncthreads();
  merge_warp_partials(smem + kSD * kSG * 4, kWarpBytes, a, b, h, split);
}

template <bool DBG>
void* int8_kernel() {
  static bool ready = false;  // raise the dynamic shared memory limit once per kernel
  if (!ready) {
    cudaFuncSetAttribute(decode_stream_int8<DBG>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    ready = true;
  }
  return reinterpret_cast<void*>(decode_stream_int8<DBG>);
}

}  // namespace

void launch_stream_int8(const AttnArgs& a, int B, cudaStream_t s) {
  const dim3 grid(a.splits, a.Hkv, B);
  int8_kernel<false>();
  int8_kernel<true>();
  if (a.dbg_k)
    decode_stream_int8<true><<<grid, kStreamWarps * 32, kSmem, s>>>(a);
  else
    decode_stream_int8<false><<<grid, kStreamWarps * 32, kSmem, s>>>(a);
}

int stream_int8_blocks_per_sm() {
  int n = 0;
  int8_kernel<false>();
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_stream_int8<false>, kStreamWarps * 32, kSmem);
  return n;
}

}  // namespace kvlab::gpu::attn
