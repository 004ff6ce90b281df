// Edge cases: constant groups, fp16 extremes and subnormals, partial last groups, odd shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <iomanip>
#include <random>
#include <vector>

#include "kvlab/half.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::bits_of;
using kvtest::Geometry;
using ::testing::HasSubstr;

QuantizerSpec asym(int bits, Axis axis, int group, ParamType params = ParamType::F32) {
  QuantizerSpec s;
  s.bits = bits;
  s.axis = axis;
  s.group = group;
  s.params = params;
  return s;
}

// (32, 6) tensor whose groups (8 tokens of a channel, or 3 channels of a token) are each
// filled with one constant from `consts`, cycling.
Tensor constant_groups(const std::vector<float>& consts, Axis axis) {
  Tensor t = kvtest::make_tensor({32, 6}, std::vector<float>(32 * 6));
  for (int64_t tok = 0; tok < 32; ++tok)
    for (int64_t c = 0; c < 6; ++c) {
      const int64_t g = axis == Axis::Channel ? c * 4 + tok / 8 : tok * 2 + c / 3;
      t.data[tok * 6 + c] = consts[g % consts.size()];
    }
  return t;
}
int group_size(Axis axis) { return axis == Axis::Channel ? 8 : 3; }

const std::vector<float> kConstants = {0.0f,    1.0f,     -3.25f,      1e-30f,
                                       1e30f,   65504.0f, 3.14159274f, -7e-45f /* fp32 subnormal */,
                                       FLT_MAX, -FLT_MAX, 0.1f};

TEST(ConstantGroups, Fp32ParamsScaleZeroCodesZeroDequantExact) {
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const Tensor x = constant_groups(kConstants, axis);
      const QuantizedTensor q = quantize(x.view(), asym(bits, axis, group_size(axis)));
      const Geometry g(q);
      for (size_t s = 0; s < q.scale.size(); ++s) {
        EXPECT_EQ(bits_of(q.scale[s]), 0u) << "group " << s;  // +0.0
        EXPECT_EQ(bits_of(q.zero[s]), bits_of(x.data[g.members((int64_t)s, false)[0]])) << "group " << s;
      }
      const std::vector<uint8_t> codes = unpack_codes(q);
      const std::vector<float> d = dequantize(q);
      int64_t nonzero = 0, mismatches = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        nonzero += codes[i] != 0;
        mismatches += bits_of(d[i]) != bits_of(x.data[i]);
      }
      EXPECT_EQ(nonzero, 0);
      EXPECT_EQ(mismatches, 0);
      for (uint8_t b : q.codes) EXPECT_EQ(b, 0);
    }
}

TEST(ConstantGroups, Fp16ParamsDequantizeToTheFp16Constant) {
  // zero = fp16(c), scale 0, code 0: dequant = 0 * 0 + fp16(c) = fp16(c) exactly.
  const std::vector<float> consts = {1.0f, -3.25f, 65504.0f, 3.14159274f, 0.1f, 6e-8f, -1e-6f};
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const Tensor x = constant_groups(consts, axis);
      const QuantizedTensor q = quantize(x.view(), asym(bits, axis, group_size(axis), ParamType::F16));
      for (float s : q.scale) EXPECT_EQ(s, 0.0f);
      const std::vector<float> d = dequantize(q);
      int64_t mismatches = 0;
      for (size_t i = 0; i < d.size(); ++i) mismatches += bits_of(d[i]) != bits_of(kvtest::h16(x.data[i]));
      EXPECT_EQ(mismatches, 0);
    }
}

TEST(ConstantGroups, NegativeZeroDequantizesToPositiveZero) {
  // A group of -0.0 is a constant group like any other: scale 0, zero -0.0, code 0. The
  // dequantized value is 0 * 0 + (-0.0) = +0.0 in IEEE arithmetic (docs/FORMATS.md 3.1).
  const Tensor x = kvtest::make_tensor({8, 1}, std::vector<float>(8, -0.0f));
  const QuantizedTensor q = quantize(x.view(), asym(2, Axis::Channel, 8));
  EXPECT_EQ(bits_of(q.zero[0]), 0x80000000u);
  EXPECT_EQ(q.scale[0], 0.0f);
  EXPECT_EQ(unpack_codes(q), std::vector<uint8_t>(8, 0));
  for (float v : dequantize(q)) EXPECT_EQ(bits_of(v), 0x00000000u);
}

