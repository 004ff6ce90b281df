// Device-only arithmetic of the register-tile and radix-page kernels: the same bytes as recipe.h's
// KvlabRecipe, with fewer and cheaper instructions. Every shortcut here is proven equal to the recipe on the
// device by `kvlab-gpu validate` (rows `fastdiv`, `minmax`, `fp16-cvt`) and argued below.
//
// 1. Quotient. The recipe's code is rint(a / s) (a = x - zero, or x for sym) with an IEEE
//    division, which costs every element MUFU.RCP, Newton steps, FCHK and a slow-path branch.
//    Per group we take r = RN(1/s) once (__frcp_rn) and per element
//        q0 = RN(a * r);  rem = RN(a - q0 * s) (one FMA);  q = RN(rem * r + q0) (one FMA).
//    This is Markstein's correction step. Markstein's theorem needs q0 within one ulp of a/s,
//    which RN(a * RN(1/s)) does not always satisfy, so the theorem alone is no proof; the proof
//    is exhaustive (validate --exhaustive-div): for all 2^23 x 2^23 significand pairs
//    a, s in [1, 2), fast_quot(a, s, RN(1/s)) == __fdiv_rn(a, s) bit for bit. Scaling a or s by
//    a power of two scales every intermediate exactly (q0, rem, q and RN(a/s)) as long as none
//    of them overflows or leaves the normal range inexactly, and the sign of a flips every
//    intermediate (round-to-nearest-even is symmetric), so that sweep covers every (a, s) with
//      (B) |a/s| >= 1/4, s in [2^-100, 2^100] and |a/s| < 2^127:
//          r in [2^-100, 2^100] is normal; q0 and q lie within a few ulps of a/s, so they are
//          normal and finite; rem is a multiple of 2^(e_a - 47) (e_a = exponent of a, at least
//          -102 because |a| >= s/4 >= 2^-102) and so is exact on the subnormal grid 2^-149 if it
//          falls below 2^-126, exactly as in the scaled [1, 2) case.
//      (A) |a/s| < 1/4: the recipe's RN(a/s) rounds to +-0 and gives code 0. The fast path also
//          gives |q| < 1/2, hence code 0: |q0| <= |a/s|(1 + 2^-24)^2 + 2^-150 < 0.2501;
//          |a - q0 s| = s |a/s - q0| <= s (2^-23 |a/s| + 2^-150), so with r <= (1 + 2^-24)/s
//          |rem * r| <= 2^-25 + 2^-149 / s < 2^-24 (s >= 2^-100) and |q| <= 0.2502.
//    The bound |a/s| < 2^31 holds for every element of every group whose stored params are
//    finite (a group with non-finite params fails the whole call, so its codes never leave):
//      asym, fp32 params: 0 <= a = RN(x - mn) <= RN(mx - mn) <= L * s * (1 + 2^-23), so
//        |a/s| <= L(1 + 2^-23) (s is normal on the fast path);
//      asym, fp16 params: s = rh(s32) >= s32 / 1.5 (s >= 2^-24 when non-zero, rh's error is
//        <= 2^-11 relative or 2^-25 absolute) and |mn - rh(mn)| <= 32 (|mn| <= 65520), so
//        |a/s| <= 1.5 L (1 + 2^-22) + 32.001 * 2^24 < 2^30;
//      sym: |x| <= absmax = Q * s32 (1 + 2^-23) and s >= s32 / 1.5 likewise: |a/s| <= 1.6 Q.
//    So the fast path is used for a whole group iff s is in [2^-100, 2^100] (NaN, inf, 0 and
//    tiny or huge scales take the recipe's code_of, IEEE division included, per element).
//
// 2. Rounding and clamp. The recipe computes clamp(rint(q), lo, hi) and converts to int
//    (round half to even; lo, hi integers: [0, L] asym, [-Q, Q] sym). rint is monotone and lo,
//    hi are integers, so clamp(rint(q)) == rint(clamp(q)); clamp(q) is in [-128, 255], and
//    RN(clamp(q) + M) with M = 2^23 (asym) or 1.5 * 2^23 (sym, both even integers) lies in
//    [2^23, 2^24) where floats are the integers: the sum is M + rint(clamp(q)), ties to even.
//    So the low bits of the float's bit pattern hold the code (M's pattern, 0x4B000000 or
//    0x4B400000, has 22 zero low bits; for sym the low `bits` bits are the two's complement
//    code). fminf/fmaxf do the clamp; q is never NaN on the fast path (case A, B above), and
//    the sign of a zero no longer matters once it is an integer code. FRND and F2I (the
//    conversion pipe, 16 lanes per clock per SM) are gone: FADD, FMNMX and integer ops remain.
//
// 3. Dequantize: (float)code through the same magic number (exact for code < 2^22), so
//    code * s + zero (two roundings, as the recipe) needs no I2F. fp16 output through
//    __floats2half2_rn (F2FP: two round-to-nearest-even conversions per instruction), proven
//    equal to half.h's float_to_half for all 2^32 floats except NaNs (row fp16-cvt).
//
// 4. Min/max: fminf/fmaxf (FMNMX) and __hmin2/__hmax2 (HMNMX2) return one of their operands;
//    for NaN-free inputs they can differ from hd.h's total order only on (+0, -0). Row
//    `minmax` checks both on the device: every pair of non-NaN halves (2^32 pairs) for HMNMX2,
//    every pair of signed zeros and random float pairs for FMNMX.
#pragma once
#include <cuda_fp16.h>

