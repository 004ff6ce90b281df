// Kitty key pages (axis=channel, boost): pages of G tokens, page-major.
//   low plane (N, P, D, packed_bytes(Gp, bits)), high plane (N, P, k, packed_bytes(Gp, 2)),
//   boost_index (N, P, D) uint8 (0xFF = not boosted), scale/zero (N, P, D)
// Kernel paths, first that fits (the label each returns in brackets):
//   quantize:   boost_quant_radix [radix-direct: D = G = 128; radix-pairs with KernelConfig::boost_direct
//               off or other shapes; radix with boost_pairs off] (2/4 bits, T and G multiples of 16,
//               even D <= 256);
//               boost_quant_page [page]
//   dequantize: boost_dequant_regs [regs]; boost_dequant_page [page]
// One block per page: the G x D tile is read once into shared memory; per channel, in token
// order, min, max and the fp32 sum of |x|; the top k channels by that sum (ties to the lower
// channel) get bits + 2 with slots in channel order; low and high codes are staged and written.
#include "fastq.cuh"

namespace kvlab::gpu {
namespace {

struct BoostSmem {
  int spl, sph;
  int64_t bytes;
};

BoostSmem boost_smem(const DevFormat& f) {
  BoostSmem b{};
  b.spl = stage_pitch(packed_bytes(f.G, f.bits));
  b.sph = stage_pitch(packed_bytes(f.G, 2));
  b.bytes = (int64_t)f.G * f.D * 4 + f.D * (4 + 4 + (int64_t)sizeof(GroupParams)) + f.D * (int64_t)b.spl +
            (int64_t)std::max(f.k, 1) * b.sph;
  return b;
}

template <class In>
__global__ void __launch_bounds__(256)
    boost_quant_page(const In* __restrict__ x, DevFormat f, DevQuant q, BoostSmem bs) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, bits = f.bits, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  const int nbl = (int)packed_bytes(len, bits), nbh = (int)packed_bytes(len, 2);
  float* tile = reinterpret_cast<float*>(smem);   // len x D
  float* score = tile + G * D;                    // D
  int* slot = reinterpret_cast<int*>(score + D);  // D: slot or -1
  GroupParams* par = reinterpret_cast<GroupParams*>(slot + D);
  uint8_t* low = reinterpret_cast<uint8_t*>(par + D);  // D rows of spl bytes
  uint8_t* high = low + D * bs.spl;                    // k rows of sph bytes

  load_tile(tile, D, x + (n * f.T + t0) * D, len, D);
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    int32_t kmn = ord_key(INFINITY), kmx = ord_key(-INFINITY);
    float sum = 0.0f;
    for (int t = 0; t < len; ++t) {  // token order: fp32 sum as the CPU reference
      const float v = tile[t * D + c];
      const int32_t k = ord_key(v);  // min/max by order keys (tile.cuh): same element as f_min/f_max
      kmn = min(kmn, k);
      kmx = max(kmx, k);
      sum = f_add(sum, f_abs(v));
    }
    const float mn = key_float(kmn), mx = key_float(kmx);
    score[c] = sum;
    par[c] = GroupParams{mn, mx};  // raw min/max until the levels are known
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float sc = score[c];
    int rank = 0;
    for (int o = 0; o < D; ++o) rank += (score[o] > sc || (score[o] == sc && o < c)) ? 1 : 0;
    slot[c] = rank < k ? 1 : 0;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    int before = 0;
    for (int o = 0; o < c; ++o) before += slot[o] > 0 ? 1 : 0;  // read-only pass over flags
    const bool boosted = slot[c] > 0;
    const int levels = asym_levels(
        boosted ? (bits + 2) /* spec.h boosted_bits: Kitty raises boosted channels by 2 bits */ : bits);
    const GroupParams p = KvlabRecipe::asym_params(par[c].scale, par[c].zero, levels, f.half_params != 0);
    q.index[w * D + c] = boosted ? (uint8_t)before : (uint8_t)0xFF;
    write_params(q, w * D + c, p, 0, f.half_params);
    score[c] = boosted ? (float)before : -1.0f;  // reuse as the slot, once every rank is read
    par[c] = p;                                  // own element only
  }
  __syncthreads();
  const uint32_t low_mask = (1u << bits) - 1u;
  const int segs = (len + 7) / 8;
  for (int i = threadIdx.x; i < segs * D; i += blockDim.x) {
    const int s = i / D, c = i - s * D;
    const int sl = (int)score[c];
    const bool boosted = sl >= 0;
    const int levels = asym_levels(
        boosted ? (bits + 2) /* spec.h boosted_bits: Kitty raises boosted channels by 2 bits */ : bits);
    uint8_t* lrow = low + c * bs.spl;
    uint8_t* hrow = boosted ? high + sl * bs.sph : nullptr;
    for (int b = s * bits; b < min(s * bits + bits, nbl); ++b) lrow[b] = 0;
    if (boosted)
      for (int b = s * 2; b < min(s * 2 + 2, nbh); ++b) hrow[b] = 0;
    const GroupParams p = par[c];
    for (int j = 0; j < 8; ++j) {
      const int t = 8 * s + j;
      if (t >= len) break;
      const uint32_t code = KvlabRecipe::asym_code(tile[t * D + c], p, levels);
      put_code(lrow, t, bits, code & low_mask);
      if (boosted) put_code(hrow, t, 2, code >> bits);
    }
  }
  __syncthreads();
  copy_rows(q.codes + n * f.slice_low() + pg * D * packed_bytes(G, bits), nbl, low, bs.spl, D, nbl);
  if (k > 0) copy_rows(q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, high, bs.sph, k, nbh);
}

