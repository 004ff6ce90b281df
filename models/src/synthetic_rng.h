// Counter-based random numbers for the synthetic dump generator: every value is a pure
// function of (key, counter), so any layer, head or token block is generated alone, in any
// order, on any number of threads, with the same bytes. The Gaussian is Box-Muller with our own
// log and sin/cos polynomials in float (only +, *, /, sqrt and integer ops, all IEEE-exact under
// -ffp-contract=off): unlike std::normal_distribution or libm, it gives the same bits on every
// machine and compiler, and the branch-free form vectorizes.
#pragma once
#include <cstdint>
#include <cstring>

#include "kvlab/hash.h"

namespace kvlab::synth {

// A key for one stream of numbers: hashes the fields in order, so (1, 2) and (2, 1) differ.
inline uint64_t stream_key(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t k = splitmix64_mix(seed + kGoldenGamma);
  for (uint64_t v : {a, b, c, d}) k = splitmix64_mix(k ^ (v + kGoldenGamma + (k << 6) + (k >> 2)));
  return k;
}

inline uint64_t hash_at(uint64_t key, uint64_t counter) {
  return splitmix64_mix(key ^ splitmix64_mix(counter));
}

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ln(u) for u > 0 normal: exponent from the bits, mantissa m in [sqrt(1/2), sqrt(2)) through
// ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172; the series to s^9 is within 1e-9.
inline float portable_log(float u) {
  const uint32_t b = float_to_bits(u);
  int32_t e = (int32_t)((b >> 23) & 0xffu) - 127;
  float m = bits_to_float((b & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big ? 1 : 0;
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  const float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return (float)e * 0.693147181f + 2.0f * s * series;
}

// exp(x) for |x| <= 2: exp(x/8)^8 with a degree-6 Taylor series (relative error < 1e-6).
inline float portable_exp_small(float x) {
  const float y = x * 0.125f;
  float e =
      1.0f + y * (1.0f + y * (0.5f + y * (1.0f / 6 + y * (1.0f / 24 + y * (1.0f / 120 + y * (1.0f / 720))))));
  e = e * e;
  e = e * e;
  return e * e;
}

// sqrt(y) for y in (0, 64): a bit-level first guess and three Newton steps (about 1 ulp).
// Not std::sqrt: under -fmath-errno (our default) GCC guards that with a call, which stops
// the loops from vectorizing; this is plain arithmetic, identical everywhere.
inline float portable_sqrt(float y) {
  float g = bits_to_float(0x1fbd1df5u + (float_to_bits(y) >> 1));
  g = 0.5f * (g + y / g);
  g = 0.5f * (g + y / g);
  return 0.5f * (g + y / g);
}

// Two standard normals from one 64-bit hash: u1 = (k + 1/2) / 2^23 from the high 23 bits,
// exact in float and strictly inside (0, 1) (so |z| < 5.8; 24 bits would round the top value
// to 1 and give r = sqrt(-0)), the angle from the low 24 bits, reduced exactly to a quadrant
// and |a| <= pi/4.
inline void gauss_pair(uint64_t h, float& z0, float& z1) {
  const float u1 = ((float)(uint32_t)(h >> 41) + 0.5f) * (1.0f / 8388608.0f);
  const float r = portable_sqrt(-2.0f * portable_log(u1));
  const int32_t k = (int32_t)(h & 0xffffffu);                // angle = 2 pi k / 2^24
  const int32_t quadrant = ((k + (1 << 21)) >> 22) & 3;      // nearest multiple of pi/2
  const int32_t rest = k - (((k + (1 << 21)) >> 22) << 22);  // in [-2^21, 2^21)
  const float a = (float)rest * (1.57079632679f / 4194304.0f);
  const float a2 = a * a;
  const float sa =
      a * (1.0f + a2 * (-1.0f / 6 + a2 * (1.0f / 120 + a2 * (-1.0f / 5040 + a2 * (1.0f / 362880)))));
  const float ca = 1.0f + a2 * (-0.5f + a2 * (1.0f / 24 + a2 * (-1.0f / 720 + a2 * (1.0f / 40320))));
  // cos and sin of quadrant * pi/2 + a
  const float c = quadrant == 0 ? ca : quadrant == 1 ? -sa : quadrant == 2 ? -ca : sa;
  const float s = quadrant == 0 ? sa : quadrant == 1 ? ca : quadrant == 2 ? -sa : -ca;
  z0 = r * c;
  z1 = r * s;
}

// n standard normals (n may be odd) from counters 0 .. ceil(n/2)-1 of `key`.
inline void fill_gauss(uint64_t key, float* __restrict out, int64_t n) {
  const int64_t pairs = n / 2;
  for (int64_t i = 0; i < pairs; ++i) gauss_pair(hash_at(key, (uint64_t)i), out[2 * i], out[2 * i + 1]);
  if (n % 2) {
    float a, b;
    gauss_pair(hash_at(key, (uint64_t)pairs), a, b);
    out[n - 1] = a;
  }
}

// A sequential stream for the small per-head parameters (a few hundred draws).
struct Stream {
  uint64_t key, counter = 0;
  explicit Stream(uint64_t k) : key(k) {}
  double uniform() { return ((hash_at(key, counter++) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
  float normal() {
    float a, b;
    gauss_pair(hash_at(key, counter++), a, b);
    return a;
  }
  int64_t below(int64_t n) { return (int64_t)(uniform() * (double)n); }  // [0, n)
};

}  // namespace kvlab::synth