#include "tile.cuh"

namespace kvlab::gpu {

constexpr float kFastScaleMin = 0x1p-100f;
constexpr float kFastScaleMax = 0x1p100f;
constexpr uint32_t kMagicAsym = 0x4B000000u;  // bits of 2^23
constexpr uint32_t kMagicSym = 0x4B400000u;   // bits of 1.5 * 2^23

__device__ __forceinline__ float fast_quot(float a, float s, float r) {
  const float q0 = __fmul_rn(a, r);
  const float rem = __fmaf_rn(-q0, s, a);
  return __fmaf_rn(rem, r, q0);
}

// Per-group constants of the code step.
struct QP {
  float zero;   // asym: subtracted before the division; sym: 0 (unused)
  float scale;  // stored scale
  float rcp;    // RN(1/scale), valid when fast
  float fast;   // 1.0f when the fast quotient applies to this group, else 0.0f
};

__device__ __forceinline__ bool scale_is_fast(float s) { return s >= kFastScaleMin && s <= kFastScaleMax; }

__device__ __forceinline__ QP make_qp(GroupParams p, int allow_fast) {
  QP q;
  q.zero = p.zero;
  q.scale = p.scale;
  q.rcp = __frcp_rn(p.scale);
  q.fast = (allow_fast && scale_is_fast(p.scale)) ? 1.0f : 0.0f;
  return q;
}

// The code range [lo, hi] of a format.
template <bool SYM, int BITS>
__host__ __device__ constexpr float code_lo() {
  return SYM ? -(float)((1 << (BITS - 1)) - 1) : 0.0f;
}
template <bool SYM, int BITS>
__host__ __device__ constexpr float code_hi() {
  return SYM ? (float)((1 << (BITS - 1)) - 1) : (float)((1 << BITS) - 1);
}

// Fast code of one element, as magic-biased float bits: M + code (asym), M + signed code (sym).
// CLAMP false: only for groups that codes_in_range accepts (the clamp is then the identity).
template <bool SYM, int BITS, bool CLAMP = true>
__device__ __forceinline__ uint32_t biased_code(float x, const QP& p) {
  const float a = SYM ? x : __fsub_rn(x, p.zero);
  float q = fast_quot(a, p.scale, p.rcp);
  if (CLAMP) q = fminf(fmaxf(q, code_lo<SYM, BITS>()), code_hi<SYM, BITS>());
  return __float_as_uint(__fadd_rn(q, SYM ? 12582912.0f : 8388608.0f));
}

// 5. No clamp (whole groups). For a fast group with min mn and max mx, if
//        q(mn) > lo - 1/2  and  q(mx) < hi + 1/2      (q(x) = fast_quot(a(x), s, r), a as above)
//    then every element's q lies in (lo - 1/2, hi + 1/2), so rint(q) is in [lo, hi] and
//    RN(q + M) == RN(clamp(q) + M): the clamp can go. Why: a(x) = x or RN(x - zero) is
//    non-decreasing in x; where |a/s| >= 1/4, q = RN(a/s) (case B), non-decreasing in a; where
//    |a/s| < 1/4, |q| <= 0.2502 (case A), inside the interval since lo <= 0 <= hi. So for
//    mn <= x <= mx, q(x) <= max(0.2502, q(mx)) and q(x) >= min(-0.2502, q(mn)) (if a(mx) is in
//    case A, every a(x)/s < 1/4 and q(x) <= 0.2502 as well). mn and mx are the group's min and
//    max (NaN-free inputs, as for point 4; a signed zero gives the same q either way).
template <bool SYM, int BITS>
__device__ __forceinline__ bool codes_in_range(float mn, float mx, const QP& p) {
  const float a0 = SYM ? mn : __fsub_rn(mn, p.zero), a1 = SYM ? mx : __fsub_rn(mx, p.zero);
  return fast_quot(a0, p.scale, p.rcp) > code_lo<SYM, BITS>() - 0.5f &&
         fast_quot(a1, p.scale, p.rcp) < code_hi<SYM, BITS>() + 0.5f;
}
// Runtime-levels variant (Kitty pages: L differs per channel); asym only.
__device__ __forceinline__ uint32_t biased_code_levels(float x, const QP& p, float levels) {
  const float q = fminf(fmaxf(fast_quot(__fsub_rn(x, p.zero), p.scale, p.rcp), 0.0f), levels);
  return __float_as_uint(__fadd_rn(q, 8388608.0f));
}

// Sum over j < 32/BITS of (M << j*BITS) mod 2^32: adding biased codes shifted into place and
// subtracting this leaves the packed codes (asym codes are non-negative, so no field borrows).
template <int BITS>
__host__ __device__ constexpr uint32_t magic_pack_bias() {
  uint32_t c = 0;
  for (int j = 0; j < 32 / BITS; ++j) c += kMagicAsym << (j * BITS);
  return c;
}

// The recipe's code, not inlined: the fallback branch of pack_run stays small, so the fast
// branch's arrays stay in registers (an inlined IEEE division per element made ptxas keep a
// 32-element array on the stack).
static __device__ __noinline__ uint32_t code_slow(float x, GroupParams p, int bits, int sym) {
  return code_of(x, p, bits, sym);
}

// Codes of N consecutive elements (one group) packed LSB first into N*BITS/32 words, the same
// stream as pack.h's put_code. Fast groups use the shortcut above, others the recipe.
template <bool SYM, int BITS, int N>
__device__ __forceinline__ void pack_run(const float (&v)[N], const QP& p, GroupParams gp,
                                         uint32_t (&w)[N * BITS / 32]) {
  constexpr int PER = 32 / BITS, NW = N * BITS / 32;
  static_assert(N % PER == 0, "pack_run: whole words only");
  if (p.fast != 0.0f) {
#pragma unroll
    for (int k = 0; k < NW; ++k) {
      uint32_t acc = 0;
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const uint32_t t = biased_code<SYM, BITS>(v[k * PER + j], p);
        if (SYM)
          acc |= (t & ((1u << BITS) - 1u)) << (j * BITS);
        else
          acc += t << (j * BITS);
      }
      w[k] = SYM ? acc : acc - magic_pack_bias<BITS>();
    }
  } else {
#pragma unroll
    for (int k = 0; k < NW; ++k) {
      uint32_t acc = 0;
#pragma unroll
      for (int j = 0; j < PER; ++j) acc |= code_slow(v[k * PER + j], gp, BITS, SYM ? 1 : 0) << (j * BITS);
      w[k] = acc;
    }
  }
}

