// Scaled floating-point formats on the GPU: FP8 (E4M3/E5M2, fp32 scales per tensor, head or
// channel) with the hardware conversion, NVFP4 and MXFP4 with the soft E2M1 conversion (no FP4
// instruction before sm_100). Every element goes through core's float_format.h recipe, so the
// bytes are the CPU reference's (kvlab-gpu validate compares them).
#include <type_traits>

#include "fastq.cuh"
#include "tile.cuh"

namespace kvlab::gpu {
namespace {

// ---- Loads of 8 consecutive elements (i % 8 == 0; the row starts are 16- or 32-byte aligned).
__device__ __forceinline__ void load8(const uint16_t* x, int64_t i, float v[8]) {
  const uint4 r = *reinterpret_cast<const uint4*>(x + i);
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = half_to_float((uint16_t)(w[k] & 0xffffu));
    v[2 * k + 1] = half_to_float((uint16_t)(w[k] >> 16));
  }
}
__device__ __forceinline__ void load8(const float* x, int64_t i, float v[8]) {
  const float4 a = *reinterpret_cast<const float4*>(x + i), b = *reinterpret_cast<const float4*>(x + i + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(uint16_t* out, int64_t i, const float v[8]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = float_to_half(v[2 * k]) | ((uint32_t)float_to_half(v[2 * k + 1]) << 16);
  *reinterpret_cast<uint4*>(out + i) = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void store_out(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store_out(uint16_t* out, int64_t i, float v) { out[i] = float_to_half(v); }

// |x| as ordered bits: non-negative floats order like their bit patterns (-0 becomes +0, as the
// CPU's f_max(+0, -0) = +0).
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// ---- Dynamic scales: absmax per slot (atomicMax on the bits), then the scale in place.
// Magnitudes of 32-bit words: fp16 as two packed 16-bit magnitudes (for finite x their bits order
// like |x|; the callers reject non-finite input), fp32 as |x|'s bits.
__device__ __forceinline__ uint32_t mag_max(const uint16_t*, uint32_t m, uint32_t w) {
  return __vmaxu2(m, w & 0x7fff7fffu);
}
__device__ __forceinline__ uint32_t mag_max(const float*, uint32_t m, uint32_t w) {
  return max(m, w & 0x7fffffffu);
}
__device__ __forceinline__ uint32_t elem_bits(const uint16_t* p, int64_t i) { return p[i]; }
__device__ __forceinline__ uint32_t elem_bits(const float* p, int64_t i) { return __float_as_uint(p[i]); }
// the accumulator as |x|'s fp32 bits (fp16: the larger magnitude, converted exactly)
__device__ __forceinline__ unsigned mag_bits(const uint16_t*, uint32_t m) {
  return abs_bits(half_to_float((uint16_t)max(m & 0xffffu, m >> 16)));
}
__device__ __forceinline__ unsigned mag_bits(const float*, uint32_t m) { return m; }

// S slices of len elements, slot n per slice (scale=head: a head; one scale: the whole tensor).
// Lanes read 16-byte vectors, U of them loaded before any is reduced; the elements before a
// slice's first 16-byte boundary and after its last whole vector go to block x = 0. A block
// reduces in shared memory and makes one atomicMax. (The kernel this replaced loaded one element
// per lane and step, too few bytes in flight: 42.5% of copy.)
template <class In>
__global__ void absmax_vec(const In* x, int64_t S, int64_t len, unsigned* slots) {
  constexpr int V = 16 / (int)sizeof(In), U = 4;
  __shared__ unsigned warp_max[32];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t n = blockIdx.y; n < S; n += gridDim.y) {
    const In* p = x + n * len;
    const int64_t off = (int64_t)(reinterpret_cast<uintptr_t>(p) / sizeof(In) % V);
    const int64_t a0 = min(len, (V - off) % V), nv = (len - a0) / V, a1 = a0 + nv * V;
    uint32_t m = 0;
    if (blockIdx.x == 0 && threadIdx.x < a0) m = mag_max(p, m, elem_bits(p, threadIdx.x));
    if (blockIdx.x == 0 && threadIdx.x < len - a1) m = mag_max(p, m, elem_bits(p, a1 + threadIdx.x));
    const uint4* v = reinterpret_cast<const uint4*>(p + a0);
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < nv; i0 += U * stride) {
      uint4 r[U];
#pragma unroll
      for (int j = 0; j < U; ++j) r[j] = i0 + j * stride < nv ? v[i0 + j * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < U; ++j)
        m = mag_max(p, mag_max(p, mag_max(p, mag_max(p, m, r[j].x), r[j].y), r[j].z), r[j].w);
    }
    unsigned b = mag_bits(p, m);
    for (int o = 16; o; o >>= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = b;
    __syncthreads();
    if (threadIdx.x < 32) {
      b = threadIdx.x < blockDim.x / 32 ? warp_max[threadIdx.x] : 0u;
      for (int o = 16; o; o >>= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, o));
      if (threadIdx.x == 0) atomicMax(&slots[n], b);
    }
    __syncthreads();  // warp_max is reused by the next slice
  }
}

// Per (slice, channel): threads over channels, a chunk of tokens per block.
template <class In>
__global__ void absmax_channels(const In* x, FloatLayout L, unsigned* slots, int64_t chunk) {
  for (int64_t n = blockIdx.y; n < L.N; n += gridDim.y) {
    const int64_t t0 = blockIdx.x * chunk, t1 = min(L.T, t0 + chunk);
    for (int64_t c = threadIdx.x; c < L.D; c += blockDim.x) {
      unsigned m = 0;
      for (int64_t t = t0; t < t1; ++t) m = max(m, abs_bits(load_in(x, (n * L.T + t) * L.D + c)));
      atomicMax(&slots[n * L.D + c], m);
    }
  }
}

__global__ void finish_scales(FloatLayout L, float* scale) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= L.n_scales()) return;
  const float a = scale[i];  // the absmax, written as bits
  scale[i] = L.format == FloatFormat::NVFP4 ? nvfp4_tensor_scale(a) : fp8_scale(a, L.e5m2());
}

// ---- FP8: thread (lane x, token lane y) holds 8 channels of a token; blockDim.x = D / 8.
template <class In, bool PerChannel, bool E5>
__global__ void fp8_quant_rows(const In* x, FloatLayout L, const float* scale, uint8_t* codes) {
  const int64_t c = threadIdx.x * 8;
  for (int64_t n = blockIdx.y; n < L.N; n += gridDim.y) {
    float s[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) s[k] = scale[PerChannel ? n * L.D + c + k : L.scale_index(n, 0)];
    for (int64_t t = blockIdx.x * (int64_t)blockDim.y + threadIdx.y; t < L.T;
         t += (int64_t)gridDim.x * blockDim.y) {
      const int64_t i = (n * L.T + t) * L.D + c;
      float v[8];
      load8(x, i, v);
      uint32_t w[2] = {0, 0};
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k / 4] |= (uint32_t)fp8_code(v[k], s[k], E5) << (8 * (k % 4));
      *reinterpret_cast<uint2*>(codes + i) = make_uint2(w[0], w[1]);
    }
  }
}

