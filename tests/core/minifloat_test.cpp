// FP8 E4M3 / E5M2 and FP4 E2M1 conversions (minifloat.h) against an independent oracle: the
// nearest of all finite codes by brute force (ties to the even code, beyond max saturated),
// on every fp16 value and on random floats; decoding of every code by hand formula; E8M0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kvlab/minifloat.h"
#include "test_util.h"

namespace {

using namespace kvlab;

struct Fmt {
  const char* name;
  MiniFloat f;
  int exp_bits;
  float max;
};
const Fmt kFmts[] = {
    {"e4m3", e4m3_type(), 4, 448.0f}, {"e5m2", e5m2_type(), 5, 57344.0f}, {"e2m1", e2m1_type(), 2, 6.0f}};

// value of a magnitude code by the textbook formula, computed in double
double textbook(uint32_t mag, const Fmt& t) {
  const int M = t.f.mantissa_bits;
  const uint32_t e = mag >> M, m = mag & ((1u << M) - 1u);
  if (e == 0) return std::ldexp((double)m, 1 - t.f.bias - M);
  return std::ldexp(1.0 + (double)m / (1 << M), (int)e - t.f.bias);
}

// Brute force: the finite magnitude code nearest to |x|; ties to the even code; beyond max: max.
uint32_t oracle(float x, const Fmt& t) {
  const double a = std::fabs((double)x);
  const uint32_t sign = std::signbit(x) ? 1u << t.f.sign_shift : 0u;
  if (a >= t.max) return sign | t.f.max_code;  // (distances to huge a would tie in double)
  uint32_t best = 0;
  double best_d = INFINITY;
  for (uint32_t c = 0; c <= t.f.max_code; ++c) {
    const double d = std::fabs(textbook(c, t) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

TEST(MiniFloat, DecodeEveryCodeByTheTextbookFormula) {
  for (const Fmt& t : kFmts)
    for (uint32_t c = 0; c < (2u << t.f.sign_shift); ++c) {
      const uint32_t mag = c & ((1u << t.f.sign_shift) - 1u);
      if (mag > t.f.max_code) continue;  // e4m3 0x7F: NaN; e5m2 0x7C..: inf / NaN
      const double want = (c >> t.f.sign_shift ? -1.0 : 1.0) * textbook(mag, t);
      const float got = minifloat_decode(c, t.f);
      EXPECT_EQ((double)got, want) << t.name << " code " << c;
      EXPECT_EQ(std::signbit(got), (bool)(c >> t.f.sign_shift)) << t.name << " code " << c;
      EXPECT_EQ(minifloat_encode(got, t.f), c) << t.name << " code " << c;  // grid points are exact
    }
  EXPECT_EQ(minifloat_decode(0x7E, e4m3_type()), 448.0f);
  EXPECT_EQ(minifloat_decode(0x7B, e5m2_type()), 57344.0f);
  EXPECT_EQ(minifloat_decode(0x7, e2m1_type()), 6.0f);
}

TEST(MiniFloat, EncodeEveryHalfEqualsTheNearestCode) {
  for (const Fmt& t : kFmts) {
    int64_t bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN
      const float x = kvtest::gcc_half_to_float((uint16_t)h);
      const uint32_t want =
          std::isinf(x) ? ((std::signbit(x) ? 1u << t.f.sign_shift : 0u) | t.f.max_code) : oracle(x, t);
      bad += minifloat_encode(x, t.f) != want;
      if (bad == 1 && minifloat_encode(x, t.f) != want)
        ADD_FAILURE() << t.name << " half " << h << " = " << x << ": " << minifloat_encode(x, t.f) << " vs "
                      << want;
    }
    EXPECT_EQ(bad, 0) << t.name;
  }
}

TEST(MiniFloat, EncodeRandomFloatsAndEdgesEqualsTheNearestCode) {
  std::mt19937 rng(5);
  for (const Fmt& t : kFmts) {
    std::vector<float> xs;
    // every midpoint between neighbouring codes, and its float neighbours
    for (uint32_t c = 0; c < t.f.max_code; ++c) {
      const float mid = (float)((textbook(c, t) + textbook(c + 1, t)) / 2);
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid});
    }
    xs.insert(xs.end(), {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, t.max, std::nextafter(t.max, INFINITY),
                         t.max * 1.0625f, t.max * 2, 3.4e38f, -3.4e38f});
    for (int i = 0; i < 200000; ++i) {
      const float m = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng);
      const int e = std::uniform_int_distribution<int>(-20, 18)(rng);
      xs.push_back((rng() & 1 ? -1 : 1) * std::ldexp(m, e));
    }
    for (float x : xs) ASSERT_EQ(minifloat_encode(x, t.f), oracle(x, t)) << t.name << " x = " << x;
  }
  // infinities saturate with their sign
  EXPECT_EQ(float_to_fp8_e4m3_soft(INFINITY), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3_soft(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_fp8_e5m2_soft(INFINITY), 0x7B);
}

TEST(MiniFloat, HandCheckedE2M1) {
  // grid 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7); midpoints go to the even code
  const std::vector<std::pair<float, uint8_t>> cases = {
      {0.25f, 0},                               // 0 | 0.5: even 0
      {0.3f, 1},    {0.75f, 2},                 // 0.5 (001) | 1 (010): even -> 1
      {1.25f, 2},                               // 1 (010) | 1.5 (011) -> 1
      {1.75f, 4},                               // 1.5 (011) | 2 (100) -> 2
      {2.5f, 4},                                // 2 (100) | 3 (101) -> 2
      {3.5f, 6},                                // 3 (101) | 4 (110) -> 4
      {5.0f, 6},                                // 4 (110) | 6 (111) -> 4
      {5.01f, 7},   {7.0f, 7},    {100.0f, 7},  // saturates at 6
      {-2.5f, 0xC}, {-0.0f, 0x8}, {-0.1f, 0x8}};
  for (const auto& [x, code] : cases) {
    EXPECT_EQ(float_to_fp4(x), code) << x;
    EXPECT_EQ(fp4_to_float(float_to_fp4(x)), fp4_to_float(code)) << x;
  }
}

TEST(MiniFloat, E8M0AndFloorLog2) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(128), 2.0f);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.0f, 127));
  for (float a : {1.0f, 1.5f, 2.0f, 3.99f, 0.75f, 1e-3f, 6e4f, 1e-40f, 1e-45f, 3.4e38f})
    EXPECT_EQ(floor_log2(a), (int)std::floor(std::log2((double)a))) << a;
}

}  // namespace
