// half.h: binary16 <-> binary32 against GCC's _Float16 conversions (round to nearest even).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "kvlab/half.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::bits_of;
using kvtest::float_of;
using kvtest::gcc_half_bits;
using kvtest::gcc_half_to_float;

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Compares kvlab's conversion of f with GCC's; returns true when they agree.
bool same_as_gcc(float f) {
  const uint16_t got = float_to_half(f), want = gcc_half_bits(f);
  if (std::isnan(f)) return half_is_nan(got) && half_is_nan(want);
  return got == want;
}

TEST(Half, EveryHalfToFloatIsExact) {
  int64_t bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = half_to_float((uint16_t)h), want = gcc_half_to_float((uint16_t)h);
    const bool ok =
        half_is_nan((uint16_t)h) ? (std::isnan(got) && std::isnan(want)) : bits_of(got) == bits_of(want);
    if (!ok && bad++ < 5)
      ADD_FAILURE() << std::hex << "h=0x" << h << " got 0x" << bits_of(got) << " want 0x" << bits_of(want);
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  int64_t bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = float_to_half(half_to_float((uint16_t)h));
    const bool ok = half_is_nan((uint16_t)h) ? half_is_nan(back) : back == h;
    if (!ok && bad++ < 5) ADD_FAILURE() << std::hex << "h=0x" << h << " came back as 0x" << back;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, HandPickedValues) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);   // largest finite half
  EXPECT_EQ(float_to_half(65519.99f), 0x7bffu);  // below the 65520 midpoint
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);   // midpoint 65504|65536: ties to even (inf)
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00u);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001u);         // smallest subnormal
  EXPECT_EQ(float_to_half(6e-8f), 0x0001u);                         // 6e-8 / 2^-24 = 1.007 -> 1
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000u);         // 0.5 * 2^-24: tie to even 0
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -26)), 0x0001u);         // 0.75 * 2^-24 -> 1
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002u);         // 1.5 * 2^-24: tie to even 2
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);  // 1 + half ulp: tie to even 1.0
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02u);  // 1 + 1.5 ulp: tie to even 0x3c02
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400u);         // smallest normal
  EXPECT_EQ(float_to_half(1e-4f), 0x068eu);  // kitty-sim's eps: 1e-4 / 2^-24 = 1677.7 -> 1678
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00u);
  EXPECT_TRUE(half_is_nan(float_to_half(NAN)));
  EXPECT_EQ(round_to_half(0.1f), 0.0999755859375f);  // 1638 / 16384
}

TEST(Half, TenMillionRandomFloatBitPatterns) {
  std::mt19937 rng(20240601);
  int64_t bad = 0;
  for (int i = 0; i < 10'000'000; ++i) {
    const float f = float_of(rng());
    if (!same_as_gcc(f) && bad++ < 5)
      ADD_FAILURE() << std::hex << "f=0x" << bits_of(f) << " got 0x" << float_to_half(f) << " want 0x"
                    << gcc_half_bits(f);
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, RandomFloatsInTheHalfRange) {
  // Exponents 100..145: fp16's subnormal, normal and overflow region, where rounding happens.
  std::mt19937 rng(7);
  int64_t bad = 0;
  for (int i = 0; i < 4'000'000; ++i) {
    const uint32_t r = rng();
    const uint32_t e = 100 + (r >> 23) % 46;
    const float f = float_of((r & 0x807fffffu) | e << 23);
    if (!same_as_gcc(f) && bad++ < 5)
      ADD_FAILURE() << std::hex << "f=0x" << bits_of(f) << " got 0x" << float_to_half(f) << " want 0x"
                    << gcc_half_bits(f);
  }
  EXPECT_EQ(bad, 0);
}

TEST(Half, EveryHalfwayPointAndItsNeighbours) {
  // For each pair of adjacent halves (h, h+1), 0 <= h <= 0x7bff (the last pair is 65504|inf,
  // midpoint 65520), the midpoint is exact in fp32 (12 significant bits); check it and the
  // floats one ulp either side, with both signs.
  int64_t bad = 0, checked = 0;
  for (uint32_t h = 0; h <= 0x7bff; ++h) {
    const double lo = gcc_half_to_float((uint16_t)h);
    const double hi = h == 0x7bff ? 65536.0 : (double)gcc_half_to_float((uint16_t)(h + 1));
    const float mid = (float)((lo + hi) / 2);
    ASSERT_EQ((double)mid, (lo + hi) / 2) << "midpoint not exact for h=" << h;
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), (float)lo})
      for (float s : {f, -f}) {
        ++checked;
        if (!same_as_gcc(s) && bad++ < 5)
          ADD_FAILURE() << std::hex << "f=0x" << bits_of(s) << " got 0x" << float_to_half(s) << " want 0x"
                        << gcc_half_bits(s);
      }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(checked, 0x7c00 * 8);
}

TEST(Half, RoundToHalfIsConvertAndBack) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = u(rng);
    ASSERT_EQ(bits_of(round_to_half(f)), bits_of(kvtest::h16(f))) << f;
  }
}

}  // namespace