// pack_run's fast branch without the clamp, for a group that codes_in_range accepts.
template <bool SYM, int BITS, int N>
__device__ __forceinline__ void pack_run_in_range(const float (&v)[N], const QP& p,
                                                  uint32_t (&w)[N * BITS / 32]) {
  constexpr int PER = 32 / BITS, NW = N * BITS / 32;
#pragma unroll
  for (int k = 0; k < NW; ++k) {
    uint32_t acc = 0;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const uint32_t t = biased_code<SYM, BITS, false>(v[k * PER + j], p);
      if (SYM)
        acc |= (t & ((1u << BITS) - 1u)) << (j * BITS);
      else
        acc += t << (j * BITS);
    }
    w[k] = SYM ? acc : acc - magic_pack_bias<BITS>();
  }
}

// Dequantize helpers: exact (float)code without I2F.
__device__ __forceinline__ float ucode_float(uint32_t c) {
  return __fsub_rn(__uint_as_float(kMagicAsym | c), 8388608.0f);
}
__device__ __forceinline__ float scode_float(int32_t v) {
  return __fsub_rn(__int_as_float((int32_t)kMagicSym + v), 12582912.0f);
}
template <bool SYM, int BITS>
__device__ __forceinline__ float dequant_word(uint32_t word, int j, float scale, float zero) {
  const uint32_t c = (word >> (j * BITS)) & ((1u << BITS) - 1u);
  if (SYM) {
    const int32_t v = (int32_t)(c << (32 - BITS)) >> (32 - BITS);
    return __fmul_rn(scode_float(v), scale);  // KvlabRecipe::sym_dequant
  }
  return __fadd_rn(__fmul_rn(ucode_float(c), scale), zero);  // KvlabRecipe::asym_dequant
}
__device__ __forceinline__ uint32_t half2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Min/max of finite floats: hardware (mm != 0) or order keys (tile.cuh).
__device__ __forceinline__ float min_hw(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float max_hw(float a, float b) { return fmaxf(a, b); }

}  // namespace kvlab::gpu