// Four FP8 codes (byte j of w) as floats, two per paired conversion (exact, as fp8_to_float;
// validate's fp8-cvt row checks every 16-bit pair).
__device__ __forceinline__ void fp8x4_to_float(uint32_t w, bool e5, float v[4]) {
  const __nv_fp8_interpretation_t t = e5 ? __NV_E5M2 : __NV_E4M3;
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), t);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), t);
  v[0] = half_to_float(lo.x), v[1] = half_to_float(lo.y), v[2] = half_to_float(hi.x),
  v[3] = half_to_float(hi.y);
}

// A lane's unit is the E values of one 16-byte store (4 fp32 or 8 fp16) and their E code bytes,
// consecutive lanes on consecutive units of a slice, U units loaded before any is stored (the
// rows kernel this replaced wrote fp32 as two 16-byte stores at a 32-byte lane stride: 48-64% of
// copy). blockDim.x is a multiple of D / E, so a lane's channels, and its scales, stay the same
// over its units of a slice.
template <class Out, bool PerChannel, bool E5>
__global__ void fp8_dequant_vec(const uint8_t* codes, FloatLayout L, const float* scale, Out* out) {
  constexpr int E = 16 / (int)sizeof(Out), U = 4;
  using Word = std::conditional_t<E == 4, uint32_t, uint2>;  // the unit's E codes
  const int64_t nu = L.T * L.D / E, stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t c = (int64_t)(threadIdx.x % (unsigned)(L.D / E)) * E;
  for (int64_t n = blockIdx.y; n < L.N; n += gridDim.y) {
    float s[E];
#pragma unroll
    for (int k = 0; k < E; ++k) s[k] = scale[PerChannel ? n * L.D + c + k : L.scale_index(n, 0)];
    const Word* cw = reinterpret_cast<const Word*>(codes + n * L.T * L.D);
    Out* o = out + n * L.T * L.D;
    for (int64_t u0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u0 < nu; u0 += U * stride) {
      Word w[U];
#pragma unroll
      for (int j = 0; j < U; ++j) w[j] = u0 + j * stride < nu ? cw[u0 + j * stride] : Word{};
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const int64_t u = u0 + j * stride;
        if (u >= nu) break;
        float v[8];
        if constexpr (E == 4) {
          fp8x4_to_float(w[j], E5, v);
        } else {
          fp8x4_to_float(w[j].x, E5, v);
          fp8x4_to_float(w[j].y, E5, v + 4);
        }
#pragma unroll
        for (int k = 0; k < E; ++k) v[k] = f_mul(v[k], s[k]);  // fp8_dequant's product
        if constexpr (E == 4)
          *reinterpret_cast<float4*>(o + u * E) = make_float4(v[0], v[1], v[2], v[3]);
        else
          store8(o, u * E, v);
      }
    }
  }
}

