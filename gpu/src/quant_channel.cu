// Plain per-channel format (axis=channel): a group is G tokens of one channel.
//   codes (N, D, packed_bytes(T, bits)), scale/zero (N, D, ceil(T / G))
// Quantize: one block per (slice, group) tile of G x D elements, read once into shared memory,
// min/max per channel in token order, codes packed with put_code into a staged row chunk, then
// written out coalesced. Groups that end mid-byte or tiles too large for shared memory take the
// two-pass path (statistics, then codes with one thread per output byte run).
#include "tile.cuh"

namespace kvlab::gpu {
namespace {

// v3 tile kernel. The tile (TL tokens x D channels) is copied raw (fp16 stays 2 bytes) into
// shared memory with 16-byte loads and converted when read (hardware cvt). Statistics as v2
// (two token halves, merged earlier-first); PRE: params come from channel_stats (two-pass,
// whole-axis or large groups, tiles of 128 tokens inside one group). Codes: BITS in {1,2,4,8}
// packs 32/BITS codes of one channel into a register word, stored as a whole word in the
// stage (no read-modify-write); BITS == 0 keeps the put_code path for other widths.
template <class In, bool PRE, int BITS>
__global__ void __launch_bounds__(256) channel_quant_tile(const In* __restrict__ x, DevFormat f, DevQuant q, int TL) {
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
      par[c] = GroupParams{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
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
        kmn = min(kmn, k), kmx = max(kmx, k);
      }
      const float mn = key_float(kmn), mx = key_float(kmx);
      if (h == 1) part[c] = mn, part[D + c] = mx;
      else par[c] = GroupParams{mn, mx};
    }
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float mn = par[c].scale, mx = par[c].zero;
      if (halves == 2) mn = f_min(mn, part[c]), mx = f_max(mx, part[D + c]);
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
      kmn = min(kmn, k), kmx = max(kmx, k);
    }
    mn = key_float(kmn), mx = key_float(kmx);
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
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = i % f.D, s = (i / f.D) % segs, n = i / (f.D * segs);
    uint8_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < 8; ++j) {
      const int64_t t = 8 * s + j;
      if (t >= f.T) break;
      const int64_t pi = (n * f.D + c) * f.groups + t / f.G;
      const GroupParams p{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      put_code(buf, j, f.bits, code_of(load_in(x, (n * f.T + t) * f.D + c), p, f.bits, f.sym));
    }
    uint8_t* row = q.codes + (n * f.D + c) * f.row_bytes;
    for (int b = 0; b < f.bits && s * f.bits + b < f.row_bytes; ++b) row[s * f.bits + b] = buf[b];
  }
}

// Dequantize: one block per (slice, 128-token tile); code bytes staged in shared memory.
__global__ void __launch_bounds__(256) channel_dequant(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
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
    // no per-element division (v2; v1 divided i / D and (t0 + t) / G per element).
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
        p = GroupParams{load_param(q.scale, pbase + g, f.half_params), f.sym ? 0.0f : load_param(q.zero, pbase + g, f.half_params)};
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
    const GroupParams p{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
    store_out(out, (n * f.T + t0 + t) * D + c, dequant_of(code, p, bits, f.sym), code, o);
  }
}

// v3 dequantize (BITS in {1,2,4,8}, D % 4 == 0, words inside one group): code bytes staged
// as in v2; a thread takes one 32-bit word (32/BITS tokens) of 4 adjacent channels and writes
// 4 channels per token with one vector store (a warp writes 128 contiguous channels).
template <int BITS>
__global__ void __launch_bounds__(256) channel_dequant_vec(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
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
      pg = g, pc = c4;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t pi = (n * D + c4 + k) * f.groups + g;
        p[k] = GroupParams{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      }
    }
    const int jn = min(PER, len - w * PER);
    int64_t e = (n * f.T + t0 + (int64_t)w * PER) * D + c4;
#pragma unroll 4
    for (int j = 0; j < jn; ++j, e += D) {
      uint32_t c[4];
      float y[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) c[k] = word_code(word[k], j, BITS), y[k] = dequant_of(c[k], p[k], BITS, f.sym);
      store_out4(out, e, y, c, o);
    }
  }
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
const char* quantize_channel_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s) {
  if (((int64_t)f.G * f.bits) % 8 == 0 && channel_tile_smem<In>(f, f.G) <= kMaxTileSmem) {
    launch_tile<In, false>(f, x, q, s, f.G);
    return "tile";
  }
  channel_stats<In><<<dim3((unsigned)(f.N * f.groups), (unsigned)cdiv(f.D, 32)), 256, 0, s>>>(x, f, q);
  check_launch("channel_stats");
  if ((f.G % 128 == 0 || f.groups == 1) && channel_tile_smem<In>(f, 128) <= kMaxTileSmem) {
    launch_tile<In, true>(f, x, q, s, 128);  // codes from 128-token tiles, params from channel_stats
    return "2pass-tile";
  }
  const int64_t items = f.N * cdiv(f.T, 8) * f.D;
  channel_codes<In><<<(unsigned)std::min<int64_t>(cdiv(items, 256), 132 * 64), 256, 0, s>>>(x, f, q);
  check_launch("channel_codes");
  return "two-pass";
}

}  // namespace

const char* quantize_channel(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s) {
  if (in == InType::F16) return quantize_channel_t(f, static_cast<const uint16_t*>(x), q, s);
  return quantize_channel_t(f, static_cast<const float*>(x), q, s);
}

const char* dequantize_channel(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s) {
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
