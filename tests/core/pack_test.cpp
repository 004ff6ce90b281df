// pack.h: the LSB-first bit stream, for every code width 1..8 and odd row lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kvlab/pack.h"

namespace {

using namespace kvlab;

// Reference packer, one bit at a time: bit j of code i is stream bit i*bits + j, and stream
// bit b is bit (b % 8) of byte b / 8.
std::vector<uint8_t> bitwise_pack(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint8_t> row(packed_bytes((int64_t)codes.size(), bits), 0);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int j = 0; j < bits; ++j)
      if (codes[i] >> j & 1) {
        const size_t b = i * bits + j;
        row[b / 8] |= (uint8_t)(1u << (b % 8));
      }
  return row;
}

std::vector<uint8_t> random_codes(int64_t n, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> c(n);
  for (auto& v : c) v = (uint8_t)(rng() & ((1u << bits) - 1u));
  return c;
}

const int64_t kLengths[] = {1, 2, 3, 5, 7, 9, 13, 15, 17, 31, 37, 101, 1001};

TEST(Pack, PackedBytes) {
  // ceil(n * bits / 8)
  EXPECT_EQ(packed_bytes(16, 2), 4);   // 32 bits
  EXPECT_EQ(packed_bytes(37, 3), 14);  // 111 bits
  EXPECT_EQ(packed_bytes(1, 1), 1);
  EXPECT_EQ(packed_bytes(0, 5), 0);
  EXPECT_EQ(packed_bytes(9, 8), 9);
  EXPECT_EQ(packed_bytes(5, 7), 5);  // 35 bits
  EXPECT_EQ(packed_bytes(8, 7), 7);  // 56 bits
}

TEST(Pack, ThreeBitGolden) {
  // 5 = 0b101 at stream bits 0..2, 3 = 0b011 at 3..5, 7 = 0b111 at 6..8:
  // byte0 = 5 | 3 << 3 | (7 << 6) & 0xff = 5 + 24 + 192 = 0xdd, byte1 = 7 >> 2 = 0x01.
  const std::vector<uint8_t> codes = {5, 3, 7};
  std::vector<uint8_t> row(2, 0);
  pack_row(codes.data(), 3, 3, row.data());
  EXPECT_EQ(row, (std::vector<uint8_t>{0xdd, 0x01}));
  EXPECT_EQ(get_code(row.data(), 2, 3), 7u);  // straddles bytes 0 and 1
}

TEST(Pack, PackRowMatchesBitwiseReference) {
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " n=" << n);
      const auto codes = random_codes(n, bits, 1000 * bits + (uint32_t)n);
      std::vector<uint8_t> row(packed_bytes(n, bits) + 4, 0);  // 4 guard bytes must stay zero
      pack_row(codes.data(), n, bits, row.data());
      const auto want = bitwise_pack(codes, bits);
      EXPECT_EQ(std::vector<uint8_t>(row.begin(), row.begin() + packed_bytes(n, bits)), want);
      for (int g = 0; g < 4; ++g) EXPECT_EQ(row[packed_bytes(n, bits) + g], 0) << "wrote past the row";
    }
}

TEST(Pack, UnpackRowInvertsPackRow) {
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " n=" << n);
      const auto codes = random_codes(n, bits, 7 * bits + (uint32_t)n);
      std::vector<uint8_t> row(packed_bytes(n, bits) + 4, 0);
      pack_row(codes.data(), n, bits, row.data());
      // garbage after the row must not leak into the last codes
      for (int g = 0; g < 4; ++g) row[packed_bytes(n, bits) + g] = 0xff;
      std::vector<uint8_t> back(n, 0xee);
      unpack_row(row.data(), n, bits, back.data());
      EXPECT_EQ(back, codes);
    }
}

TEST(Pack, PutCodeGetCodeRoundTrip) {
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " n=" << n);
      const auto codes = random_codes(n, bits, 31 * bits + (uint32_t)n);
      std::vector<uint8_t> row(packed_bytes(n, bits), 0);
      // put in a scrambled order: OR-ing must not depend on the order of the writes
      std::vector<int64_t> order(n);
      for (int64_t i = 0; i < n; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(bits));
      for (int64_t i : order) put_code(row.data(), i, bits, codes[i]);
      EXPECT_EQ(row, bitwise_pack(codes, bits));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += get_code(row.data(), i, bits) != codes[i];
      EXPECT_EQ(bad, 0);
    }
}

TEST(Pack, MaxCodesAndPaddingBitsZero) {
  // all-ones codes fill exactly n*bits stream bits; the padding of the last byte stays zero
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : kLengths) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " n=" << n);
      const std::vector<uint8_t> codes(n, (uint8_t)((1u << bits) - 1u));
      std::vector<uint8_t> row(packed_bytes(n, bits), 0);
      pack_row(codes.data(), n, bits, row.data());
      const int64_t used = n * bits;
      for (int64_t b = 0; b < (int64_t)row.size() * 8; ++b)
        EXPECT_EQ(row[b / 8] >> (b % 8) & 1, b < used ? 1 : 0) << "stream bit " << b;
    }
}

TEST(Pack, PackAtAnOffsetSharedByte) {
  // Two rows written into one stream, the second starting mid-byte (as groups do when
  // G * bits is not a multiple of 8): put_code at offset n1 must leave the first row intact.
  for (int bits = 1; bits <= 8; ++bits) {
    const int64_t n1 = 5, n2 = 11;
    const auto a = random_codes(n1, bits, 3), b = random_codes(n2, bits, 4);
    std::vector<uint8_t> row(packed_bytes(n1 + n2, bits), 0);
    pack_row(a.data(), n1, bits, row.data());
    for (int64_t i = 0; i < n2; ++i) put_code(row.data(), n1 + i, bits, b[i]);
    std::vector<uint8_t> all = a;
    all.insert(all.end(), b.begin(), b.end());
    EXPECT_EQ(row, bitwise_pack(all, bits)) << "bits=" << bits;
  }
}

}  // namespace
