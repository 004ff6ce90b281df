// Kitty boost pages (spec boost=RATIO, axis=channel, group=G): per page of G tokens the k
// channels with the largest sum |x| get bits + 2; their top 2 bits live in a separate plane.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::make_tensor;

constexpr uint8_t F = kNotBoosted;

QuantizerSpec boost(int bits, int G, double ratio, Profile profile = Profile::Kvlab,
                    ParamType params = ParamType::F32) {
  QuantizerSpec s;
  s.bits = bits;
  s.axis = Axis::Channel;
  s.group = G;
  s.boost = ratio;
  s.profile = profile;
  s.params = params;
  return s;
}

// (T, D) tensor from per-channel columns
Tensor from_columns(const std::vector<std::vector<float>>& cols) {
  const int64_t D = (int64_t)cols.size(), T = (int64_t)cols[0].size();
  Tensor t = make_tensor({T, D}, std::vector<float>(T * D));
  for (int64_t c = 0; c < D; ++c)
    for (int64_t i = 0; i < T; ++i) t.data[i * D + c] = cols[c][i];
  return t;
}

std::vector<float> repeat(std::vector<float> pattern, int n) {
  std::vector<float> out;
  while ((int)out.size() < n) out.insert(out.end(), pattern.begin(), pattern.end());
  out.resize(n);
  return out;
}

TEST(Boost, ChannelCount) {
  // k = int(D * ratio + 1e-6)
  EXPECT_EQ(boost_count(128, 0.125), 16);
  EXPECT_EQ(boost_count(128, 0.25), 32);
  EXPECT_EQ(boost_count(100, 0.29), 29);  // 100 * 0.29 = 28.999999999999996 in double; + 1e-6 -> 29
  EXPECT_EQ(boost_count(100, 0.07), 7);   // 7.000000000000001
  EXPECT_EQ(boost_count(10, 0.3), 3);     // 3.0000000000000004
  EXPECT_EQ(boost_count(7, 0.5), 3);      // 3.5 truncates
  EXPECT_EQ(boost_count(16, 0.0), 0);
  EXPECT_EQ(boost_count(16, 1.0), 16);
  const Tensor x = kvtest::random_kv({8, 100}, 1);
  EXPECT_EQ(quantize(x.view(), boost(2, 8, 0.29)).boost_k, 29);
}

TEST(Boost, TopKBySumOfAbsoluteValues) {
  // One page of 8 tokens, D = 8, ratio 0.5 -> k = 4. Sums of |x| over the page:
  //   c0 0.5 each -> 4;  c1 +-3 alternating -> 24 (signed sum 0);  c2 one spike of 10 -> 10
  //   (largest |x| and range); c3 2.0 -> 16;  c4 -2.5 -> 20;  c5 0, .25, .., 1.75 -> 7;
  //   c6 +-1.5 -> 12;  c7 0.1 -> 0.8 (fp32 sum of eight 0.1f, well below the rest)
  // Top 4: c1 24, c4 20, c3 16, c6 12 -> slots in channel order: c1 0, c3 1, c4 2, c6 3.
  std::vector<float> ramp;
  for (int i = 0; i < 8; ++i) ramp.push_back(0.25f * i);
  const Tensor x = from_columns({repeat({0.5f}, 8),
                                 repeat({3, -3}, 8),
                                 {0, 0, 0, 10, 0, 0, 0, 0},
                                 repeat({2}, 8),
                                 repeat({-2.5f}, 8),
                                 ramp,
                                 repeat({1.5f, -1.5f}, 8),
                                 repeat({0.1f}, 8)});
  const QuantizedTensor q = quantize(x.view(), boost(2, 8, 0.5));
  EXPECT_EQ(q.boost_k, 4);
  EXPECT_EQ(q.boost_index, (std::vector<uint8_t>{F, 0, F, 1, 2, F, 3, F}));
}

