// IEEE binary16 <-> binary32 conversion, round to nearest even, identical on host and device.
// Written with integer operations only so no compiler flag or instruction set changes a bit.
#pragma once
#include <cstdint>
#include <cstring>

#include "kvlab/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace kvlab {

KV_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KV_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// binary16 bits -> float (exact). Integer-only reference ("soft"), used on the host; the
// device path below is proven identical to it by `kvlab-gpu validate` (all 65536 halves).
KV_HD float half_to_float_soft(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  // zero or subnormal: man * 2^-24, exact in float
  const float mag = (float)man * 5.9604644775390625e-8f;
  return bits_float(sign | float_bits(mag));
}

// float -> binary16 bits, round to nearest even; overflow gives inf, NaN stays NaN.
// Integer-only reference ("soft").
KV_HD uint16_t float_to_half_soft(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                    // below 2^-14: subnormal half (or zero)
    if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 ties to even zero)
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24 bits dropped below the half ulp 2^-24
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t r = q + ((rem > halfway || (rem == halfway && (q & 1u))) ? 1u : 0u);
    return (uint16_t)(sign | r);
  }
  // normal: rebias exponent, round the 13 dropped mantissa bits to nearest even
  const uint32_t base = a - 0x38000000u;  // exponent 127 -> 15
  const uint32_t q = base >> 13;
  const uint32_t rem = base & 0x1fffu;
  const uint32_t r = q + ((rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ? 1u : 0u);
  return (uint16_t)(sign | r);
}

// The conversions every caller uses. On the device they are the hardware cvt instructions
// (IEEE round to nearest even, like the soft code, for every non-NaN value; NaN never reaches
// them: inputs are validated finite). `kvlab-gpu validate` proves the equality on the device
// for all 65536 halves and all 2^32 float bit patterns except NaNs.
KV_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return half_to_float_soft(h);
#endif
}
KV_HD uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return float_to_half_soft(f);
#endif
}

// Round a float to the nearest binary16 value, returned as float.
KV_HD float round_to_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace kvlab