// Any D: one element per step.
template <class In>
__global__ void fp8_quant_any(const In* x, FloatLayout L, const float* scale, uint8_t* codes) {
  const int64_t total = L.N * L.T * L.D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    codes[i] = fp8_code(load_in(x, i), scale[L.scale_index(i / (L.T * L.D), i % L.D)], L.e5m2());
}
template <class Out>
__global__ void fp8_dequant_any(const uint8_t* codes, FloatLayout L, const float* scale, Out* out) {
  const int64_t total = L.N * L.T * L.D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    store_out(out, i, fp8_dequant(codes[i], scale[L.scale_index(i / (L.T * L.D), i % L.D)], L.e5m2()));
}

// ---- FP4: one thread per block of B channels of a token.
__device__ __forceinline__ float fp4_block_scale(FloatLayout L, float amax, float s_t, uint8_t* code) {
  if (L.format == FloatFormat::NVFP4) {
    *code = nvfp4_block_code(amax, s_t);
    return nvfp4_block_scale(*code, s_t);
  }
  *code = mxfp4_block_code(amax);
  return mxfp4_block_scale(*code);
}

// ---- FP4 fast code (KernelConfig::fast_div), the same bytes as fp4_code (validate rows
// fp4-code and the fp4 formats): the recipe's IEEE division and integer E2M1 encoding cost about
// 35 instructions per element, which left the kernel issue-bound at 38% of copy.
//  - Quotient. MXFP4: S is a power of two, so RN(1/S) is exact and x * (1/S) is RN(x/S) (one
//    rounding of the same real). NVFP4: fast_quot (fastq.cuh) equals __fdiv_rn(|x|, S) for
//    |x/S| >= 1/4 when S is in [2^-100, 2^100] and |x/S| < 2^127 (fastq.cuh, case B, proven by the
//    fastdiv rows); for |x/S| < 1/4 the recipe's code is a signed zero and fast_quot lies within
//    a relative 2^-45 of x/S (q0 and rem carry relative errors of 2^-23 that the correction
//    step cancels to second order), so it rounds to at most 1/4, whose E2M1 code is 0 too.
//    Blocks outside those bounds take the recipe; a zero S gives code 0, as fp4_code.
//  - Code. e2m1_mag rounds |q| to E2M1 with two float tricks (checked against float_to_fp4 on
//    all 2^32 floats but NaN); the sign bit is x's, as RN(x/S) keeps it (also for -0).
__device__ __forceinline__ uint32_t e2m1_mag(float q) {
  q = fminf(q, 6.0f);  // q > 5 rounds to 6 (code 7) either way; infinities saturate the same
  // below 1: the grid 0, 0.5, 1 is that of floats in [2^22, 2^23), ties to even included
  const uint32_t sub = __float_as_uint(__fadd_rn(q, 4194304.0f)) - 0x4A800000u;
  // 1..6: round the float to one mantissa bit (ties to even; a carry moves to the next binade),
  // then rebias: 1.0 (exponent 127, bit 0) is code 2
  const uint32_t u = __float_as_uint(q);
  const uint32_t nrm = ((u + 0x1FFFFFu + ((u >> 22) & 1u)) >> 22) - 252u;
  return q < 1.0f ? sub : nrm;
}
__device__ __forceinline__ uint32_t fp4_sign(float x) { return (__float_as_uint(x) >> 28) & 8u; }

// The recipe's code, not inlined, for the rare blocks outside the fast bounds.
static __device__ __noinline__ uint32_t fp4_code_slow(float x, float S) { return fp4_code(x, S); }

// Per block: how its codes are computed (0: all zero, 1: fast, 2: recipe) and RN(1/S).
struct Fp4Step {
  int mode;
  float r;
};
__device__ __forceinline__ Fp4Step fp4_step(FloatLayout L, float S, float amax) {
  if (S == 0.0f) return {0, 0.0f};
  const float r = __frcp_rn(S);  // exact for MXFP4's powers of two, subnormal 2^-127 included
  if (L.format == FloatFormat::MXFP4) return {1, r};
  const bool fast = S >= kFastScaleMin && S <= kFastScaleMax && __fmul_rn(amax, r) <= 0x1p100f;
  return {fast ? 1 : 2, r};
}
template <bool MX>
__device__ __forceinline__ uint32_t fp4_fast_code(float x, float S, float r) {
  const float a = fabsf(x);
  return fp4_sign(x) | e2m1_mag(MX ? __fmul_rn(a, r) : fast_quot(a, S, r));
}

