// Small floating-point element and scale types: FP8 E4M3 and E5M2 (OCP FP8, as CUDA's
// __nv_fp8_e4m3 / __nv_fp8_e5m2), FP4 E2M1 (OCP MX v1.0) and the E8M0 power-of-two scale.
// float -> code rounds to nearest, ties to even, and saturates (CUDA's __NV_SATFINITE: a finite
// value or an infinity beyond the largest finite code gives that code with its sign); the sign
// of a value that rounds to zero is kept (-0 codes). Integer-only ("soft") code, identical on
// host and device; the device's FP8 path is the hardware cvt, proven equal to the soft code on
// every fp16 input and all 2^32 float bit patterns but NaN (`kvlab-gpu validate`, rows fp8-cvt).
// NaN never reaches these functions (inputs are validated finite).
#pragma once
#include <cstdint>

#include "kvlab/half.h"
#include "kvlab/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace kvlab {

// A sign + E exponent bits + M mantissa bits format with exponent bias B; `max_code` is the
// magnitude code of the largest finite value (e4m3: 0x7E = 448, its 0x7F is NaN).
struct MiniFloat {
  int mantissa_bits;
  int bias;
  uint32_t max_code;
  int sign_shift;  // position of the sign bit: 7 (fp8) or 3 (fp4)
};
// (functions, not constexpr objects, so device code may use them without relaxed constexpr)
KV_HD constexpr MiniFloat e4m3_type() { return {3, 7, 0x7Eu, 7}; }
KV_HD constexpr MiniFloat e5m2_type() { return {2, 15, 0x7Bu, 7}; }
KV_HD constexpr MiniFloat e2m1_type() { return {1, 1, 0x7u, 3}; }

// code -> float, exact. Branch-free (both cases computed, one selected) so loops vectorize.
KV_HD float minifloat_decode(uint32_t code, MiniFloat f) {
  const uint32_t sign = (code >> f.sign_shift) & 1u;
  const uint32_t mag = code & ((1u << f.sign_shift) - 1u);
  const uint32_t e = mag >> f.mantissa_bits, m = mag & ((1u << f.mantissa_bits) - 1u);
  // normal: rebias the exponent, widen the mantissa
  const uint32_t normal = ((e + 127u - (uint32_t)f.bias) << 23) | (m << (23 - f.mantissa_bits));
  // zero or subnormal: m * 2^(1 - bias - M), exact in float
  const uint32_t sub =
      float_bits((float)m * bits_float((uint32_t)(127 + 1 - f.bias - f.mantissa_bits) << 23));
  return bits_float((sign << 31) | (e != 0 ? normal : sub));
}

// float -> code: nearest, ties to even; beyond the largest finite value (infinities too) it
// saturates to it. One path for both target ranges: the rounded value is `src >> sh` plus the
// round-to-even increment, where src is the float's bits rebiased (normal target; a carry
// moves to the next binade) or its 24-bit significand (subnormal target, units of
// 2^(emin - M)); sh is capped at 25, where a significand below 2^24 rounds to 0.
KV_HD uint32_t minifloat_encode(float x, MiniFloat f) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 31) << f.sign_shift;
  const uint32_t a = u & 0x7fffffffu;
  const int M = f.mantissa_bits, emin = 1 - f.bias;  // emin: exponent of the smallest normal
  const int e = (int)(a >> 23) - 127;
  const bool normal = e >= emin;
  const uint32_t src = normal ? a - ((uint32_t)(127 - f.bias) << 23) : ((a & 0x7fffffu) | 0x800000u);
  int sh = normal ? 23 - M : 23 + emin - M - e;
  sh = sh > 25 ? 25 : sh;
  uint32_t q = src >> sh;
  const uint32_t rem = src & ((1u << sh) - 1u), half = 1u << (sh - 1);
  // selects, not ||: GCC vectorizes the loops that call this
  const uint32_t up = rem > half ? 1u : 0u;
  const uint32_t tie = rem == half ? (q & 1u) : 0u;
  q += up | tie;
  q = a >= 0x7f800000u ? f.max_code : q;  // infinities: satfinite
  q = q > f.max_code ? f.max_code : q;    // beyond the largest finite value: satfinite
  return sign | q;
}

KV_HD float fp8_e4m3_to_float_soft(uint8_t c) { return minifloat_decode(c, e4m3_type()); }
KV_HD float fp8_e5m2_to_float_soft(uint8_t c) { return minifloat_decode(c, e5m2_type()); }
KV_HD uint8_t float_to_fp8_e4m3_soft(float x) { return (uint8_t)minifloat_encode(x, e4m3_type()); }
KV_HD uint8_t float_to_fp8_e5m2_soft(float x) { return (uint8_t)minifloat_encode(x, e5m2_type()); }

// The FP8 conversions every caller uses: on the device, the hardware cvt (sm_89+:
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 and cvt.rn.f16x2.{e4m3,e5m2}x2, through cuda_fp8.h).
KV_HD uint8_t float_to_fp8(float x, bool e5m2) {
#if defined(__CUDA_ARCH__)
  return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
#else
  return e5m2 ? float_to_fp8_e5m2_soft(x) : float_to_fp8_e4m3_soft(x);
#endif
}
KV_HD float fp8_to_float(uint8_t c, bool e5m2) {
#if defined(__CUDA_ARCH__)
  return half_to_float(__nv_cvt_fp8_to_halfraw(c, e5m2 ? __NV_E5M2 : __NV_E4M3).x);
#else
  return e5m2 ? fp8_e5m2_to_float_soft(c) : fp8_e4m3_to_float_soft(c);
#endif
}

// FP4 E2M1 (no hardware conversion before sm_100: the soft code on both sides). Codes are 4
// bits: sign in bit 3.
KV_HD uint8_t float_to_fp4(float x) { return (uint8_t)minifloat_encode(x, e2m1_type()); }
KV_HD float fp4_to_float(uint8_t c) { return minifloat_decode(c, e2m1_type()); }

// E8M0: code k is 2^(k - 127), k in 0..254 (255 is NaN and never written).
KV_HD float e8m0_to_float(uint8_t k) {
  return k == 0 ? bits_float(0x00400000u) : bits_float((uint32_t)k << 23);  // 2^-127 is subnormal
}
// floor(log2(a)) of a finite a > 0, from its bits (float subnormals included).
KV_HD int floor_log2(float a) {
  const uint32_t u = float_bits(a) & 0x7fffffffu;
  if (u >= 0x00800000u) return (int)(u >> 23) - 127;
  int e = -127;  // subnormal: the highest set mantissa bit
  for (uint32_t m = u; m < 0x00400000u; m <<= 1) --e;
  return e;
}

}  // namespace kvlab