TEST(ConstantGroups, GroupOfOneIsExact) {
  // group = 1: every element is its own constant group.
  const Tensor x = kvtest::random_kv({2, 9, 5}, 3);
  for (Axis axis : {Axis::Channel, Axis::Token}) {
    const QuantizedTensor q = quantize(x.view(), asym(3, axis, 1));
    EXPECT_EQ(q.scale.size(), x.data.size());
    EXPECT_EQ(dequantize(q), x.data);
  }
}

// ---------------------------------------------------------------------------------------------
// fp16 extremes as fp16 input.

std::vector<uint16_t> extremes_bits(int64_t n, uint32_t seed) {
  // +-65504 (0x7bff / 0xfbff) in every row, random finite halves elsewhere
  std::mt19937 rng(seed);
  std::vector<uint16_t> b(n);
  for (auto& v : b) {
    do v = (uint16_t)rng();
    while ((v & 0x7c00) == 0x7c00);
  }
  return b;
}

TEST(Fp16Extremes, Fp32ParamsQuantizeAndStayWithinBound) {
  for (Axis axis : {Axis::Channel, Axis::Token}) {
    // (16, 16): put 65504 and -65504 into every row of the grouped axis
    std::vector<uint16_t> b = extremes_bits(256, 9);
    for (int r = 0; r < 16; ++r) {
      b[axis == Axis::Channel ? 3 * 16 + r : r * 16 + 3] = 0x7bff;
      b[axis == Axis::Channel ? 11 * 16 + r : r * 16 + 11] = 0xfbff;
    }
    const std::vector<int64_t> shape = {16, 16};
    for (int bits = 1; bits <= 8; ++bits) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const int levels = (1 << bits) - 1;
      QuantizedTensor q;
      ASSERT_NO_THROW(q = quantize(kvtest::half_view(b, shape), asym(bits, axis, kWholeAxis)));
      // range 65504 - (-65504) = 131008, exact in fp32; scale = fl32(131008 / levels)
      for (float s : q.scale) EXPECT_EQ(s, 131008.0f / (float)levels);
      for (float z : q.zero) EXPECT_EQ(z, -65504.0f);
      // within scale/2 + 2 ulp (docs/FORMATS.md 3.1)
      const std::vector<float> d = dequantize(q);
      int64_t over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const double x = half_to_float(b[i]), scale = q.scale[0], err = std::fabs(x - d[i]);
        if (err > kvtest::fp32_bound(x, q.scale[0], q.zero[0], d[i]) && over++ < 2)
          ADD_FAILURE() << std::setprecision(17) << "x=" << x << " dequantized to " << d[i] << ": error "
                        << err << " > scale/2 + 2 ulp, scale/2 = " << scale / 2;
      }
      EXPECT_EQ(over, 0);
    }
  }
}

TEST(Fp16Extremes, Fp16ParamsQuantizeFromTwoBits) {
  std::vector<uint16_t> b = extremes_bits(64, 4);
  b[0] = 0x7bff;
  b[1] = 0xfbff;  // tokens 0 and 1 of the one channel of a (64, 1) tensor
  const std::vector<int64_t> shape = {64, 1};
  for (int bits = 2; bits <= 8; ++bits) {
    SCOPED_TRACE(bits);
    const int levels = (1 << bits) - 1;
    QuantizedTensor q;
    ASSERT_NO_THROW(
        q = quantize(kvtest::half_view(b, shape), asym(bits, Axis::Channel, kWholeAxis, ParamType::F16)));
    EXPECT_EQ(q.scale[0], kvtest::h16(131008.0f / (float)levels));
    EXPECT_EQ(q.zero[0], -65504.0f);  // fp16-representable, kept exactly
    if (bits == 2) {
      EXPECT_EQ(q.scale[0], 43680.0f);  // 131008 / 3 = 43669.3; fp16 step 32 there: 1365 * 32
    }
    // within scale/2 + |zero - min| (here the zero is the min exactly), strictly
    const std::vector<float> d = dequantize(q);
    for (size_t i = 0; i < d.size(); ++i) {
      const double x = half_to_float(b[i]), scale = q.scale[0];
      ASSERT_LE(std::fabs(x - d[i]), scale / 2) << "x=" << x;
    }
  }
}

