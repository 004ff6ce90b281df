// Plain per-channel format (axis=channel): a group is G tokens of one channel.
//   codes (N, D, packed_bytes(T, bits)), scale/zero (N, D, ceil(T / G))
// Kernel paths, first that fits (the label each returns in brackets):
//   quantize:   channel_quant_regs [regs]; channel_quant_cluster [cluster] (quant_channel_cluster.cu),
//               else channel_stats_regs + channel_quant_regs [regs-2pass]
//               (G / 16 not a power of two up to 32, e.g. whole-axis groups); channel_quant_tile [tile];
//               channel_stats + channel_quant_tile [tile-2pass]; channel_stats + channel_codes [two-pass]
//   dequantize: channel_dequant_regs [regs]; channel_dequant_vec [vec]; channel_dequant [tile]
// The register-tile kernels need 2/4/8 bits, T and G multiples of 16 and aligned input;
// KernelConfig::fast_kernels = false skips them, so the others run (and validate) on every shape.
#include "fastq.cuh"

namespace kvlab::gpu {
namespace {

// Tile kernel. The tile (TL tokens x D channels) is copied raw (fp16 stays 2 bytes) into
// shared memory with 16-byte loads and converted when read (hardware cvt). Statistics in two
// token halves, merged earlier-first; PRE: params come from channel_stats (two-pass,
// whole-axis or large groups, tiles of 128 tokens inside one group). Codes: BITS in {1,2,4,8}
// packs 32/BITS codes of one channel into a register word, stored as a whole word in the
// stage (no read-modify-write); BITS == 0 keeps the put_code path for other widths.
template <class In, bool PRE, int BITS>
__global__ void __launch_bounds__(256)
    channel_quant_tile(const In* __restrict__ x, DevFormat f, DevQuant q, int TL) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, bits = BITS ? BITS : f.bits;
  const int64_t tiles = (f.T + TL - 1) / TL;
  const int64_t n = blockIdx.x / tiles, ti = blockIdx.x % tiles, t0 = ti * TL;
  const int64_t g = PRE ? t0 / f.G : ti;
  const int len = (int)min((int64_t)TL, f.T - t0);
  const int nb = (int)packed_bytes(len, bits);
  const int sp = stage_pitch(packed_bytes(TL, bits));
  In* tile = reinterpret_cast<In*>(smem);  // len x D, raw
  GroupParams* par = reinterpret_cast<GroupParams*>(smem + (((int64_t)TL * D * sizeof(In) + 15) / 16) * 16);
  uint8_t* stage = reinterpret_cast<uint8_t*>(par + D);  // D rows of sp bytes

  load_raw(tile, x + (n * f.T + t0) * D, len * D);
  if (PRE) {
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      const int64_t pi = (n * D + c) * f.groups + g;
      par[c] = GroupParams{load_param(q.scale, pi, f.half_params),
                           f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
    }
  }
  __syncthreads();
  if (!PRE) {
    const int halves = (int)blockDim.x >= 2 * D ? 2 : 1;
    float* part = reinterpret_cast<float*>(stage);  // 2 x D (mn, mx) of the later half; stage is free now
    const int hl = (len + halves - 1) / halves;
    for (int i = threadIdx.x; i < halves * D; i += blockDim.x) {
      const int h = i / D, c = i - h * D;
      int32_t kmn = ord_key(INFINITY), kmx = ord_key(-INFINITY);
      const int te = min(len, h * hl + hl);
#pragma unroll 8
      for (int t = h * hl; t < te; ++t) {
        const int32_t k = ord_key(to_f(tile[t * D + c]));
        kmn = min(kmn, k);
        kmx = max(kmx, k);
      }
      const float mn = key_float(kmn), mx = key_float(kmx);
      if (h == 1) {
        part[c] = mn;
        part[D + c] = mx;
      } else
        par[c] = GroupParams{mn, mx};
    }
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float mn = par[c].scale, mx = par[c].zero;
      if (halves == 2) {
        mn = f_min(mn, part[c]);
        mx = f_max(mx, part[D + c]);
      }
      const GroupParams p = params_of(mn, mx, bits, f.sym, f.half_params);
      par[c] = p;
      write_params(q, (n * D + c) * f.groups + g, p, f.sym, f.half_params);
    }
    __syncthreads();
  }
  if (BITS) {
    constexpr int PER = BITS ? 32 / BITS : 1;
    const int nw = (len + PER - 1) / PER, spw = sp / 4;
    uint32_t* st = reinterpret_cast<uint32_t*>(stage);
    for (int i = threadIdx.x; i < nw * D; i += blockDim.x) {
      const int w = i / D, c = i - w * D;
      const GroupParams p = par[c];
      const In* col = tile + c;
      uint32_t word = 0;
      if ((w + 1) * PER <= len) {
#pragma unroll
        for (int j = 0; j < PER; ++j)
          word = pack_code_into(word, j, BITS, code_of(to_f(col[(w * PER + j) * D]), p, BITS, f.sym));
      } else {
        for (int j = 0; w * PER + j < len; ++j)
          word = pack_code_into(word, j, BITS, code_of(to_f(col[(w * PER + j) * D]), p, BITS, f.sym));
      }
      st[c * spw + w] = word;
    }
  } else {
    const int segs = (len + 7) / 8;
    for (int i = threadIdx.x; i < segs * D; i += blockDim.x) {
      const int s = i / D, c = i - s * D;
      uint8_t* row = stage + c * sp;
      for (int b = s * bits; b < min(s * bits + bits, nb); ++b) row[b] = 0;
      const GroupParams p = par[c];
      for (int j = 0; j < 8; ++j) {
        const int t = 8 * s + j;
        if (t < len) put_code(row, t, bits, code_of(to_f(tile[t * D + c]), p, bits, f.sym));
      }
    }
  }
  __syncthreads();
  copy_rows(q.codes + n * D * f.row_bytes + t0 * bits / 8, f.row_bytes, stage, sp, D, nb);
}