__global__ void __launch_bounds__(256)
    boost_dequant_page(DevFormat f, DevQuant q, void* __restrict__ out, OutType o, BoostSmem bs) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, bits = f.bits, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  const int nbl = (int)packed_bytes(len, bits), nbh = (int)packed_bytes(len, 2);
  uint8_t* index = smem;  // D (padded to 16)
  uint8_t* low = smem + ((D + 15) / 16) * 16;
  uint8_t* high = low + D * bs.spl;
  for (int c = threadIdx.x; c < D; c += blockDim.x) index[c] = q.index[w * D + c];
  copy_rows(low, bs.spl, q.codes + n * f.slice_low() + pg * D * packed_bytes(G, bits), nbl, D, nbl);
  if (k > 0) copy_rows(high, bs.sph, q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, k, nbh);
  __syncthreads();
  if (blockDim.x % D == 0) {  // fixed channel per thread, params and slot loaded once
    const int c = threadIdx.x % D, step = blockDim.x / D, sl = index[c];
    const uint8_t* lrow = low + c * bs.spl;
    const uint8_t* hrow = high + (sl == 0xFF ? 0 : sl) * bs.sph;
    const GroupParams p{load_param(q.scale, w * D + c, f.half_params),
                        load_param(q.zero, w * D + c, f.half_params)};
    const int64_t obase = (n * f.T + t0) * D + c;
    for (int t = threadIdx.x / D; t < len; t += step) {
      uint32_t code = get_code(lrow, t, bits);
      if (sl != 0xFF) code |= get_code(hrow, t, 2) << bits;
      store_out(out, obase + (int64_t)t * D, KvlabRecipe::asym_dequant(code, p), code, o);
    }
    return;
  }
  for (int i = threadIdx.x; i < len * D; i += blockDim.x) {
    const int t = i / D, c = i - t * D;
    uint32_t code = get_code(low + c * bs.spl, t, bits);
    const int sl = index[c];
    if (sl != 0xFF) code |= get_code(high + sl * bs.sph, t, 2) << bits;
    const GroupParams p{load_param(q.scale, w * D + c, f.half_params),
                        load_param(q.zero, w * D + c, f.half_params)};
    store_out(out, (n * f.T + t0 + t) * D + c, KvlabRecipe::asym_dequant(code, p), code, o);
  }
}