TEST(Boost, TiesGoToTheLowerChannel) {
  // Two pages of 8 tokens, D = 8, ratio 0.25 -> k = 2.
  //   page 0: every channel is +-1 in some sign pattern: all sums 8 -> channels 0 and 1.
  //   page 1: c0 sums 32 (4.0 each), c2, c5, c7 tie at 24 (+-3), the rest 8 -> c0 and c2.
  std::vector<std::vector<float>> cols(8);
  for (int c = 0; c < 8; ++c) {
    for (int t = 0; t < 8; ++t) cols[c].push_back(((t + c) % 3 == 0) ? -1.0f : 1.0f);
    for (int t = 0; t < 8; ++t) {
      const float m = c == 0 ? 4.0f : (c == 2 || c == 5 || c == 7) ? 3.0f : 1.0f;
      cols[c].push_back((t + c) % 2 ? m : -m);
    }
  }
  const QuantizedTensor q = quantize(from_columns(cols).view(), boost(2, 8, 0.25));
  EXPECT_EQ(q.boost_index, (std::vector<uint8_t>{0, 1, F, F, F, F, F, F,  //
                                                 0, F, 1, F, F, F, F, F}));
}

TEST(Boost, BoostedCodesUseBitsPlusTwoGolden) {
  // bits 2, one page of 16 tokens, D = 4, ratio 0.25 -> k = 1.
  //   c0 = t (0..15): sum 120, the boosted channel; scale = 15 / (2^4 - 1) = 1, codes t: max 15
  //   c1 = t % 4: sum 24; scale 3 / 3 = 1, codes t % 4
  //   c2 = 0.5, c3 = -0.25: constant, scale 0, codes 0
  // low plane: D rows of packed_bytes(16, 2) = 4 bytes; c0 & 3 = c1 = 0,1,2,3,..:
  //   0 | 1<<2 | 2<<4 | 3<<6 = 0xe4 in every byte
  // high plane: one row (slot 0 = c0) of t >> 2 = 0,0,0,0, 1,1,1,1, 2,2,2,2, 3,3,3,3:
  //   0x00, 1|1<<2|1<<4|1<<6 = 0x55, 0xaa, 0xff
  std::vector<float> t16, t4;
  for (int t = 0; t < 16; ++t) {
    t16.push_back((float)t);
    t4.push_back((float)(t % 4));
  }
  const Tensor x = from_columns({t16, t4, repeat({0.5f}, 16), repeat({-0.25f}, 16)});
  const QuantizedTensor q = quantize(x.view(), boost(2, 16, 0.25));
  EXPECT_EQ(q.boost_index, (std::vector<uint8_t>{0, F, F, F}));
  EXPECT_EQ(q.scale, (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(q.zero, (std::vector<float>{0, 0, 0.5f, -0.25f}));
  const std::vector<uint8_t> low = {0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(q.codes, low);
  EXPECT_EQ(q.high, (std::vector<uint8_t>{0x00, 0x55, 0xaa, 0xff}));
  const std::vector<uint8_t> codes = unpack_codes(q);
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(codes[t * 4 + 0], t);
    EXPECT_EQ(codes[t * 4 + 1], t % 4);
  }
  EXPECT_EQ(*std::max_element(codes.begin(), codes.end()), 15);
  const std::vector<float> d = dequantize(q);
  EXPECT_EQ(d, x.data);  // every value lies on its grid
  // bits: codes 64 * 2 + scales/zeros 8 * 32 + high plane 16 * 2 + index 4 * 8 = 448 over 64
  EXPECT_DOUBLE_EQ(bits_per_element(q), 7.0);
}

TEST(Boost, PlanesAndLastPartialPageLayout) {
  // T = 20, G = 8: pages of 8, 8, 4 tokens; D = 6, ratio 0.34 -> k = int(2.04) = 2; bits 3.
  // low plane: 6 * pb(8, 3) = 18 bytes per full page, 6 * pb(4, 3) = 12 for the last: 48
  // high plane: 2 * pb(8, 2) = 4 bytes per full page, 2 * pb(4, 2) = 2 for the last: 10
  const Tensor x = kvtest::random_kv({20, 6}, 77);
  const QuantizedTensor q = quantize(x.view(), boost(3, 8, 0.34));
  ASSERT_EQ(q.boost_k, 2);
  ASSERT_EQ(q.pages(), 3);
  ASSERT_EQ(q.codes.size(), 48u);
  ASSERT_EQ(q.high.size(), 10u);
  ASSERT_EQ(q.boost_index.size(), 18u);
  ASSERT_EQ(q.scale.size(), 18u);
  const std::vector<uint8_t> codes = unpack_codes(q);
  const int64_t low_at[] = {0, 18, 36}, high_at[] = {0, 4, 8}, len_of[] = {8, 8, 4};
  for (int p = 0; p < 3; ++p) {
    const int64_t len = len_of[p], lrow = packed_bytes(len, 3), hrow = packed_bytes(len, 2);
    const uint8_t* index = &q.boost_index[p * 6];
    std::vector<int> slots;
    for (int c = 0; c < 6; ++c)
      if (index[c] != F) slots.push_back(index[c]);
    EXPECT_EQ(slots, (std::vector<int>{0, 1})) << "page " << p;  // slots 0..k-1 in channel order
    for (int c = 0; c < 6; ++c) {
      std::vector<uint8_t> lo(len), hi(len), lbytes(lrow, 0), hbytes(hrow, 0);
      for (int64_t t = 0; t < len; ++t) {
        const uint8_t code = codes[(p * 8 + t) * 6 + c];
        lo[t] = code & 7;
        hi[t] = code >> 3;
        if (index[c] == F) {
          EXPECT_LT(code, 8) << "unboosted code wider than 3 bits";
        }
      }
      pack_row(lo.data(), len, 3, lbytes.data());
      EXPECT_TRUE(std::equal(lbytes.begin(), lbytes.end(), q.codes.begin() + low_at[p] + c * lrow))
          << "page " << p << " c " << c;
      if (index[c] != F) {
        pack_row(hi.data(), len, 2, hbytes.data());
        EXPECT_TRUE(std::equal(hbytes.begin(), hbytes.end(), q.high.begin() + high_at[p] + index[c] * hrow))
            << "page " << p << " c " << c;
      }
    }
  }
}

TEST(Boost, LastPartialPageChoosesFromItsOwnTokens) {
  // T = 20, G = 8, D = 4, k = 1. Tokens 0..15: c3 = +-10 dominates. Tokens 16..19 (page 2):
  // c0 = +-5, c3 = 0.1, so page 2 must boost c0; had it looked at tokens 12..15 it would pick c3.
  std::vector<std::vector<float>> cols(4, std::vector<float>(20, 0.25f));
  for (int t = 0; t < 16; ++t) cols[3][t] = t % 2 ? 10.0f : -10.0f;
  for (int t = 16; t < 20; ++t) {
    cols[0][t] = t % 2 ? 5.0f : -5.0f;
    cols[3][t] = 0.1f;
  }
  const QuantizedTensor q = quantize(from_columns(cols).view(), boost(2, 8, 0.25));
  EXPECT_EQ(q.boost_index, (std::vector<uint8_t>{F, F, F, 0, F, F, F, 0, 0, F, F, F}));
  // page 2, channel 0: [-5, 5] over its 4 tokens at 4 bits: scale 10 / 15, zero -5
  EXPECT_EQ(q.scale[2 * 4 + 0], 10.0f / 15.0f);
  EXPECT_EQ(q.zero[2 * 4 + 0], -5.0f);
  // page 2, channel 3: constant 0.1 -> scale 0
  EXPECT_EQ(q.scale[2 * 4 + 3], 0.0f);
}

TEST(Boost, RatioZeroIsThePlainFormatValues) {
  // boost=0 boosts nothing: the same codes and values as plain channel groups of G at `bits`.
  const Tensor x = kvtest::random_kv({2, 37, 10}, 5);
  for (int bits = 1; bits <= 6; ++bits) {
    QuantizerSpec plain = boost(bits, 8, 0.0);
    plain.boost = -1.0;
    const QuantizedTensor b = quantize(x.view(), boost(bits, 8, 0.0)), p = quantize(x.view(), plain);
    EXPECT_EQ(b.boost_k, 0);
    EXPECT_TRUE(b.high.empty());
    EXPECT_EQ(unpack_codes(b), unpack_codes(p)) << bits;
    EXPECT_EQ(dequantize(b), dequantize(p)) << bits;
  }
}

TEST(Boost, RatioOneIsThePlainFormatAtBitsPlusTwo) {
  const Tensor x = kvtest::random_kv({2, 37, 10}, 6);
  for (int bits = 1; bits <= 6; ++bits) {
    QuantizerSpec plain = boost(bits + 2, 8, -1.0);
    const QuantizedTensor b = quantize(x.view(), boost(bits, 8, 1.0)), p = quantize(x.view(), plain);
    EXPECT_EQ(b.boost_k, 10);
    EXPECT_EQ(unpack_codes(b), unpack_codes(p)) << bits;
    EXPECT_EQ(dequantize(b), dequantize(p)) << bits;
  }
}

TEST(Boost, KittySimRanksByTheFp16Mean) {
  // One page of 8 tokens, D = 4, k = 1. c1 = 1.0 everywhere: sum 8, mean 1.
  // c2 = seven 1.0 and one 1.0009765625 (1 + 2^-10): sum 8.0009765625, which kvlab prefers;
  // kitty-sim's mean 8.0009765625 * (1/8) = 1 + 2^-13 rounds to fp16 1.0 (ulp 2^-10): a tie,
  // which goes to the lower channel c1. c0 and c3 are 0.25.
  std::vector<float> c2 = repeat({1.0f}, 8);
  c2[5] = 1.0009765625f;
  const Tensor x = from_columns({repeat({0.25f}, 8), repeat({1.0f}, 8), c2, repeat({0.25f}, 8)});
  EXPECT_EQ(quantize(x.view(), boost(2, 8, 0.25)).boost_index, (std::vector<uint8_t>{F, F, 0, F}));
  EXPECT_EQ(quantize(x.view(), boost(2, 8, 0.25, Profile::KittySim, ParamType::F16)).boost_index,
            (std::vector<uint8_t>{F, 0, F, F}));
}

TEST(Boost, BoostedChannelsWithinTheirFinerHalfStep) {
  // Every element within scale/2 of its input (strict), where a boosted channel's scale is
  // its page range over 2^(bits+2) - 1 levels instead of 2^bits - 1.
  const Tensor x = kvtest::random_kv({2, 64, 16}, 9);
  for (int bits = 1; bits <= 6; ++bits) {
    const QuantizedTensor q = quantize(x.view(), boost(bits, 16, 0.25));
    const kvtest::Geometry g(q);
    const std::vector<float> d = dequantize(q);
    int64_t over = 0, boosted = 0, bad_scale = 0;
    for (size_t s = 0; s < q.scale.size(); ++s) {
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t i : g.members((int64_t)s, true)) {
        mn = std::min(mn, x.data[i]);
        mx = std::max(mx, x.data[i]);
      }
      const int levels = (1 << (q.boost_index[s] != F ? bits + 2 : bits)) - 1;
      bad_scale += q.scale[s] != (mx - mn) / (float)levels;
    }
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t s = g.param_index((int64_t)i, true);
      boosted += q.boost_index[s] != F;
      over += std::fabs((double)x.data[i] - d[i]) > (double)q.scale[s] / 2;
    }
    EXPECT_EQ(bad_scale, 0) << bits;
    EXPECT_EQ(over, 0) << bits;
    EXPECT_EQ(boosted, 2 * 4 * 4 * 16) << bits;  // N * pages * k * G
  }
}

}  // namespace