// Full, aligned blocks (B divides D): vector loads, B/2 code bytes stored at once. FAST: the
// code step above; else the recipe per element (the ieee-div variant: the before of the bench).
template <class In, int B, bool FAST>
__global__ void fp4_quant_blocks(const In* x, FloatLayout L, const float* scale, uint8_t* codes,
                                 uint8_t* bscale) {
  constexpr bool MX = B == 32;
  const int64_t nb = L.N * L.T * (L.D / B);
  const float s_t = scale[0];  // NVFP4's tensor scale (MXFP4: unused)
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb;
       b += (int64_t)gridDim.x * blockDim.x) {
    float v[B];
#pragma unroll
    for (int k = 0; k < B; k += 8) load8(x, b * B + k, v + k);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < B; ++k) amax = FAST ? fmaxf(amax, fabsf(v[k])) : f_max(amax, f_abs(v[k]));
    uint8_t code;
    const float S = fp4_block_scale(L, amax, s_t, &code);
    uint32_t w[B / 8];
    const Fp4Step st = FAST ? fp4_step(L, S, amax) : Fp4Step{2, 0.0f};
    if (st.mode == 1) {
#pragma unroll
      for (int k = 0; k < B / 8; ++k) {
        uint32_t word = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) word |= fp4_fast_code<MX>(v[8 * k + j], S, st.r) << (4 * j);
        w[k] = word;
      }
    } else if (st.mode == 0) {
#pragma unroll
      for (int k = 0; k < B / 8; ++k) w[k] = 0;
    } else {
#pragma unroll
      for (int k = 0; k < B / 8; ++k) {
        uint32_t word = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          word |= (FAST ? fp4_code_slow(v[8 * k + j], S) : (uint32_t)fp4_code(v[8 * k + j], S)) << (4 * j);
        w[k] = word;
      }
    }
    if constexpr (B == 16)
      *reinterpret_cast<uint2*>(codes + b * 8) = make_uint2(w[0], w[1]);
    else
      *reinterpret_cast<uint4*>(codes + b * 16) = make_uint4(w[0], w[1], w[2], w[3]);
    bscale[b] = code;
  }
}

// Four E2M1 codes (bits 4j..4j+3 of w, sign in bit 3) as two fp16x2 words, exactly: every E2M1
// magnitude (0, 0.5, 1, 1.5, 2, 3, 4, 6) is an fp16 whose low byte is 0, so one byte permute
// looks the four high bytes up (the table is the 8-byte pool), a second pair places them, and
// the sign bits move to bits 15 and 31. The values equal fp4_to_float (validate row fp4-code
// checks every 16-bit w).
__device__ __forceinline__ void e2m1x4_to_half2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t mag = __byte_perm(0x3E3C3800u, 0x46444240u, w & 0x7777u);
  lo = __byte_perm(mag, 0u, 0x1404u) | ((w << 12) & 0x8000u) | ((w << 24) & 0x80000000u);
  hi = __byte_perm(mag, 0u, 0x3424u) | ((w << 4) & 0x8000u) | ((w << 16) & 0x80000000u);
}
__device__ __forceinline__ void e2m1x4_to_float(uint32_t w, float v[4]) {
  uint32_t lo, hi;
  e2m1x4_to_half2(w, lo, hi);
  v[0] = half_to_float((uint16_t)(lo & 0xffffu)), v[1] = half_to_float((uint16_t)(lo >> 16));
  v[2] = half_to_float((uint16_t)(hi & 0xffffu)), v[3] = half_to_float((uint16_t)(hi >> 16));
}

// Full, aligned blocks (B divides D). A thread's unit is the E elements of one 16-byte store (4
// fp32 or 8 fp16) and its E/2 code bytes, consecutive lanes on consecutive units, so every warp
// load and store is one contiguous run; U units per thread are loaded before any is stored.
// (One thread per block, as before, wrote B/E stores at a B-element lane stride: 16-68% of copy.)
template <class Out, int B>
__global__ void fp4_dequant_vec(const uint8_t* codes, const uint8_t* bscale, FloatLayout L,
                                const float* scale, Out* out) {
  constexpr int E = 16 / (int)sizeof(Out), U = 4;
  using Word = std::conditional_t<E == 4, uint16_t, uint32_t>;  // the unit's E codes
  const int64_t nu = L.N * L.T * L.D / E, stride = (int64_t)gridDim.x * blockDim.x;
  const float s_t = scale[0];
  for (int64_t u0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u0 < nu; u0 += U * stride) {
    uint32_t w[U];
    uint8_t sc[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t u = u0 + j * stride;
      w[j] = u < nu ? reinterpret_cast<const Word*>(codes)[u] : 0u;
      sc[j] = u < nu ? bscale[u / (B / E)] : 0u;
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t u = u0 + j * stride;
      if (u >= nu) break;
      const float S = B == 16 ? nvfp4_block_scale(sc[j], s_t) : mxfp4_block_scale(sc[j]);
      float v[8];
#pragma unroll
      for (int k = 0; k < E; k += 4) e2m1x4_to_float(w[j] >> (4 * k), v + k);
#pragma unroll
      for (int k = 0; k < E; ++k) v[k] = f_mul(v[k], S);  // fp4_dequant's product
      if constexpr (E == 4)
        *reinterpret_cast<float4*>(out + u * E) = make_float4(v[0], v[1], v[2], v[3]);
      else
        store8(out, u * E, v);
    }
  }
}