// ---- Radix pages (BITS in {2, 4}, T % 16 == 0, G % 16 == 0, even D <= 256). One block of 256
// threads per page:
//  1. the raw page (fp16 stays 2 bytes) into shared memory, 16-byte loads, 8 in flight;
//  2. statistics: one thread per channel (PAIRS: per two adjacent channels), min/max (hardware
//     or order keys) and the fp32 sum of |x| in token order, as the CPU reference. fabsf
//     instead of hd.h's f_abs only differs on -0 (f_abs keeps -0), and the sum starts at +0 and
//     so is never -0: +0 + -0 = +0 + +0 = +0, and s + (+-0) = s otherwise, so every partial sum
//     is the same;
//  3. top-k by one warp: radix select of the k-th largest score on its bits (scores are >= +0,
//     so unsigned order is float order, inf included), then ties at that score go to the lowest
//     channels (ballot prefix in channel order), slots = boosted channels before c (ballots);
//  4. params and RN(1/s) per channel (levels 2^bits - 1 or 2^(bits+2) - 1);
//  5. codes (see there): low plane BITS/2 words and, for boosted channels, one high-plane word
//     (code >> bits) per 16 tokens, staged, then copied out row by row.
struct BoostRadixSmem {
  int64_t tile, bytes;
};
template <class In>
BoostRadixSmem boost_radix_smem(const DevFormat& f, bool direct) {
  BoostRadixSmem b{};
  b.tile = (((int64_t)f.G * f.D * (int64_t)sizeof(In)) + 15) / 16 * 16;
  b.bytes = b.tile + f.D * (int64_t)(sizeof(float4) + sizeof(float) + sizeof(int));
  if (!direct)  // staged code rows
    b.bytes += f.D * (int64_t)stage_pitch(packed_bytes(f.G, f.bits)) +
               std::max(f.k, 1) * (int64_t)stage_pitch(packed_bytes(f.G, 2));
  return b;
}

// DIRECT (D = G = 128): the page lands in shared memory by cp.async (no registers), its 16-byte
// chunks XOR-swizzled by bits 4..6 of the token, so that the codes step can give a warp 4
// channels x 8 token chunks (conflict-free) and store each unit's words straight to global
// memory, 128 or 256 contiguous bytes per warp store, without staging rows.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
template <class In>
__device__ __forceinline__ int swz(int t, int c) {  // element offset of channel c in token t's row
  return c ^ (((t >> 4) & 7) * (16 / (int)sizeof(In)));
}
template <class In>
__device__ __forceinline__ void load_swizzled(In* tile, const In* x, int len, int D) {
  const int cpr = D * (int)sizeof(In) / 16, n = len * cpr;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int t = i / cpr, ch = i - t * cpr;
    cp_async16(reinterpret_cast<uint4*>(tile) + t * cpr + (ch ^ ((t >> 4) & 7)),
               reinterpret_cast<const uint4*>(x) + i);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Fast codes of 16 tokens of one channel (col[j * D], j < 16): low plane words and the high
// plane word. Biased codes (M + code, fastq.cuh) are summed into fields wide enough for the
// boosted code (4 bits for BITS 2, 8 for BITS 4; no carries, the bias subtracted once), even and
// odd tokens in separate words, so the two planes are two mask-and-merge steps.
template <class In, int BITS>
__device__ __forceinline__ void kitty_words(const In* col, int D, const QP& qp, float levels,
                                            uint32_t (&lw)[BITS / 2], uint32_t& hw) {
  constexpr int W = BITS == 2 ? 4 : 8, PER = 32 / W;  // field width, tokens per word
  constexpr uint32_t bias = magic_pack_bias<W>();
  uint32_t a[16 / PER];
#pragma unroll
  for (int m = 0; m < 16 / PER; ++m) a[m] = 0u - bias;
#pragma unroll
  for (int j = 0; j < 16; ++j) {  // word m: tokens 2 PER (m / 2) + 2 i + (m & 1)
    const int m = (j / (2 * PER)) * 2 + (j & 1), i = (j % (2 * PER)) / 2;
    a[m] += biased_code_levels(to_f(col[j * D]), qp, levels) << (W * i);
  }
  if constexpr (BITS == 2) {
    lw[0] = (a[0] & 0x33333333u) | ((a[1] << 2) & 0xCCCCCCCCu);
    hw = ((a[0] >> 2) & 0x33333333u) | (a[1] & 0xCCCCCCCCu);
  } else {
    uint32_t h[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lw[r] = (a[2 * r] & 0x0F0F0F0Fu) | ((a[2 * r + 1] << 4) & 0xF0F0F0F0u);
      const uint32_t b =
          ((a[2 * r] >> 4) & 0x03030303u) | ((a[2 * r + 1] >> 2) & 0x0C0C0C0Cu);  // nibble per byte
      const uint32_t y = (b | (b >> 4)) & 0x00FF00FFu;
      h[r] = (y | (y >> 8)) & 0xFFFFu;
    }
    hw = h[0] | (h[1] << 16);
  }
}

// The same words by the recipe's own asymmetric code, for parameters the fast path does not take
// (qp.fast == 0).
template <class In, int BITS>
__device__ __forceinline__ void recipe_words(const In* col, int D, const QP& qp, float levels,
                                             uint32_t (&lw)[BITS / 2], uint32_t& hw) {
  const GroupParams gp{qp.scale, qp.zero};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t code = KvlabRecipe::asym_code(to_f(col[j * D]), gp, (int)levels);
    lw[(j * BITS) / 32] |= (code & ((1u << BITS) - 1u)) << ((j * BITS) % 32);
    hw |= (code >> BITS) << (2 * j);
  }
}

