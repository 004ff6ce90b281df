// Internal: stored dtype <-> fp32 for dump I/O. fp16 uses F16C when compiled for it (IEEE round
// to nearest even, the same bits as core's float_to_half_soft for finite values); bf16 is the
// top half of the fp32 bits, rounded to nearest even.
#pragma once
#include <cstdint>
#include <cstring>

#include "kvlab/half.h"
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kvlab::detail {

inline void half_to_float_n(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

inline void float_to_half_n(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

// x[i] = round_to_half(x[i]) in place, for finite x.
inline void round_to_half_n(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) x[i] = round_to_half(x[i]);
}

inline float bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }
inline uint16_t float_to_bf16(float f) {  // finite inputs only (dumps are checked finite first)
  const uint32_t u = float_bits(f);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace kvlab::detail