// Two-pass path, pass 1: min/max of each (slice, group, channel). Block: 32 channels x 8
// contiguous token segments, merged in token order (the earlier partial wins ties).
template <class In>
__global__ void __launch_bounds__(256) channel_stats(const In* __restrict__ x, DevFormat f, DevQuant q) {
  __shared__ float pmn[8][32], pmx[8][32];
  const int64_t n = blockIdx.x / f.groups, g = blockIdx.x % f.groups, t0 = g * f.G;
  const int len = (int)min((int64_t)f.G, f.T - t0);
  const int lane = threadIdx.x % 32, seg = threadIdx.x / 32;
  const int64_t c = (int64_t)blockIdx.y * 32 + lane;
  const int per = (len + 7) / 8, a = seg * per, b = min(len, a + per);
  float mn = INFINITY, mx = -INFINITY;
  if (c < f.D) {
    int32_t kmn = ord_key(mn), kmx = ord_key(mx);
    const In* col = x + (n * f.T + t0) * f.D + c;
#pragma unroll 8
    for (int t = a; t < b; ++t) {
      const int32_t k = ord_key(load_in(col, (int64_t)t * f.D));
      kmn = min(kmn, k);
      kmx = max(kmx, k);
    }
    mn = key_float(kmn);
    mx = key_float(kmx);
  }
  pmn[seg][lane] = mn;
  pmx[seg][lane] = mx;
  __syncthreads();
  if (seg == 0 && c < f.D) {
    for (int s = 1; s < 8; ++s) {
      mn = f_min(mn, pmn[s][lane]);
      mx = f_max(mx, pmx[s][lane]);
    }
    write_params(q, (n * f.D + c) * f.groups + g, params_of(mn, mx, f.bits, f.sym, f.half_params), f.sym,
                 f.half_params);
  }
}

// Two-pass path, pass 2: one thread per run of 8 tokens (= `bits` whole bytes) of one channel.
template <class In>
__global__ void channel_codes(const In* __restrict__ x, DevFormat f, DevQuant q) {
  const int64_t segs = (f.T + 7) / 8, total = f.N * segs * f.D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = i % f.D, s = (i / f.D) % segs, n = i / (f.D * segs);
    uint8_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < 8; ++j) {
      const int64_t t = 8 * s + j;
      if (t >= f.T) break;
      const int64_t pi = (n * f.D + c) * f.groups + t / f.G;
      const GroupParams p{load_param(q.scale, pi, f.half_params),
                          f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      put_code(buf, j, f.bits, code_of(load_in(x, (n * f.T + t) * f.D + c), p, f.bits, f.sym));
    }
    uint8_t* row = q.codes + (n * f.D + c) * f.row_bytes;
    for (int b = 0; b < f.bits && s * f.bits + b < f.row_bytes; ++b) row[s * f.bits + b] = buf[b];
  }
}