// DT: D as a compile-time constant (0: f.D), so the strided shared-memory reads of the
// statistics and codes take immediate offsets instead of an address add per element.
template <class In, int BITS, bool PAIRS, int DT, bool DIRECT = false>
__global__ void __launch_bounds__(256) boost_quant_radix(const In* __restrict__ x, DevFormat f, DevQuant q,
                                                         int64_t tile_bytes, int mm, int allow_fast) {
  static_assert(!DIRECT || (PAIRS && DT == 128), "boost_quant_radix: DIRECT needs channel pairs and D = 128");
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = DT ? DT : (int)f.D, G = f.G, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  In* tile = reinterpret_cast<In*>(smem);
  float4* sqp = reinterpret_cast<float4*>(smem + tile_bytes);  // D: zero, scale, rcp, fast
  float* score = reinterpret_cast<float*>(sqp + D);            // D: score, then levels
  int* slot = reinterpret_cast<int*>(score + D);               // D: slot or -1
  if (DIRECT)
    load_swizzled(tile, x + (n * f.T + t0) * D, len, D);
  else
    load_raw<In, 8>(tile, x + (n * f.T + t0) * D, len * D);
  __syncthreads();
  // 2. statistics, thread = channel (token-order fp32 sum: one dependent chain per channel);
  // PAIRS: thread = two adjacent channels, one 4- or 8-byte load per token and, for fp16 with
  // hardware min/max, HMNMX2 on the raw pair (two chains, each in token order).
  if (PAIRS) {
    for (int cp = threadIdx.x; cp < D / 2; cp += blockDim.x) {
      float s0 = 0.0f, s1 = 0.0f, mn0 = INFINITY, mx0 = -INFINITY, mn1 = INFINITY, mx1 = -INFINITY;
      int32_t kmn0 = ord_key(INFINITY), kmx0 = ord_key(-INFINITY), kmn1 = kmn0, kmx1 = kmx0;
      __half2 hmn = __halves2half2(__ushort_as_half(0x7C00), __ushort_as_half(0x7C00));
      __half2 hmx = __halves2half2(__ushort_as_half(0xFC00), __ushort_as_half(0xFC00));
      const bool h2 = sizeof(In) == 2 && mm;
      auto step = [&](const In* p) {  // one token of the pair at p
        float v0, v1;
        if constexpr (sizeof(In) == 2) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
          v0 = to_f((uint16_t)(w & 0xffffu));
          v1 = to_f((uint16_t)(w >> 16));
          if (h2) {
            const __half2 h = *reinterpret_cast<const __half2*>(&w);
            hmn = __hmin2(hmn, h);
            hmx = __hmax2(hmx, h);
          }
        } else {
          const float2 w = *reinterpret_cast<const float2*>(p);
          v0 = w.x;
          v1 = w.y;
        }
        s0 = __fadd_rn(s0, fabsf(v0));
        s1 = __fadd_rn(s1, fabsf(v1));
        if (!h2 && mm) {
          mn0 = fminf(mn0, v0);
          mx0 = fmaxf(mx0, v0);
          mn1 = fminf(mn1, v1);
          mx1 = fmaxf(mx1, v1);
        } else if (!h2) {
          kmn0 = min(kmn0, ord_key(v0));
          kmx0 = max(kmx0, ord_key(v0));
          kmn1 = min(kmn1, ord_key(v1));
          kmx1 = max(kmx1, ord_key(v1));
        }
      };
      if (DIRECT) {  // 16 tokens share a swizzle: immediate offsets inside the block
        for (int tb = 0; tb < len; tb += 16) {
          const In* p = tile + tb * D + swz<In>(tb, 2 * cp);
#pragma unroll
          for (int j = 0; j < 16; ++j) step(p + j * D);
        }
      } else {
#pragma unroll 8
        for (int t = 0; t < len; ++t) step(tile + t * D + 2 * cp);
      }
      if (h2) {
        mn0 = __low2float(hmn);
        mn1 = __high2float(hmn);
        mx0 = __low2float(hmx);
        mx1 = __high2float(hmx);
      } else if (!mm) {
        mn0 = key_float(kmn0);
        mx0 = key_float(kmx0);
        mn1 = key_float(kmn1);
        mx1 = key_float(kmx1);
      }
      score[2 * cp] = s0;
      score[2 * cp + 1] = s1;
      sqp[2 * cp] = make_float4(mn0, mx0, 0.0f, 0.0f);
      sqp[2 * cp + 1] = make_float4(mn1, mx1, 0.0f, 0.0f);
    }
  }
  for (int c = threadIdx.x; !PAIRS && c < D; c += blockDim.x) {
    float sum = 0.0f, mn = INFINITY, mx = -INFINITY;
    int32_t kmn = ord_key(INFINITY), kmx = ord_key(-INFINITY);
#pragma unroll 8
    for (int t = 0; t < len; ++t) {
      const float v = to_f(tile[t * D + c]);
      sum = __fadd_rn(sum, fabsf(v));
      if (mm) {
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
      } else {
        const int32_t kv = ord_key(v);
        kmn = min(kmn, kv);
        kmx = max(kmx, kv);
      }
    }
    if (!mm) {
      mn = key_float(kmn);
      mx = key_float(kmx);
    }
    score[c] = sum;
    sqp[c] = make_float4(mn, mx, 0.0f, 0.0f);
  }
  __syncthreads();
  // 3. top-k (warp 0). Lane holds channels c = m*32 + lane.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    constexpr int MC = 8;  // D <= 256
    uint32_t key[MC];
    const int mc = (D + 31) / 32;  // channel rows in use (ballots over unused rows are skipped)