// Any D (short last blocks, odd D): scalar loads, code bytes built in pairs within the block.
template <class In>
__global__ void fp4_quant_any(const In* x, FloatLayout L, const float* scale, uint8_t* codes,
                              uint8_t* bscale) {
  const int64_t per_row = L.blocks(), nb = L.N * L.T * per_row;
  const int B = L.block();
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb;
       b += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = b / per_row, c0 = (b % per_row) * B, c1 = min(L.D, c0 + B);
    const In* row = x + r * L.D;
    float amax = 0.0f;
    for (int64_t c = c0; c < c1; ++c) amax = f_max(amax, f_abs(load_in(row, c)));
    uint8_t code;
    const float S = fp4_block_scale(L, amax, scale[0], &code);
    for (int64_t c = c0; c < c1; c += 2) {
      const uint32_t lo = fp4_code(load_in(row, c), S);
      const uint32_t hi = c + 1 < c1 ? fp4_code(load_in(row, c + 1), S) : 0u;
      codes[r * L.row_bytes() + c / 2] = (uint8_t)(lo | (hi << 4));
    }
    bscale[b] = code;
  }
}

template <class Out>
__global__ void fp4_dequant_any(const uint8_t* codes, const uint8_t* bscale, FloatLayout L,
                                const float* scale, Out* out) {
  const int64_t total = L.N * L.T * L.D;
  const int B = L.block();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / L.D, c = i % L.D;
    const uint8_t code = bscale[r * L.blocks() + c / B];
    const float S =
        L.format == FloatFormat::NVFP4 ? nvfp4_block_scale(code, scale[0]) : mxfp4_block_scale(code);
    const uint8_t nib = (uint8_t)((codes[r * L.row_bytes() + c / 2] >> (4 * (c % 2))) & 0xfu);
    store_out(out, i, fp4_dequant(nib, S));
  }
}

// ---- Launch geometry.
unsigned stride_grid(int64_t work, int threads) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>(cdiv(work, threads), (int64_t)sm_count() * 32));
}
unsigned slice_grid_y(int64_t N) { return (unsigned)std::min<int64_t>(N, 65535); }
// FP8 rows kernels: D / 8 lanes across, enough token lanes for 256 threads.
bool fp8_rows_ok(const FloatLayout& L) { return L.D % 8 == 0 && L.D / 8 <= 256; }
dim3 fp8_rows_block(const FloatLayout& L) {
  const int x = (int)(L.D / 8);
  return dim3(x, std::max(1, 256 / x));
}
dim3 fp8_rows_grid(const FloatLayout& L, dim3 block) {
  const int64_t per_slice = cdiv(L.T, block.y);
  const int64_t want = cdiv((int64_t)sm_count() * 8, std::min<int64_t>(L.N, 65535));
  return dim3((unsigned)std::max<int64_t>(1, std::min(per_slice, want)), slice_grid_y(L.N));
}

template <class In>
void scales_as(const FloatLayout& L, const In* x, DevFloat q, cudaStream_t s) {
  const int64_t ns = L.n_scales();
  if (ns == 0) return;
  if (cudaMemsetAsync(q.scale, 0, ns * sizeof(float), s) != cudaSuccess) check_launch("float scales memset");
  unsigned* slots = reinterpret_cast<unsigned*>(q.scale);
  if (!L.fp4() && L.scale == FloatScale::Channel) {
    const int64_t chunk = 64;
    absmax_channels<In>
        <<<dim3((unsigned)cdiv(L.T, chunk), slice_grid_y(L.N)), 128, 0, s>>>(x, L, slots, chunk);
  } else {
    // scale=head: a slot per slice; one scale (tensor, NVFP4): the whole tensor as one slice
    const int64_t S = ns == 1 ? 1 : L.N, len = L.N * L.T * L.D / S;
    const int64_t per_block = 4 * (16 / (int64_t)sizeof(In)) * 256;  // elements of one pass
    const unsigned gx = (unsigned)std::max<int64_t>(
        1, std::min<int64_t>(cdiv(len, per_block), cdiv((int64_t)sm_count() * 16, S)));
    absmax_vec<In><<<dim3(gx, slice_grid_y(S)), 256, 0, s>>>(x, S, len, slots);
  }
  check_launch("float absmax");
  finish_scales<<<(unsigned)cdiv(ns, 256), 256, 0, s>>>(L, q.scale);
  check_launch("finish_scales");
}