// Dequantize: one block per (slice, 128-token tile); code bytes staged in shared memory.
__global__ void __launch_bounds__(256)
    channel_dequant(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int TT = 128;
  const int D = (int)f.D, bits = f.bits;
  const int64_t tiles = (f.T + TT - 1) / TT;
  const int64_t n = blockIdx.x / tiles, t0 = (blockIdx.x % tiles) * TT;
  const int len = (int)min((int64_t)TT, f.T - t0);
  const int nb = (int)packed_bytes(len, bits), sp = stage_pitch(packed_bytes(TT, bits));
  copy_rows(smem, sp, q.codes + n * D * f.row_bytes + t0 * bits / 8, f.row_bytes, D, nb);
  __syncthreads();
  if (blockDim.x % D == 0) {
    // Fixed channel per thread: params reloaded only when the token crosses a group boundary,
    // no per-element division.
    const int c = threadIdx.x % D, step = blockDim.x / D;
    const uint8_t* crow = smem + c * sp;
    const int64_t pbase = (n * D + c) * f.groups, obase = (n * f.T + t0) * D + c;
    int gend = -1;
    GroupParams p{0.0f, 0.0f};
    for (int t = threadIdx.x / D; t < len; t += step) {
      const int tt = (int)t0 + t;
      if (tt >= gend) {
        const int g = tt / f.G;
        gend = (g + 1) * f.G;
        p = GroupParams{load_param(q.scale, pbase + g, f.half_params),
                        f.sym ? 0.0f : load_param(q.zero, pbase + g, f.half_params)};
      }
      const uint32_t code = get_code(crow, t, bits);
      store_out(out, obase + (int64_t)t * D, dequant_of(code, p, bits, f.sym), code, o);
    }
    return;
  }
  for (int i = threadIdx.x; i < len * D; i += blockDim.x) {
    const int t = i / D, c = i - t * D;
    const uint32_t code = get_code(smem + c * sp, t, bits);
    const int64_t pi = (n * D + c) * f.groups + (t0 + t) / f.G;
    const GroupParams p{load_param(q.scale, pi, f.half_params),
                        f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
    store_out(out, (n * f.T + t0 + t) * D + c, dequant_of(code, p, bits, f.sym), code, o);
  }
}

// Vector dequantize (BITS in {1,2,4,8}, D % 4 == 0, words inside one group): code bytes staged
// as in channel_dequant; a thread takes one 32-bit word (32/BITS tokens) of 4 adjacent channels and writes
// 4 channels per token with one vector store (a warp writes 128 contiguous channels).
template <int BITS>
__global__ void __launch_bounds__(256)
    channel_dequant_vec(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int TT = 128, PER = 32 / BITS;
  const int D = (int)f.D, D4 = D / 4;
  const int64_t tiles = (f.T + TT - 1) / TT;
  const int64_t n = blockIdx.x / tiles, t0 = (blockIdx.x % tiles) * TT;
  const int len = (int)min((int64_t)TT, f.T - t0);
  const int nb = (int)packed_bytes(len, BITS), sp = stage_pitch(packed_bytes(TT, BITS)), spw = sp / 4;
  copy_rows(smem, sp, q.codes + n * D * f.row_bytes + t0 * BITS / 8, f.row_bytes, D, nb);
  __syncthreads();
  const uint32_t* st = reinterpret_cast<const uint32_t*>(smem);
  const int nw = (len + PER - 1) / PER;
  int64_t pg = -1;
  int pc = -1;
  GroupParams p[4];
  for (int i = threadIdx.x; i < nw * D4; i += blockDim.x) {
    const int w = i / D4, c4 = (i - w * D4) * 4;
    const int64_t g = (t0 + (int64_t)w * PER) / f.G;
    uint32_t word[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) word[k] = st[(c4 + k) * spw + w];
    if (g != pg || c4 != pc) {  // params cached across this thread's words of one group
      pg = g;
      pc = c4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t pi = (n * D + c4 + k) * f.groups + g;
        p[k] = GroupParams{load_param(q.scale, pi, f.half_params),
                           f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      }
    }
    const int jn = min(PER, len - w * PER);
    int64_t e = (n * f.T + t0 + (int64_t)w * PER) * D + c4;
#pragma unroll 4
    for (int j = 0; j < jn; ++j, e += D) {
      uint32_t c[4];
      float y[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        c[k] = word_code(word[k], j, BITS);
        y[k] = dequant_of(c[k], p[k], BITS, f.sym);
      }
      store_out4(out, e, y, c, o);
    }
  }
}

// ---- Register-tile quantize. A unit is V channels (one 16-byte load per token: 8 fp16
// or 4 fp32) x 16 tokens of one (slice, group); unit u: token chunk tc = u % TC fastest
// (TC = G/16), then channel chunk, then (slice, group). Each lane loads its 16 rows (16 loads
// in flight, 64 bytes contiguous per 4 lanes), reduces min/max over its tokens, then over the
// TC lanes of its group by xor shuffles (TC <= 32, a power of two). The params of the unit's
// V channels are computed once per channel by the TC lanes in turn (params_of, RN(1/s)) and
// exchanged through shared memory. Each lane then packs its 16 tokens of each channel into
// BITS/2 words (fastq.cuh) and stores them straight into the channel rows (8 lanes write 32
// contiguous bytes of a row). PRE: params read back from channel_stats_regs (whole-axis or long
// groups, any TC); no reduction. Needs T % 16 == 0 (whole words per lane, aligned stores).
// One unit's coordinates (see channel_quant_regs).
struct ChUnit {
  int64_t n, g, t0;
  int c0, tc;
  bool uvalid, live;
};
template <bool PRE>
__device__ __forceinline__ ChUnit ch_unit(uint32_t u0, const DevFormat& f, int V, int TC) {
  const int CC = (int)f.D / V;
  const uint32_t units = (uint32_t)(f.N * f.groups) * (uint32_t)(CC * TC);
  ChUnit c;
  c.uvalid = u0 < units;
  const uint32_t u = c.uvalid ? u0 : 0u;
  // PRE: channel chunk fastest (a warp reads whole token rows); else token chunk fastest.
  c.tc = PRE ? (int)((u / CC) % TC) : (int)(u & (TC - 1));
  const int cc = PRE ? (int)(u % CC) : (int)((u / TC) % CC);
  const uint32_t ng = u / (uint32_t)(CC * TC);
  c.n = ng / (uint32_t)f.groups;
  c.g = ng % (uint32_t)f.groups;
  c.t0 = c.g * f.G + (int64_t)c.tc * 16;
  c.live = c.uvalid && c.t0 < min(f.T, c.g * f.G + f.G);
  c.c0 = cc * V;
  return c;
}
template <class In>
__device__ __forceinline__ void ch_load(const In* __restrict__ x, const DevFormat& f, const ChUnit& c,
                                        uint4 (&raw)[16]) {
  const In* base = x + (c.n * f.T + c.t0) * f.D + c.c0;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    raw[i] =
        c.live ? __ldcs(reinterpret_cast<const uint4*>(base + (int64_t)i * f.D)) : make_uint4(0u, 0u, 0u, 0u);
}

// Statistics, params and codes of one unit whose 16 rows are in raw (all lanes of the warp
// call this together: xor shuffles over the TC lanes of a unit chunk; sqp = this warp's slots).
template <class In, bool SYM, int BITS, bool PRE>
__device__ __forceinline__ void ch_process(const uint4 (&raw)[16], const ChUnit& cu, const DevFormat& f,
                                           const DevQuant& q, int TC, int mm, int allow_fast, float4* sqp) {
  constexpr int V = 16 / (int)sizeof(In), NW = BITS / 2;
  const int lane = threadIdx.x & 31, D = (int)f.D;
  const int TCw = TC < 32 ? TC : 32, tl = lane & (TCw - 1), cl = lane / TCw;
  const int64_t n = cu.n, g = cu.g, t0 = cu.t0;
  const int c0 = cu.c0;
  const bool uvalid = cu.uvalid, live = cu.live;
  float mn[V], mx[V];
  if (!PRE) {
    if (sizeof(In) == 2 && mm) {  // fp16: HMNMX2 on the raw pairs, converted once at the end
      __half2 hmn[4], hmx[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t w0 = k == 0 ? raw[0].x : k == 1 ? raw[0].y : k == 2 ? raw[0].z : raw[0].w;
        hmn[k] = hmx[k] = *reinterpret_cast<const __half2*>(&w0);
      }
#pragma unroll
      for (int i = 1; i < 16; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t wi = k == 0 ? raw[i].x : k == 1 ? raw[i].y : k == 2 ? raw[i].z : raw[i].w;
          const __half2 h = *reinterpret_cast<const __half2*>(&wi);
          hmn[k] = __hmin2(hmn[k], h);
          hmx[k] = __hmax2(hmx[k], h);
        }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint32_t a = *reinterpret_cast<uint32_t*>(&hmn[k]), b = *reinterpret_cast<uint32_t*>(&hmx[k]);
        if (!live) {  // +inf / -inf pairs
          a = 0x7C007C00u;
          b = 0xFC00FC00u;
        }
        for (int o = 1; o < TCw; o <<= 1) {
          const uint32_t a2 = __shfl_xor_sync(0xffffffffu, a, o), b2 = __shfl_xor_sync(0xffffffffu, b, o);
          const __half2 m =
              __hmin2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&a2));
          const __half2 M =
              __hmax2(*reinterpret_cast<const __half2*>(&b), *reinterpret_cast<const __half2*>(&b2));
          a = *reinterpret_cast<const uint32_t*>(&m);
          b = *reinterpret_cast<const uint32_t*>(&M);
        }
        mn[2 * k] = half_to_float((uint16_t)(a & 0xffffu));
        mn[2 * k + 1] = half_to_float((uint16_t)(a >> 16));
        mx[2 * k] = half_to_float((uint16_t)(b & 0xffffu));
        mx[2 * k + 1] = half_to_float((uint16_t)(b >> 16));
      }
    } else {
      int32_t kmn[V], kmx[V];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = row_value<In>(raw[i], j);
          if (mm) {
            if (i == 0)
              mn[j] = mx[j] = v;
            else {
              mn[j] = fminf(mn[j], v);
              mx[j] = fmaxf(mx[j], v);
            }
          } else {
            const int32_t k = ord_key(v);
            if (i == 0)
              kmn[j] = kmx[j] = k;
            else {
              kmn[j] = min(kmn[j], k);
              kmx[j] = max(kmx[j], k);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (mm) {
          if (!live) {
            mn[j] = INFINITY;
            mx[j] = -INFINITY;
          }
          for (int o = 1; o < TCw; o <<= 1) {
            mn[j] = fminf(mn[j], __shfl_xor_sync(0xffffffffu, mn[j], o));
            mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], o));
          }
        } else {
          if (!live) {
            kmn[j] = ord_key(INFINITY);
            kmx[j] = ord_key(-INFINITY);
          }
          for (int o = 1; o < TCw; o <<= 1) {
            kmn[j] = min(kmn[j], __shfl_xor_sync(0xffffffffu, kmn[j], o));
            kmx[j] = max(kmx[j], __shfl_xor_sync(0xffffffffu, kmx[j], o));
          }
          mn[j] = key_float(kmn[j]);
          mx[j] = key_float(kmx[j]);
        }
      }
    }
  }
  // Params of channel j by lane tl = j mod TCw of the unit's lanes, exchanged through shared
  // memory (the TC lanes of a unit chunk are consecutive and aligned). PRE (lanes of a warp on
  // different channel chunks) computes each channel's constants in every lane instead.
  const bool xchg = !PRE;
  for (int jj = 0; xchg && jj < V; jj += TCw) {
    const int j = jj + tl;
    if (j < V) {
      GroupParams p;
      const int64_t pi = (n * D + c0 + j) * f.groups + g;
      if (PRE) {
        p = GroupParams{load_param(q.scale, pi, f.half_params),
                        SYM ? 0.0f : load_param(q.zero, pi, f.half_params)};
      } else {
        float m = 0.0f, M = 0.0f;
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (k == j) {
            m = mn[k];
            M = mx[k];
          }
        p = params_of(m, M, BITS, SYM ? 1 : 0, f.half_params);
        if (uvalid) write_params(q, pi, p, SYM ? 1 : 0, f.half_params);
      }
      const QP qp = make_qp(p, allow_fast);
      sqp[cl * V + j] = make_float4(qp.zero, qp.scale, qp.rcp, qp.fast);
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < V; ++j) {
    QP qp;
    if (xchg) {
      const float4 pv = sqp[cl * V + j];
      qp = QP{pv.x, pv.y, pv.z, pv.w};
    } else {
      const int64_t pi = (n * D + c0 + j) * f.groups + g;
      qp = make_qp(GroupParams{load_param(q.scale, pi, f.half_params),
                               SYM ? 0.0f : load_param(q.zero, pi, f.half_params)},
                   allow_fast);
    }
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = row_value<In>(raw[i], j);
    }
    uint32_t w[NW];
    pack_run<SYM, BITS, 16>(v, qp, GroupParams{qp.scale, SYM ? 0.0f : qp.zero}, w);
    if (live) {
      uint8_t* dst = q.codes + (n * D + c0 + j) * f.row_bytes + t0 * BITS / 8;
      if constexpr (NW == 1)
        *reinterpret_cast<uint32_t*>(dst) = w[0];
      else if constexpr (NW == 2)
        *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
      else
        *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

template <class In, bool SYM, int BITS, bool PRE>
__global__ void __launch_bounds__(128)
    channel_quant_regs(const In* __restrict__ x, DevFormat f, DevQuant q, int TC, int mm, int allow_fast) {
  constexpr int V = 16 / (int)sizeof(In);
  __shared__ float4 sqp[4][256];
  const int wib = threadIdx.x >> 5;
  const ChUnit cu = ch_unit<PRE>((blockIdx.x * 4u + wib) * 32u + (threadIdx.x & 31), f, V, TC);
  uint4 raw[16];
  ch_load(x, f, cu, raw);
  ch_process<In, SYM, BITS, PRE>(raw, cu, f, q, TC, mm, allow_fast, sqp[wib]);
}

// Register-tile statistics for PRE (whole-axis or long groups): block = one (slice, group) x 128 channels
// chunk: 16-byte loads, (256 / (128 / V)) token lanes each striding the group, then the token
// lanes merged through shared memory (order free: min/max are a total order).
template <class In>
__global__ void __launch_bounds__(256)
    channel_stats_regs(const In* __restrict__ x, DevFormat f, DevQuant q, int mm) {
  constexpr int V = 16 / (int)sizeof(In);
  constexpr int CL = 128 / V;    // channel lanes per 128 channels
  constexpr int TLN = 256 / CL;  // token lanes
  __shared__ float smn[TLN][128 + 1], smx[TLN][128 + 1];
  const int D = (int)f.D;
  const int64_t n = blockIdx.x / f.groups, g = blockIdx.x % f.groups, t0 = g * f.G;
  const int len = (int)min((int64_t)f.G, f.T - t0);
  const int cl = threadIdx.x % CL, tl = threadIdx.x / CL;
  const int c0 = blockIdx.y * 128 + cl * V;
  float mn[V], mx[V];
  int32_t kmn[V], kmx[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    mn[j] = INFINITY;
    mx[j] = -INFINITY;
    kmn[j] = ord_key(INFINITY);
    kmx[j] = ord_key(-INFINITY);
  }
  if (c0 < D) {
    const In* col = x + (n * f.T + t0) * D + c0;
#pragma unroll 4
    for (int t = tl; t < len; t += TLN) {
      const uint4 r = __ldcs(reinterpret_cast<const uint4*>(col + (int64_t)t * D));
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float v = row_value<In>(r, j);
        if (mm) {
          mn[j] = fminf(mn[j], v);
          mx[j] = fmaxf(mx[j], v);
        } else {
          const int32_t k = ord_key(v);
          kmn[j] = min(kmn[j], k);
          kmx[j] = max(kmx[j], k);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    smn[tl][cl * V + j] = mm ? mn[j] : key_float(kmn[j]);
    smx[tl][cl * V + j] = mm ? mx[j] : key_float(kmx[j]);
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    const int c = blockIdx.y * 128 + threadIdx.x;
    if (c < D) {
      float a = smn[0][threadIdx.x], b = smx[0][threadIdx.x];
      for (int t = 1; t < TLN; ++t) {
        a = f_min(a, smn[t][threadIdx.x]);
        b = f_max(b, smx[t][threadIdx.x]);
      }
      write_params(q, (n * D + c) * f.groups + g, params_of(a, b, f.bits, f.sym, f.half_params), f.sym,
                   f.half_params);
    }
  }
}

// ---- Register-tile dequantize: a unit is V channels (one 16-byte store per token: 4 fp32 or 8 fp16)
// x 16 tokens; lanes: TCL = 2^tcl_log2 consecutive token chunks fastest (code loads: TCL * 2 *
// BITS contiguous bytes of a channel row), then 32/TCL channel chunks (stores: 512/TCL
// contiguous bytes of each token row). Measured (docs/PERFORMANCE.md): TCL = 1 or 2 (whole
// 256/512-byte row runs per store) beats 4 and 8; production uses 2 (kDequantTokenLanesLog2),
// gpu/dev/dequant_token_lanes.cu times 1, 2, 4 and 8.
template <int V, bool SYM, int BITS, bool F16OUT>
__global__ void __launch_bounds__(256)
    channel_dequant_regs(DevFormat f, DevQuant q, void* __restrict__ out, int tcl_log2) {
  constexpr int NW = BITS / 2, PER = 32 / BITS;
  const int D = (int)f.D, CC = D / V;
  const uint32_t chunks = (uint32_t)(f.T / 16), tiles = (chunks + (1u << tcl_log2) - 1) >> tcl_log2;
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  const int t8 = (int)(u & ((1u << tcl_log2) - 1));
  const uint32_t r1 = u >> tcl_log2;
  const int cc = (int)(r1 % (uint32_t)CC);
  const uint32_t r2 = r1 / (uint32_t)CC, chunk = ((r2 % tiles) << tcl_log2) + t8;
  const int64_t n = r2 / tiles;
  if (n >= f.N || chunk >= chunks) return;
  const int64_t t0 = chunk * 16, g = t0 / f.G;
  const int c0 = cc * V;
  uint32_t w[V][NW];
  float sc[V], ze[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const uint8_t* src = q.codes + (n * D + c0 + j) * f.row_bytes + t0 * BITS / 8;
    if constexpr (NW == 1) {
      w[j][0] = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else if constexpr (NW == 2) {
      const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
      w[j][0] = t.x;
      w[j][1] = t.y;
    } else {
      const uint4 t = __ldg(reinterpret_cast<const uint4*>(src));
      w[j][0] = t.x;
      w[j][1] = t.y;
      w[j][2] = t.z;
      w[j][3] = t.w;
    }
    const int64_t pi = (n * D + c0 + j) * f.groups + g;
    sc[j] = load_param(q.scale, pi, f.half_params);
    ze[j] = SYM ? 0.0f : load_param(q.zero, pi, f.half_params);
  }
  int64_t e = (n * f.T + t0) * D + c0;
#pragma unroll
  for (int i = 0; i < 16; ++i, e += D) {
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = dequant_word<SYM, BITS>(w[j][i / PER], i % PER, sc[j], ze[j]);
    if constexpr (F16OUT) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + e) = make_uint4(
          half2_bits(y[0], y[1]), half2_bits(y[2], y[3]), half2_bits(y[4], y[5]), half2_bits(y[6], y[7]));
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(out) + e) = make_float4(y[0], y[1], y[2], y[3]);
    }
  }
}

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Register-tile eligibility (both directions): whole 16-token words per lane, aligned 16-byte
// accesses.
bool channel_regs_ok(const DevFormat& f, int V, const void* x, const KernelConfig& cfg) {
  if (!cfg.fast_kernels) return false;
  if (f.bits != 2 && f.bits != 4 && f.bits != 8) return false;
  if (f.D % V != 0 || f.T % 16 != 0 || f.G % 16 != 0) return false;
  if (f.N * f.T * f.D >= (int64_t(1) << 35))
    return false;  // 32-bit unit indices (16 elements per unit and lane)
  return x == nullptr || (reinterpret_cast<uintptr_t>(x) % 16) == 0;
}

template <class In, bool PRE>
void launch_channel_quant_regs(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                               const KernelConfig& cfg) {
  constexpr int V = 16 / (int)sizeof(In);
  const int TC = (int)(f.G / 16);
  const int64_t units = f.N * f.groups * (f.D / V) * TC;
  const int mm = cfg.hw_minmax ? 1 : 0;
  const int fd = cfg.fast_div ? 1 : 0;
  auto go = [&](auto kern) { kern<<<(unsigned)cdiv(units, 128), 128, 0, s>>>(x, f, q, TC, mm, fd); };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(channel_quant_regs<In, true, 2, PRE>); break;
      case 4: go(channel_quant_regs<In, true, 4, PRE>); break;
      default: go(channel_quant_regs<In, true, 8, PRE>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(channel_quant_regs<In, false, 2, PRE>); break;
      case 4: go(channel_quant_regs<In, false, 4, PRE>); break;
      default: go(channel_quant_regs<In, false, 8, PRE>); break;
    }
  }
  check_launch("channel_quant_regs");
}

template <int V, bool F16OUT>
void launch_channel_dequant_regs(const DevFormat& f, DevQuant q, void* out, cudaStream_t s) {
  const int tcl_log2 = kDequantTokenLanesLog2;
  const int64_t tcl = int64_t(1) << tcl_log2;
  const int64_t threads = f.N * ((f.T / 16 + tcl - 1) / tcl) * tcl * (f.D / V);
  const unsigned grid = (unsigned)cdiv(threads, 256);
  auto go = [&](auto kern) { kern<<<grid, 256, 0, s>>>(f, q, out, tcl_log2); };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(channel_dequant_regs<V, true, 2, F16OUT>); break;
      case 4: go(channel_dequant_regs<V, true, 4, F16OUT>); break;
      default: go(channel_dequant_regs<V, true, 8, F16OUT>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(channel_dequant_regs<V, false, 2, F16OUT>); break;
      case 4: go(channel_dequant_regs<V, false, 4, F16OUT>); break;
      default: go(channel_dequant_regs<V, false, 8, F16OUT>); break;
    }
  }
  check_launch("channel_dequant_regs");
}