#pragma unroll
    for (int m = 0; m < MC; ++m) key[m] = (m * 32 + lane < D) ? __float_as_uint(score[m * 32 + lane]) : 0u;
    const bool has[MC] = {0 * 32 + lane < D, 1 * 32 + lane < D, 2 * 32 + lane < D, 3 * 32 + lane < D,
                          4 * 32 + lane < D, 5 * 32 + lane < D, 6 * 32 + lane < D, 7 * 32 + lane < D};
    uint32_t thr = 0;
    int gt = 0;
    if (k > 0) {
      // PAIRS: two bits per round (bits b, b - 1 from three independent counts: the same
      // greedy choice as one bit at a time, half the dependent rounds), then bit 0 alone.
      for (int b = 30; PAIRS && b >= 2; b -= 2) {
        const uint32_t c1 = thr | (1u << (b - 1)), c2 = thr | (1u << b), c3 = c2 | (1u << (b - 1));
        int n1 = 0, n2 = 0, n3 = 0;
#pragma unroll
        for (int m = 0; m < MC; ++m)
          if (m < mc) {
            n1 += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] >= c1));
            n2 += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] >= c2));
            n3 += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] >= c3));
          }
        thr = n2 >= k ? (n3 >= k ? c3 : c2) : (n1 >= k ? c1 : thr);
      }
      for (int b = PAIRS ? 0 : 30; b >= 0; --b) {  // bit 31 (sign) is 0 for every score
        const uint32_t cand = thr | (1u << b);
        int cnt = 0;
#pragma unroll
        for (int m = 0; m < MC; ++m)
          if (m < mc) cnt += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] >= cand));
        if (cnt >= k) thr = cand;
      }
#pragma unroll
      for (int m = 0; m < MC; ++m)
        if (m < mc) gt += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] > thr));
    }
    const int need = k - gt;  // channels at the threshold score that are boosted, lowest first
    const unsigned lt = (1u << lane) - 1u;
    int eq_before = 0, boosted_before = 0;
