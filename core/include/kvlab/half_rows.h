// Runs of fp16 <-> fp32 conversions on the host, with F16C when the compiler targets it. The
// hardware conversions are IEEE round-to-nearest-even like half.h's integer code, so the bits
// do not depend on which path runs (ctest bytes_O0_equals_O3 builds both).
#pragma once
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kvlab/half.h"

namespace kvlab {

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

}  // namespace kvlab