template <class In>
int64_t channel_tile_smem(const DevFormat& f, int TL) {
  return (((int64_t)TL * f.D * (int64_t)sizeof(In) + 15) / 16) * 16 + f.D * (int64_t)sizeof(GroupParams) +
         f.D * stage_pitch(packed_bytes(TL, f.bits));
}

template <class In, bool PRE>
void launch_tile(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s, int TL) {
  const int64_t smem = channel_tile_smem<In>(f, TL);
  const unsigned grid = (unsigned)(f.N * cdiv(f.T, TL));
  auto go = [&](auto kern) {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    kern<<<grid, 256, smem, s>>>(x, f, q, TL);
  };
  switch (f.bits) {
    case 1: go(channel_quant_tile<In, PRE, 1>); break;
    case 2: go(channel_quant_tile<In, PRE, 2>); break;
    case 4: go(channel_quant_tile<In, PRE, 4>); break;
    case 8: go(channel_quant_tile<In, PRE, 8>); break;
    default: go(channel_quant_tile<In, PRE, 0>); break;
  }
  check_launch("channel_quant_tile");
}

template <class In>
const char* quantize_channel_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                               const KernelConfig& cfg) {
  if (channel_regs_ok(f, 16 / (int)sizeof(In), x, cfg)) {
    if (pow2(f.G / 16) && f.G / 16 <= 32) {
      launch_channel_quant_regs<In, false>(f, x, q, s, cfg);
      return "regs";
    }
    if (const char* label =
            quantize_channel_cluster(f, x, sizeof(In) == 2 ? InType::F16 : InType::F32, q, s, cfg))
      return label;
    channel_stats_regs<In><<<dim3((unsigned)(f.N * f.groups), (unsigned)cdiv(f.D, 128)), 256, 0, s>>>(
        x, f, q, cfg.hw_minmax ? 1 : 0);
    check_launch("channel_stats_regs");
    launch_channel_quant_regs<In, true>(f, x, q, s, cfg);
    return "regs-2pass";
  }
  if (((int64_t)f.G * f.bits) % 8 == 0 && channel_tile_smem<In>(f, f.G) <= kMaxTileSmem) {
    launch_tile<In, false>(f, x, q, s, f.G);
    return "tile";
  }
  channel_stats<In><<<dim3((unsigned)(f.N * f.groups), (unsigned)cdiv(f.D, 32)), 256, 0, s>>>(x, f, q);
  check_launch("channel_stats");
  if ((f.G % 128 == 0 || f.groups == 1) && channel_tile_smem<In>(f, 128) <= kMaxTileSmem) {
    launch_tile<In, true>(f, x, q, s, 128);  // codes from 128-token tiles, params from channel_stats
    return "tile-2pass";
  }
  const int64_t items = f.N * cdiv(f.T, 8) * f.D;
  channel_codes<In>
      <<<(unsigned)std::min<int64_t>(cdiv(items, 256), (int64_t)sm_count() * 64), 256, 0, s>>>(x, f, q);
  check_launch("channel_codes");
  return "two-pass";
}

}  // namespace