template <class In>
const char* quantize_as(const FloatLayout& L, const In* x, DevFloat q, cudaStream_t s,
                        const KernelConfig& cfg) {
  if (L.fp4()) {
    const int64_t nb = L.N * L.T * L.blocks();
    const unsigned g = stride_grid(nb, 256);
    if (L.D % L.block() == 0) {
      const bool nv = L.format == FloatFormat::NVFP4;
      if (nv && cfg.fast_div)
        fp4_quant_blocks<In, 16, true><<<g, 256, 0, s>>>(x, L, q.scale, q.codes, q.block_scale);
      else if (nv)
        fp4_quant_blocks<In, 16, false><<<g, 256, 0, s>>>(x, L, q.scale, q.codes, q.block_scale);
      else if (cfg.fast_div)
        fp4_quant_blocks<In, 32, true><<<g, 256, 0, s>>>(x, L, q.scale, q.codes, q.block_scale);
      else
        fp4_quant_blocks<In, 32, false><<<g, 256, 0, s>>>(x, L, q.scale, q.codes, q.block_scale);
      check_launch("fp4_quant_blocks");
      return cfg.fast_div ? "fp4-fast" : "fp4-blocks";
    }
    fp4_quant_any<In><<<g, 256, 0, s>>>(x, L, q.scale, q.codes, q.block_scale);
    check_launch("fp4_quant_any");
    return "fp4-any";
  }
  if (!fp8_rows_ok(L)) {
    fp8_quant_any<In><<<stride_grid(L.N * L.T * L.D, 256), 256, 0, s>>>(x, L, q.scale, q.codes);
    check_launch("fp8_quant_any");
    return "fp8-any";
  }
  const dim3 block = fp8_rows_block(L), grid = fp8_rows_grid(L, block);
  const bool ch = L.scale == FloatScale::Channel;
  if (ch && L.e5m2())
    fp8_quant_rows<In, true, true><<<grid, block, 0, s>>>(x, L, q.scale, q.codes);
  else if (ch)
    fp8_quant_rows<In, true, false><<<grid, block, 0, s>>>(x, L, q.scale, q.codes);
  else if (L.e5m2())
    fp8_quant_rows<In, false, true><<<grid, block, 0, s>>>(x, L, q.scale, q.codes);
  else
    fp8_quant_rows<In, false, false><<<grid, block, 0, s>>>(x, L, q.scale, q.codes);
  check_launch("fp8_quant_rows");
  return "fp8-rows";
}

template <class Out>
const char* dequantize_as(const FloatLayout& L, DevFloat q, Out* out, cudaStream_t s) {
  if (L.fp4()) {
    if (L.D % L.block() == 0) {
      const unsigned g = stride_grid(cdiv(L.N * L.T * L.D / (16 / (int64_t)sizeof(Out)), 4), 256);
      if (L.format == FloatFormat::NVFP4)
        fp4_dequant_vec<Out, 16><<<g, 256, 0, s>>>(q.codes, q.block_scale, L, q.scale, out);
      else
        fp4_dequant_vec<Out, 32><<<g, 256, 0, s>>>(q.codes, q.block_scale, L, q.scale, out);
      check_launch("fp4_dequant_vec");
      return "fp4-vec";
    }
    fp4_dequant_any<Out>
        <<<stride_grid(L.N * L.T * L.D, 256), 256, 0, s>>>(q.codes, q.block_scale, L, q.scale, out);
    check_launch("fp4_dequant_any");
    return "fp4-any";
  }
  constexpr int64_t E = 16 / sizeof(Out);  // values per 16-byte store
  if (L.D % E != 0 || L.D / E > 256) {
    fp8_dequant_any<Out><<<stride_grid(L.N * L.T * L.D, 256), 256, 0, s>>>(q.codes, L, q.scale, out);
    check_launch("fp8_dequant_any");
    return "fp8-any";
  }
  // whole token rows per block (a multiple of D / E lanes), enough blocks for 32 per SM
  const int64_t lanes = L.D / E, threads = 256 / lanes * lanes;
  const dim3 grid((unsigned)std::max<int64_t>(
                      1, std::min(cdiv(L.T * lanes, 4 * threads), cdiv((int64_t)sm_count() * 32, L.N))),
                  slice_grid_y(L.N));
  const bool ch = L.scale == FloatScale::Channel;
  if (ch && L.e5m2())
    fp8_dequant_vec<Out, true, true><<<grid, (unsigned)threads, 0, s>>>(q.codes, L, q.scale, out);
  else if (ch)
    fp8_dequant_vec<Out, true, false><<<grid, (unsigned)threads, 0, s>>>(q.codes, L, q.scale, out);
  else if (L.e5m2())
    fp8_dequant_vec<Out, false, true><<<grid, (unsigned)threads, 0, s>>>(q.codes, L, q.scale, out);
  else
    fp8_dequant_vec<Out, false, false><<<grid, (unsigned)threads, 0, s>>>(q.codes, L, q.scale, out);
  check_launch("fp8_dequant_vec");
  return "fp8-vec";
}

}  // namespace