#pragma unroll
    for (int m = 0; m < MC; ++m) {
      if (m >= mc) break;
      const bool eq = k > 0 && has[m] && key[m] == thr;
      const unsigned eqb = __ballot_sync(0xffffffffu, eq);
      const bool bst = k > 0 && has[m] && (key[m] > thr || (eq && eq_before + __popc(eqb & lt) < need));
      const unsigned bb = __ballot_sync(0xffffffffu, bst);
      const int c = m * 32 + lane, before = boosted_before + __popc(bb & lt);  // boosted channels below c
      if (has[m]) slot[c] = bst ? before : -1;
      eq_before += __popc(eqb);
      boosted_before += __popc(bb);
    }
  }
  __syncthreads();
  // 4. params per channel
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const int sl = slot[c];
    const int levels = asym_levels(sl >= 0 ? BITS + 2 : BITS);
    const float4 mm4 = sqp[c];
    const GroupParams p = KvlabRecipe::asym_params(mm4.x, mm4.y, levels, f.half_params != 0);
    q.index[w * D + c] = sl >= 0 ? (uint8_t)sl : (uint8_t)0xFF;
    write_params(q, w * D + c, p, 0, f.half_params);
    const QP qp = make_qp(p, allow_fast);
    sqp[c] = make_float4(qp.zero, qp.scale, qp.rcp, qp.fast);
    score[c] = (float)levels;
  }
  __syncthreads();
  if constexpr (DIRECT) {
    // 5. codes: a warp takes 4 adjacent channels x 8 token chunks (lane = chunk + 8 x channel), so
    // its stores cover 4 whole low-plane rows; the swizzle keeps the 8 chunks' reads on distinct banks.
    const int lane = threadIdx.x & 31, tc = lane & 7, chunks = len / 16;
    const int nbl = len * BITS / 8, nbh = len / 4;
    uint8_t* lowp = q.codes + n * f.slice_low() + pg * D * packed_bytes(G, BITS);
    uint8_t* highp = q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2);
    for (int c = (int)(threadIdx.x >> 5) * 4 + (lane >> 3); c < D; c += (int)(blockDim.x >> 5) * 4) {
      if (tc >= chunks) continue;
      const float4 pv = sqp[c];
      const QP qp{pv.x, pv.y, pv.z, pv.w};
      const float levels = score[c];
      const int sl = slot[c];
      const In* col = tile + tc * 16 * D + swz<In>(tc * 16, c);
      uint32_t lw[BITS / 2] = {}, hw = 0;
      if (qp.fast != 0.0f) {
        kitty_words<In, BITS>(col, D, qp, levels, lw, hw);
      } else {
        recipe_words<In, BITS>(col, D, qp, levels, lw, hw);
      }
      uint8_t* ld = lowp + (int64_t)c * nbl + tc * 2 * BITS;
      if constexpr (BITS == 2)
        *reinterpret_cast<uint32_t*>(ld) = lw[0];
      else
        *reinterpret_cast<uint2*>(ld) = make_uint2(lw[0], lw[1]);
      if (sl >= 0) *reinterpret_cast<uint32_t*>(highp + (int64_t)sl * nbh + tc * 4) = hw;
    }
    return;
  }
  // 5. codes: unit = one channel x 16 tokens, channels fastest across lanes; words staged per
  // row, then rows copied out coalesced. Every channel splits low and high bits (one branch for
  // all); the grouped order (non-boosted channels first, packed by adding biased codes) measured
  // slower and lives in gpu/dev/kitty_code_order.cu. (Adjacent channel pairs per thread
  // measured slower too: 64 registers, fewer warps.)
  const int chunks = len / 16, units = chunks * D;
  const int nbl = len * BITS / 8, nbh = len / 4;
  const int spl = stage_pitch(packed_bytes(G, BITS)), sph = stage_pitch(packed_bytes(G, 2));
  uint8_t* lst = reinterpret_cast<uint8_t*>(slot + D);  // D rows of spl bytes
  uint8_t* hst = lst + (int64_t)D * spl;                // k rows of sph bytes
  // PAIRS (blockDim.x a multiple of D): each thread keeps one channel and its constants and
  // steps over token chunks, no division per unit.
  const bool fixed = PAIRS && blockDim.x % D == 0;
  const int istep = fixed ? (int)blockDim.x / D : 1;
  const int c_fixed = threadIdx.x % D;
  const float4 pv_fixed = sqp[c_fixed];
  const float lv_fixed = score[c_fixed];
  const int sl_fixed = slot[c_fixed];
  for (int i = fixed ? (int)threadIdx.x / D : (int)threadIdx.x; i < (fixed ? chunks : units);
       i += fixed ? istep : (int)blockDim.x) {
    const int c = fixed ? c_fixed : i % D;
    const int tc = fixed ? i : i / D;
    const float4 pv = fixed ? pv_fixed : sqp[c];
    const QP qp{pv.x, pv.y, pv.z, pv.w};
    const float levels = fixed ? lv_fixed : score[c];
    const int sl = fixed ? sl_fixed : slot[c];
    const In* col = tile + tc * 16 * D + c;
    uint32_t lw[BITS / 2] = {}, hw = 0;
    if (qp.fast != 0.0f) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint32_t t = biased_code_levels(to_f(col[j * D]), qp, levels);
        lw[(j * BITS) / 32] |= (t & ((1u << BITS) - 1u)) << ((j * BITS) % 32);
        hw |= ((t >> BITS) & 3u) << (2 * j);
      }
    } else {
      recipe_words<In, BITS>(col, D, qp, levels, lw, hw);
    }
    uint32_t* ld = reinterpret_cast<uint32_t*>(lst + (int64_t)c * spl) + tc * (BITS / 2);