TEST(Fp16Extremes, Fp16ParamsOneBitScaleOverflowThrows) {
  // 1 bit: scale = 131008 / 1 > 65504 rounds to inf in fp16: invalid_argument naming fp16.
  std::vector<uint16_t> b = {0x7bff, 0xfbff, 0x3c00, 0x0000};
  const std::string msg = kvtest::message_of<std::invalid_argument>([&] {
    quantize(kvtest::half_view(b, {4, 1}), asym(1, Axis::Channel, kWholeAxis, ParamType::F16));
  });
  EXPECT_THAT(msg, HasSubstr("overflows fp16"));
  EXPECT_THAT(msg, HasSubstr("group 0 of row 0"));  // names the group
  EXPECT_THAT(msg, HasSubstr("65504"));             // and its range
  EXPECT_THAT(msg, HasSubstr("bits=1"));            // and quotes the spec
}

TEST(Fp16Extremes, UpstreamProfilesOverflowTheFp16Range) {
  // kivi / kitty-sim compute max - min in fp16 first: 65504 - (-65504) is inf at any width.
  std::vector<uint16_t> b = {0x7bff, 0xfbff, 0x3c00, 0x0000};
  for (Profile p : {Profile::Kivi, Profile::KittySim})
    for (int bits = 1; bits <= 8; ++bits) {
      QuantizerSpec s = asym(bits, Axis::Channel, kWholeAxis, ParamType::F16);
      s.profile = p;
      const std::string msg = kvtest::message_of<std::invalid_argument>([&] {
        quantize(kvtest::half_view(b, {4, 1}), s);
      });
      EXPECT_THAT(msg, HasSubstr("overflows fp16")) << to_string(p) << " bits=" << bits;
    }
  // ... while [0, 65504] fits: range 65504, 1 bit: scale = fp16(65504 * (1/1)) = 65504
  std::vector<uint16_t> ok = {0x7bff, 0x0000, 0x3c00, 0x0000};
  QuantizerSpec s = asym(1, Axis::Channel, kWholeAxis, ParamType::F16);
  s.profile = Profile::Kivi;
  EXPECT_EQ(quantize(kvtest::half_view(ok, {4, 1}), s).scale[0], 65504.0f);
}

// ---------------------------------------------------------------------------------------------
// fp16 subnormals (multiples of 2^-24 below 2^-14) as fp16 input.

TEST(Fp16Subnormals, Fp32ParamsWithinBound) {
  std::mt19937 rng(12);
  std::vector<uint16_t> b(32 * 8);
  for (auto& v : b) v = (uint16_t)((rng() & 0x8000u) | (rng() % 1024u));  // +-k * 2^-24, k < 1024
  b[0] = 0x0001;                                                          // 2^-24
  b[1] = kvtest::gcc_half_bits(6e-8f);                                    // 6e-8 rounds to 2^-24 as well
  ASSERT_EQ(b[1], 0x0001);
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      QuantizedTensor q;
      ASSERT_NO_THROW(q = quantize(kvtest::half_view(b, {32, 8}), asym(bits, axis, 4)));
      const Geometry g(q);
      const std::vector<float> d = dequantize(q);
      int64_t over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const int64_t s = g.param_index((int64_t)i, false);
        const double x = half_to_float(b[i]), scale = q.scale[s], err = std::fabs(x - d[i]);
        if (err > kvtest::fp32_bound(x, q.scale[s], q.zero[s], d[i]) && over++ < 2)
          ADD_FAILURE() << std::setprecision(17) << "x=" << x << " (element " << i << ") dequantized to "
                        << d[i] << ": error " << err << " > scale/2 + 2 ulp, scale/2 = " << scale / 2;
      }
      EXPECT_EQ(over, 0);
    }
}

