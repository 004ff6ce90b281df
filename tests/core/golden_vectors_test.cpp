// Golden vectors derived by hand: one channel of 16 tokens, asym, group 16, profile kvlab.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::make_tensor;

const std::vector<float> kX = {-1,   -.5f, 0,     .5f,   1,     1.5f, 2,    -1,
                               .25f, .75f, 1.25f, 1.75f, -.75f, .5f,  1.5f, 2};

QuantizerSpec spec(int bits, Axis axis) {
  QuantizerSpec s;
  s.scheme = Scheme::Asym;
  s.bits = bits;
  s.axis = axis;
  s.group = 16;
  s.params = ParamType::F32;
  s.profile = Profile::Kvlab;
  return s;
}

QuantizedTensor q_channel(int bits) {
  return quantize(make_tensor({16, 1}, kX).view(), spec(bits, Axis::Channel));
}

// 2 bits: min = -1, max = 2, scale = (2 - (-1)) / 3 = 1 (exact in fp32).
// (x - min) / 1 = 0, .5, 1, 1.5, 2, 2.5, 3, 0, 1.25, 1.75, 2.25, 2.75, .25, 1.5, 2.5, 3
// round half to even: .5 -> 0, 1.5 -> 2, 2.5 -> 2:
//   codes 0,0,1,2, 2,2,3,0, 1,2,2,3, 0,2,2,3
// packed 4 codes per byte, LSB first (code i at bits 2i..2i+1 of its byte):
//   0|0<<2|1<<4|2<<6 = 0x90, 2|2<<2|3<<4|0<<6 = 0x3a, 1|2<<2|2<<4|3<<6 = 0xe9, 0|2<<2|2<<4|3<<6 = 0xe8
const std::vector<uint8_t> kCodes2 = {0, 0, 1, 2, 2, 2, 3, 0, 1, 2, 2, 3, 0, 2, 2, 3};
const std::vector<uint8_t> kBytes2 = {0x90, 0x3a, 0xe9, 0xe8};
// floor(x - min + 0.5) (round half up) gives 0,1,1,2, 2,3,3,0, 1,2,2,3, 0,2,3,3:
//   0|1<<2|1<<4|2<<6 = 0x94, 2|3<<2|3<<4|0 = 0x3e, 0xe9, 0|2<<2|3<<4|3<<6 = 0xf8
const std::vector<uint8_t> kHalfUpBytes2 = {0x94, 0x3e, 0xe9, 0xf8};

TEST(GoldenVectors, TwoBitParams) {
  const QuantizedTensor q = q_channel(2);
  ASSERT_EQ(q.scale.size(), 1u);
  ASSERT_EQ(q.zero.size(), 1u);
  EXPECT_EQ(q.scale[0], 1.0f);
  EXPECT_EQ(q.zero[0], -1.0f);
  EXPECT_EQ(q.group, 16);
}

TEST(GoldenVectors, TwoBitCodesRoundHalfToEven) { EXPECT_EQ(unpack_codes(q_channel(2)), kCodes2); }

TEST(GoldenVectors, TwoBitPackedBytes) {
  const QuantizedTensor q = q_channel(2);
  EXPECT_EQ(q.codes, kBytes2);
  EXPECT_NE(q.codes, kHalfUpBytes2);
}

TEST(GoldenVectors, TwoBitBytesAreKivisLittleEndianInt32Word) {
  // KIVI packs 16 2-bit codes into one int32, code i at bits 2i..2i+1: the 4 bytes read as a
  // little-endian uint32 are byte0 | byte1 << 8 | byte2 << 16 | byte3 << 24 = 0xe8e93a90.
  const QuantizedTensor q = q_channel(2);
  ASSERT_EQ(q.codes.size(), 4u);
  const uint32_t word = (uint32_t)q.codes[0] | (uint32_t)q.codes[1] << 8 | (uint32_t)q.codes[2] << 16 |
                        (uint32_t)q.codes[3] << 24;
  EXPECT_EQ(word, 0xe8e93a90u);
  uint32_t mem;
  std::memcpy(&mem, q.codes.data(), 4);  // x86 is little-endian: the same word in memory
  EXPECT_EQ(mem, 0xe8e93a90u);
}

TEST(GoldenVectors, TwoBitDequantized) {
  // code * 1 + (-1): -1,-1,0,1, 1,1,2,-1, 0,1,1,2, -1,1,1,2 (all exact in fp32)
  const std::vector<float> want = {-1, -1, 0, 1, 1, 1, 2, -1, 0, 1, 1, 2, -1, 1, 1, 2};
  EXPECT_EQ(dequantize(q_channel(2)), want);
}

// 4 bits: scale = 3 / 15 = fl32(0.2) = 0.20000000298..; (x - min) / scale in fp32:
//   x - min = 0, .5, 1, 1.5, 2, 2.5, 3, 0, 1.25, 1.75, 2.25, 2.75, .25, 1.5, 2.5, 3
//   exact quotients 0, 2.5, 5, 7.5, 10, 12.5, 15, 0, 6.25, 8.75, 11.25, 13.75, 1.25, 7.5, 12.5, 15;
//   fl32(0.2) is 1.49e-8 relative too large, so each true quotient is 1.49e-8 relative below the
//   value above, less than half an fp32 ulp (>= 2^-25 = 2.98e-8 relative): the correctly rounded
//   fp32 quotient is exactly the value above, ties included.
//   half to even: 0, 2, 5, 8, 10, 12, 15, 0, 6, 9, 11, 14, 1, 8, 12, 15
// two codes per byte, low nibble first: 0x20, 0x85, 0xca, 0x0f, 0x96, 0xeb, 0x81, 0xfc
const std::vector<uint8_t> kCodes4 = {0, 2, 5, 8, 10, 12, 15, 0, 6, 9, 11, 14, 1, 8, 12, 15};
const std::vector<uint8_t> kBytes4 = {0x20, 0x85, 0xca, 0x0f, 0x96, 0xeb, 0x81, 0xfc};

TEST(GoldenVectors, FourBit) {
  const QuantizedTensor q = q_channel(4);
  ASSERT_EQ(q.scale.size(), 1u);
  EXPECT_EQ(q.scale[0], 3.0f / 15.0f);
  EXPECT_EQ(q.zero[0], -1.0f);
  EXPECT_EQ(unpack_codes(q), kCodes4);
  EXPECT_EQ(q.codes, kBytes4);
}

TEST(GoldenVectors, TokenAxisGivesTheSameBytes) {
  // (1, 16) with axis=token: one row (token 0) of 16 channels, one group of 16.
  for (int bits : {2, 4}) {
    SCOPED_TRACE(bits);
    const QuantizedTensor q = quantize(make_tensor({1, 16}, kX).view(), spec(bits, Axis::Token));
    EXPECT_EQ(q.codes, bits == 2 ? kBytes2 : kBytes4);
    EXPECT_EQ(unpack_codes(q), bits == 2 ? kCodes2 : kCodes4);
    EXPECT_EQ(q.codes, q_channel(bits).codes);
    EXPECT_EQ(q.scale, q_channel(bits).scale);
    EXPECT_EQ(q.zero, q_channel(bits).zero);
  }
}

TEST(GoldenVectors, BitsPerElement) {
  // 16 codes of 2 bits + one fp32 scale + one fp32 zero = (32 + 64) / 16 = 6 bits per element;
  // 4 bits: (64 + 64) / 16 = 8.
  EXPECT_DOUBLE_EQ(bits_per_element(q_channel(2)), 6.0);
  EXPECT_DOUBLE_EQ(bits_per_element(q_channel(4)), 8.0);
}

}  // namespace