#pragma unroll
    for (int m = 0; m < BITS / 2; ++m) ld[m] = lw[m];
    if (sl >= 0) reinterpret_cast<uint32_t*>(hst + (int64_t)sl * sph)[tc] = hw;
  }
  __syncthreads();
  copy_rows(q.codes + n * f.slice_low() + pg * D * packed_bytes(G, BITS), nbl, lst, spl, D, nbl);
  if (k > 0) copy_rows(q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, hst, sph, k, nbh);
}

// Register page dequantize: unit = V channels x 16 tokens of one page (lanes: 8 token chunks
// fastest, then channel chunks), low and high words read straight from the planes.
template <int V, int BITS, bool F16OUT>
__global__ void __launch_bounds__(256)
    boost_dequant_regs(DevFormat f, DevQuant q, void* __restrict__ out, int tcl_log2) {
  const int D = (int)f.D, G = f.G, k = f.k, CC = D / V;
  const int tiles = (G / 16 + (1 << tcl_log2) - 1) >> tcl_log2;  // per page
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  const int t8 = (int)(u & ((1u << tcl_log2) - 1));
  const uint32_t r1 = u >> tcl_log2;
  const int cc = (int)(r1 % (uint32_t)CC);
  const uint32_t r2 = r1 / (uint32_t)CC;
  const int64_t w = r2 / (uint32_t)tiles;  // page (slice-major)
  const int chunk = ((int)(r2 % (uint32_t)tiles) << tcl_log2) + t8;
  if (w >= f.N * f.groups) return;
  const int64_t n = w / f.groups, pg = w % f.groups;
  const int len = (int)f.page_tokens(pg);
  if (chunk * 16 >= len) return;
  const int nbl = len * BITS / 8, nbh = len / 4, c0 = cc * V;
  const uint8_t* low = q.codes + n * f.slice_low() + pg * D * packed_bytes(G, BITS);
  const uint8_t* high = q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2);
  uint32_t lw[V][BITS / 2], hw[V];
  float sc[V], ze[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = c0 + j;
    const uint8_t* src = low + (int64_t)c * nbl + chunk * 2 * BITS;
    if constexpr (BITS == 2) {
      lw[j][0] = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else {
      const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
      lw[j][0] = t.x;
      lw[j][BITS / 2 - 1] = t.y;
    }
    const int sl = __ldg(q.index + w * D + c);
    hw[j] = sl != 0xFF ? __ldg(reinterpret_cast<const uint32_t*>(high + (int64_t)sl * nbh + chunk * 4)) : 0u;
    sc[j] = load_param(q.scale, w * D + c, f.half_params);
    ze[j] = load_param(q.zero, w * D + c, f.half_params);
  }
  int64_t e = (n * f.T + pg * G + chunk * 16) * D + c0;
#pragma unroll
  for (int i = 0; i < 16; ++i, e += D) {
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t code = ((lw[j][(i * BITS) / 32] >> ((i * BITS) % 32)) & ((1u << BITS) - 1u)) |
                            (((hw[j] >> (2 * i)) & 3u) << BITS);
      y[j] = __fadd_rn(__fmul_rn(ucode_float(code), sc[j]), ze[j]);  // KvlabRecipe::asym_dequant
    }
    if constexpr (F16OUT) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + e) = make_uint4(
          half2_bits(y[0], y[1]), half2_bits(y[2], y[3]), half2_bits(y[4], y[5]), half2_bits(y[6], y[7]));
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(out) + e) = make_float4(y[0], y[1], y[2], y[3]);
    }
  }
}

// Eligibility of boost_quant_radix (V = 2) and boost_dequant_regs (V = 4 or 8).
bool boost_fast_ok(const DevFormat& f, int V, const void* x, const KernelConfig& cfg) {
  if (!cfg.fast_kernels) return false;
  if (f.bits != 2 && f.bits != 4) return false;
  if (f.G % 16 != 0 || f.T % 16 != 0 || f.D % V != 0 || f.D % 2 != 0 || f.D > 256) return false;
  if (f.N * f.T * f.D >= (int64_t(1) << 35)) return false;  // 32-bit thread indices in boost_dequant_regs
  return x == nullptr || (reinterpret_cast<uintptr_t>(x) % 16) == 0;
}

