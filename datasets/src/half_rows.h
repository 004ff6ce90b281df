// Internal: fp16 rounding of runs of floats, with F16C when the compiler targets it. Hardware
// and software conversions are both IEEE round-to-nearest-even, so the bits are the same
// (core's half.h holds the reference, proven equal to the hardware conversion).
#pragma once
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kvlab/half.h"

namespace kvlab::detail {

// x[i] = round_to_half(x[i]) for finite x.
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

// out[i] = fp16 bits of x[i] (round to nearest even).
inline void to_half_n(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) out[i] = float_to_half(x[i]);
}

}  // namespace kvlab::detail