TEST(Fp16Subnormals, Fp16ParamsWhereTheScaleIsExact) {
  // Values k * 2^-24 with k in [-1023, 1023], both ends present: range 2046 * 2^-24.
  //   1 bit:  scale = 2046 * 2^-24 = 1023 * 2^-23 (fp16 normal, mantissa 1023/1024: exact)
  //   2 bits: scale = 682 * 2^-24 (fp16 subnormal 682: exact)
  // zero = -1023 * 2^-24 is an fp16 value, and every fp32 operation on these multiples of 2^-24
  // is exact, so the bound is scale/2 with no slack.
  std::mt19937 rng(13);
  std::vector<uint16_t> b(64);
  for (auto& v : b) v = (uint16_t)((rng() & 0x8000u) | (rng() % 1024u));
  b[5] = 0x83ff;
  b[9] = 0x03ff;  // -1023 * 2^-24, +1023 * 2^-24
  b[7] = 0x0001;  // 2^-24
  const float unit = std::ldexp(1.0f, -24);
  for (int bits : {1, 2}) {
    SCOPED_TRACE(bits);
    const QuantizedTensor q =
        quantize(kvtest::half_view(b, {64, 1}), asym(bits, Axis::Channel, kWholeAxis, ParamType::F16));
    EXPECT_EQ(q.scale[0], (bits == 1 ? 2046.0f : 682.0f) * unit);
    EXPECT_EQ(q.zero[0], -1023.0f * unit);
    const std::vector<float> d = dequantize(q);
    for (size_t i = 0; i < d.size(); ++i)
      ASSERT_LE(std::fabs((double)half_to_float(b[i]) - d[i]), (double)q.scale[0] / 2) << "element " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// T and D not multiples of G: the last group along a row is shorter and must use only its own
// elements. bits = 3 with G = 3 puts groups at 9-bit boundaries, so they straddle bytes.

TEST(Remainders, EveryGroupUsesOnlyItsOwnElements) {
  const Tensor x = kvtest::random_kv({3, 37, 10}, 21);
  for (Axis axis : {Axis::Channel, Axis::Token})
    for (int G : {8, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << "G=" << G << " axis=" << to_string(axis));
      const QuantizedTensor q = quantize(x.view(), asym(3, axis, G));
      const Geometry g(q);
      const int64_t L = axis == Axis::Channel ? 37 : 10;
      ASSERT_EQ(g.groups, (L + G - 1) / G);
      ASSERT_EQ((int64_t)q.scale.size(), 3 * (axis == Axis::Channel ? 10 : 37) * g.groups);
      for (size_t s = 0; s < q.scale.size(); ++s) {
        const auto members = g.members((int64_t)s, false);
        const bool last = (int64_t)(s % g.groups) == g.groups - 1;
        ASSERT_EQ((int64_t)members.size(), last ? L - (g.groups - 1) * G : G);
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t i : members) {
          mn = std::min(mn, x.data[i]);
          mx = std::max(mx, x.data[i]);
        }
        ASSERT_EQ(q.zero[s], mn) << "group " << s;
        ASSERT_EQ(q.scale[s], (mx - mn) / 7.0f) << "group " << s;
      }
    }
}

TEST(Remainders, PartialLastGroupIsolatedFromItsNeighbour) {
  // The partial last group is a constant 50 and the full group before it lies in [-1, 1]: the
  // partial group must get scale 0 / zero 50 and dequantize to exactly 50, and its neighbour's
  // max must stay below 1 (neither group sees the other's values).
  for (Axis axis : {Axis::Channel, Axis::Token})
    for (int G : {8, 3}) {
      SCOPED_TRACE(::testing::Message() << "G=" << G << " axis=" << to_string(axis));
      Tensor x = kvtest::random_uniform({37, 10}, 8, -1.0f, 1.0f);
      const int64_t L = axis == Axis::Channel ? 37 : 10, start = (L - 1) / G * G;  // first of the last group
      ASSERT_NE(L % G, 0);
      for (int64_t r = 0; r < (axis == Axis::Channel ? 10 : 37); ++r)
        for (int64_t i = start; i < L; ++i) x.data[axis == Axis::Channel ? i * 10 + r : r * 10 + i] = 50.0f;
      const QuantizedTensor q = quantize(x.view(), asym(3, axis, G));
      const Geometry g(q);
      const std::vector<float> d = dequantize(q);
      for (size_t s = 0; s < q.scale.size(); ++s) {
        if ((int64_t)(s % g.groups) == g.groups - 1) {
          EXPECT_EQ(q.scale[s], 0.0f);
          EXPECT_EQ(q.zero[s], 50.0f);
          for (int64_t i : g.members((int64_t)s, false)) EXPECT_EQ(d[i], 50.0f);
        } else {
          EXPECT_LE(q.zero[s] + 7 * q.scale[s], 1.0f + 1e-6f) << "group " << s << " saw the 50s";
          EXPECT_GE(q.zero[s], -1.0f);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes.

TEST(Shapes, WholeAxisGroupResolvesToTheAxisLength) {
  const Tensor x = kvtest::random_kv({2, 37, 10}, 2);
  EXPECT_EQ(quantize(x.view(), asym(2, Axis::Channel, kWholeAxis)).group, 37);
  EXPECT_EQ(quantize(x.view(), asym(2, Axis::Token, kWholeAxis)).group, 10);
  EXPECT_EQ(quantize(x.view(), asym(2, Axis::Token, 4)).group, 4);
}

TEST(Shapes, SingleElement) {
  const Tensor x = kvtest::make_tensor({1, 1}, {2.5f});
  for (int bits = 1; bits <= 8; ++bits) {
    const QuantizedTensor q = quantize(x.view(), asym(bits, Axis::Channel, kWholeAxis));
    EXPECT_EQ(q.codes.size(), 1u);
    EXPECT_EQ(dequantize(q), x.data);
  }
}

TEST(Shapes, LeadingDimsAreIndependentSlices) {
  // (2, 3, 17, 6): 6 slices of (17, 6); quantizing the whole equals quantizing each slice and
  // concatenating, for both axes and a byte-straddling width.
  const Tensor x = kvtest::random_kv({2, 3, 17, 6}, 30);
  for (Axis axis : {Axis::Channel, Axis::Token}) {
    const QuantizerSpec spec = asym(3, axis, axis == Axis::Channel ? 5 : 4);
    const QuantizedTensor whole = quantize(x.view(), spec);
    std::vector<uint8_t> codes;
    std::vector<float> scale, zero;
    for (int n = 0; n < 6; ++n) {
      const Tensor part = kvtest::make_tensor(
          {17, 6}, std::vector<float>(x.data.begin() + n * 102, x.data.begin() + (n + 1) * 102));
      const QuantizedTensor q = quantize(part.view(), spec);
      codes.insert(codes.end(), q.codes.begin(), q.codes.end());
      scale.insert(scale.end(), q.scale.begin(), q.scale.end());
      zero.insert(zero.end(), q.zero.begin(), q.zero.end());
    }
    EXPECT_EQ(whole.codes, codes) << to_string(axis);
    EXPECT_EQ(whole.scale, scale);
    EXPECT_EQ(whole.zero, zero);
    EXPECT_EQ(whole.slices(), 6);
    EXPECT_EQ(whole.tokens(), 17);
    EXPECT_EQ(whole.dims(), 6);
  }
}

}  // namespace