const char* quantize_channel(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                             const KernelConfig& cfg) {
  if (in == InType::F16) return quantize_channel_t(f, static_cast<const uint16_t*>(x), q, s, cfg);
  return quantize_channel_t(f, static_cast<const float*>(x), q, s, cfg);
}

const char* dequantize_channel(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                               const KernelConfig& cfg) {
  if (o == OutType::F32 && channel_regs_ok(f, 4, nullptr, cfg)) {
    launch_channel_dequant_regs<4, false>(f, q, out, s);
    return "regs";
  }
  if (o == OutType::F16 && channel_regs_ok(f, 8, nullptr, cfg)) {
    launch_channel_dequant_regs<8, true>(f, q, out, s);
    return "regs";
  }
  const int b = f.bits;
  if ((b == 1 || b == 2 || b == 4 || b == 8) && f.D % 4 == 0 && (f.G % (32 / b) == 0 || f.groups == 1)) {
    const int smem = (int)f.D * stage_pitch(packed_bytes(128, b));
    const unsigned grid = (unsigned)(f.N * cdiv(f.T, 128));
    auto go = [&](auto kern) {
      if (smem > 48 * 1024) cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      kern<<<grid, 256, smem, s>>>(f, q, out, o);
    };
    switch (b) {
      case 1: go(channel_dequant_vec<1>); break;
      case 2: go(channel_dequant_vec<2>); break;
      case 4: go(channel_dequant_vec<4>); break;
      default: go(channel_dequant_vec<8>); break;
    }
    check_launch("channel_dequant_vec");
    return "vec";
  }
  const int smem = (int)f.D * stage_pitch(packed_bytes(128, f.bits));
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(channel_dequant, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  channel_dequant<<<(unsigned)(f.N * cdiv(f.T, 128)), 256, smem, s>>>(f, q, out, o);
  check_launch("channel_dequant");
  return "tile";
}

}  // namespace kvlab::gpu