void float_scales(const FloatLayout& L, const void* x, InType in, DevFloat q, cudaStream_t s) {
  if (in == InType::F16)
    scales_as(L, static_cast<const uint16_t*>(x), q, s);
  else
    scales_as(L, static_cast<const float*>(x), q, s);
}

const char* quantize_float(const FloatLayout& L, const void* x, InType in, DevFloat q, cudaStream_t s,
                           const KernelConfig& cfg) {
  return in == InType::F16 ? quantize_as(L, static_cast<const uint16_t*>(x), q, s, cfg)
                           : quantize_as(L, static_cast<const float*>(x), q, s, cfg);
}

const char* dequantize_float(const FloatLayout& L, DevFloat q, void* out, OutType o, cudaStream_t s) {
  if (o == OutType::Codes)
    throw std::invalid_argument("kvlab-gpu: float formats have no integer code output");
  return o == OutType::F16 ? dequantize_as(L, q, static_cast<uint16_t*>(out), s)
                           : dequantize_as(L, q, static_cast<float*>(out), s);
}

// ---- Proof: the hardware FP8 conversions against minifloat.h's integer code, on the device.
namespace {

__global__ void fp8_cvt_check(unsigned long long* bad, unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // decoding: all 256 codes of each format (NaN codes excluded)
  for (uint64_t i = tid; i < 512; i += stride) {
    const uint8_t c = (uint8_t)i;
    const bool e5 = i >= 256;
    if (e5 ? (c & 0x7cu) == 0x7cu : (c & 0x7fu) == 0x7fu) continue;
    const float soft = e5 ? fp8_e5m2_to_float_soft(c) : fp8_e4m3_to_float_soft(c);
    nbad += float_bits(fp8_to_float(c, e5)) != float_bits(soft);
    ++nchk;
  }
  // the dequantize's paired decode (fp8x4_to_float) against the soft decode on every 16-bit pair
  // of codes, each format, NaN codes excluded: the pair in the low half, its sign-flipped copy in the high
  // half
  for (uint64_t i = tid; i < 2 * 65536u; i += stride) {
    const bool e5 = i >= 65536u;
    const uint32_t w = (uint32_t)(i & 0xffffu), word = w | ((w ^ 0x8080u) << 16);
    const uint32_t m = e5 ? 0x7cu : 0x7fu;
    if ((w & m) == m || ((w >> 8) & m) == m) continue;
    float v[4];
    fp8x4_to_float(word, e5, v);
    for (int j = 0; j < 4; ++j) {
      const uint8_t c = (uint8_t)(word >> (8 * j));
      nbad += float_bits(v[j]) != float_bits(e5 ? fp8_e5m2_to_float_soft(c) : fp8_e4m3_to_float_soft(c));
    }
    nchk += 4;
  }
  // every fp16 value but NaN: through the float cvt, and the paired f16x2 cvt (both lanes)
  for (uint64_t i = tid; i < 65536u; i += stride) {
    const uint16_t h = (uint16_t)i;
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;
    const float f = half_to_float(h);
    const uint32_t pair = (uint32_t)h | ((uint32_t)(h ^ 0x8000u) << 16);  // (h, -h)
    __half2_raw raw;
    raw.x = (unsigned short)(pair & 0xffffu);
    raw.y = (unsigned short)(pair >> 16);
    const uint16_t p4 = __nv_cvt_halfraw2_to_fp8x2(raw, __NV_SATFINITE, __NV_E4M3);
    const uint16_t p5 = __nv_cvt_halfraw2_to_fp8x2(raw, __NV_SATFINITE, __NV_E5M2);
    const uint8_t s4 = float_to_fp8_e4m3_soft(f), s5 = float_to_fp8_e5m2_soft(f);
    nbad += float_to_fp8(f, false) != s4;
    nbad += float_to_fp8(f, true) != s5;
    nbad += (uint8_t)(p4 & 0xffu) != s4;
    nbad += (uint8_t)(p4 >> 8) != float_to_fp8_e4m3_soft(-f);
    nbad += (uint8_t)(p5 & 0xffu) != s5;
    nbad += (uint8_t)(p5 >> 8) != float_to_fp8_e5m2_soft(-f);
    nchk += 6;
  }
  // every float bit pattern but NaN, both formats
  for (uint64_t i = tid; i < (1ull << 32); i += stride) {
    const uint32_t u = (uint32_t)i;
    if ((u & 0x7fffffffu) > 0x7f800000u) continue;
    const float f = bits_float(u);
    nbad += float_to_fp8(f, false) != float_to_fp8_e4m3_soft(f);
    nbad += float_to_fp8(f, true) != float_to_fp8_e5m2_soft(f);
    nchk += 2;
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

// The FP4 fast code against the recipe: (1) e2m1_mag with the sign bit vs float_to_fp4 on every
// float but NaN; (2) MXFP4: every scale code, 2^16 random x each (all exponents and signs, zeros
// included); (3) NVFP4: 2^30 random (x, S) with S in [2^-100, 2^100] and x/S spread over
// [2^-40, 8) with exact E2M1 midpoints and their neighbours, both signs; (4) the dequantize's
// decode of four codes at once (e2m1x4_to_float) against fp4_to_float on every 16-bit word.
__device__ __forceinline__ uint32_t mix32(uint64_t z) {  // splitmix64's finaliser, high half
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

__global__ void fp4_code_check(unsigned long long* bad, unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (uint64_t i = tid; i < (1ull << 32); i += stride) {
    const uint32_t u = (uint32_t)i;
    if ((u & 0x7fffffffu) > 0x7f800000u) continue;
    const float f = bits_float(u);
    nbad += (fp4_sign(f) | e2m1_mag(fabsf(f))) != float_to_fp4(f);
    ++nchk;
  }
  for (uint64_t i = tid; i < 1ull << 16; i += stride) {
    float v[4];
    e2m1x4_to_float((uint32_t)i, v);
    for (int j = 0; j < 4; ++j)
      nbad += float_bits(v[j]) != float_bits(fp4_to_float((uint8_t)((i >> (4 * j)) & 0xfu)));
    nchk += 4;
  }
  for (uint64_t i = tid; i < 255ull << 16; i += stride) {
    const float S = mxfp4_block_scale((uint8_t)(i >> 16));
    const uint32_t h = mix32(i);
    const float x = (h & 0xffu) == 0 ? bits_float(h & 0x80000000u) : bits_float(h);
    if ((float_bits(x) & 0x7fffffffu) > 0x7f800000u) continue;
    nbad += fp4_fast_code<true>(x, S, __frcp_rn(S)) != fp4_code(x, S);
    ++nchk;
  }
  const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (uint64_t i = tid; i < (1ull << 30); i += stride) {
    const uint32_t h1 = mix32(2 * i + 7), h2 = mix32(2 * i + 8);
    // S: exponent in [-100, 99], random significand
    const float S = bits_float(((uint32_t)(27 + h1 % 200) << 23) | (h2 & 0x7fffffu));
    float t;
    switch ((h1 >> 8) & 3u) {
      case 0: t = (float)(h2 >> 8) * 0x1p-21f; break;  // [0, 8)
      case 1:
        t = bits_float(((uint32_t)(87 + (h2 >> 8) % 38) << 23) | ((h1 >> 10) & 0x7fffffu));
        break;    // [2^-40, 2^-2)
      default: {  // an E2M1 midpoint, a few ulps either side
        const float m = mids[(h2 >> 8) % 7];
        t = bits_float(float_bits(m) + ((h2 >> 16) % 9) - 4);
      }
    }
    const float x = __fmul_rn(t, S) * ((h1 >> 31) ? -1.0f : 1.0f);
    nbad += fp4_fast_code<false>(x, S, __frcp_rn(S)) != fp4_code(x, S);
    ++nchk;
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

}  // namespace

int64_t fp8_conversion_mismatches(int64_t* checked) {
  unsigned long long* d = nullptr;
  unsigned long long h[2] = {0, 0};
  if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) throw std::runtime_error("kvlab-gpu: cudaMalloc failed");
  cudaMemset(d, 0, sizeof(h));
  fp8_cvt_check<<<sm_count() * 8, 256>>>(d, d + 1);
  check_launch("fp8_cvt_check");
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: fp8_cvt_check: ") + cudaGetErrorString(e));
  *checked = (int64_t)h[1];
  return (int64_t)h[0];
}

int64_t fp4_code_mismatches(int64_t* checked) {
  unsigned long long* d = nullptr;
  unsigned long long h[2] = {0, 0};
  if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) throw std::runtime_error("kvlab-gpu: cudaMalloc failed");
  cudaMemset(d, 0, sizeof(h));
  fp4_code_check<<<sm_count() * 8, 256>>>(d, d + 1);
  check_launch("fp4_code_check");
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: fp4_code_check: ") + cudaGetErrorString(e));
  *checked = (int64_t)h[1];
  return (int64_t)h[0];
}

}  // namespace kvlab::gpu