template <class In>
const char* quantize_boost_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                             const KernelConfig& cfg) {
  if (boost_fast_ok(f, 2, x, cfg)) {
    const bool direct = cfg.boost_pairs && cfg.boost_direct && f.D == 128 && f.G == 128;
    const BoostRadixSmem b = boost_radix_smem<In>(f, direct);
    if (b.bytes <= kMaxTileSmem) {
      const int mm = cfg.hw_minmax ? 1 : 0;
      const int fd = cfg.fast_div ? 1 : 0;
      auto go = [&](auto kern) {
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b.bytes);
        kern<<<(unsigned)(f.N * f.groups), 256, b.bytes, s>>>(x, f, q, b.tile, mm, fd);
      };
      if (direct) {
        if (f.bits == 2)
          go(boost_quant_radix<In, 2, true, 128, true>);
        else
          go(boost_quant_radix<In, 4, true, 128, true>);
      } else if (cfg.boost_pairs && f.D == 128) {
        if (f.bits == 2)
          go(boost_quant_radix<In, 2, true, 128>);
        else
          go(boost_quant_radix<In, 4, true, 128>);
      } else if (cfg.boost_pairs) {
        if (f.bits == 2)
          go(boost_quant_radix<In, 2, true, 0>);
        else
          go(boost_quant_radix<In, 4, true, 0>);
      } else if (f.bits == 2) {
        go(boost_quant_radix<In, 2, false, 0>);
      } else {
        go(boost_quant_radix<In, 4, false, 0>);
      }
      check_launch("boost_quant_radix");
      return direct ? "radix-direct" : cfg.boost_pairs ? "radix-pairs" : "radix";
    }
  }
  const BoostSmem bs = boost_smem(f);
  if (bs.bytes > kMaxTileSmem)
    throw std::runtime_error("kvlab-gpu: boost page of " + std::to_string(f.G) + " x " + std::to_string(f.D) +
                             " does not fit shared memory; use a smaller page (group)");
  cudaFuncSetAttribute(boost_quant_page<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bs.bytes);
  boost_quant_page<In><<<(unsigned)(f.N * f.groups), 256, bs.bytes, s>>>(x, f, q, bs);
  check_launch("boost_quant_page");
  return "page";
}

}  // namespace

const char* quantize_boost(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                           const KernelConfig& cfg) {
  if (in == InType::F16) return quantize_boost_t(f, static_cast<const uint16_t*>(x), q, s, cfg);
  return quantize_boost_t(f, static_cast<const float*>(x), q, s, cfg);
}

const char* dequantize_boost(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                             const KernelConfig& cfg) {
  if ((o == OutType::F32 && boost_fast_ok(f, 4, nullptr, cfg)) ||
      (o == OutType::F16 && boost_fast_ok(f, 8, nullptr, cfg))) {
    const int V = o == OutType::F32 ? 4 : 8;
    const int tl = kDequantTokenLanesLog2;
    const int64_t tcl = int64_t(1) << tl;
    const int64_t threads = f.N * f.groups * ((f.G / 16 + tcl - 1) / tcl) * tcl * (f.D / V);
    const unsigned grid = (unsigned)cdiv(threads, 256);
    if (o == OutType::F32) {
      if (f.bits == 2)
        boost_dequant_regs<4, 2, false><<<grid, 256, 0, s>>>(f, q, out, tl);
      else
        boost_dequant_regs<4, 4, false><<<grid, 256, 0, s>>>(f, q, out, tl);
    } else {
      if (f.bits == 2)
        boost_dequant_regs<8, 2, true><<<grid, 256, 0, s>>>(f, q, out, tl);
      else
        boost_dequant_regs<8, 4, true><<<grid, 256, 0, s>>>(f, q, out, tl);
    }
    check_launch("boost_dequant_regs");
    return "regs";
  }
  const BoostSmem bs = boost_smem(f);
  const int smem = (int)(((f.D + 15) / 16) * 16 + f.D * bs.spl + std::max(f.k, 1) * bs.sph);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(boost_dequant_page, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  boost_dequant_page<<<(unsigned)(f.N * f.groups), 256, smem, s>>>(f, q, out, o, bs);
  check_launch("boost_dequant_page");
  return "page";
}

}  // namespace kvlab::gpu
