// Boost-channel selectors: names, the per-page channel lists they give core, and their edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "kvlab/boost_selection.h"
#include "kvlab/quantizer.h"

namespace {

using namespace kvlab;

Tensor random_keys(int64_t H, int64_t n, int64_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  Tensor t;
  t.shape = {H, n, D};
  for (int64_t i = 0; i < H * n * D; ++i) t.data.push_back(N(rng) * (1.0f + (float)(i % D) / 4.0f));
  return t;
}

TEST(BoostSelection, NamesParseAndUnknownOnesAreRefused) {
  EXPECT_EQ(parse_selector("oracle"), Selector::Oracle);
  EXPECT_STREQ(to_string(Selector::Variance), "variance");
  EXPECT_EQ(parse_selectors("magnitude,random"),
            (std::vector<Selector>{Selector::Magnitude, Selector::Random}));
  try {
    parse_selector("entropy");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--selectors"), std::string::npos) << m;
    EXPECT_NE(m.find("magnitude, random, variance, oracle, prefix-magnitude"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_selectors("magnitude,,oracle"), std::invalid_argument);
  EXPECT_THROW(parse_selectors("oracle,oracle"), std::invalid_argument);
  EXPECT_THROW(parse_selectors(""), std::invalid_argument);
}

TEST(BoostSelection, MagnitudeReproducesCoresRankingByteForByte) {
  const Tensor k = random_keys(3, 64, 16, 5);
  QuantizerSpec s;
  s.bits = 2;
  s.axis = Axis::Channel;
  s.group = 16;
  s.boost = 0.25;
  const std::vector<int32_t> ch = select_boost_channels(Selector::Magnitude, k, 16, 4, 0);
  const QuantizedTensor own = quantize(k.view(), s), given = quantize(k.view(), s, ch);
  EXPECT_EQ(given.boost_index, own.boost_index);
  EXPECT_EQ(given.codes, own.codes);
  EXPECT_EQ(given.high, own.high);
}

TEST(BoostSelection, VarianceAndMagnitudeDisagreeOnAConstantOffset) {
  // channel 0: large constant mean, no spread; channel 1: zero mean, wide spread.
  Tensor k;
  k.shape = {1, 8, 4};
  for (int t = 0; t < 8; ++t)
    for (float v : {10.0f, (t % 2 ? 3.0f : -3.0f), 0.1f * t, 0.5f}) k.data.push_back(v);
  EXPECT_EQ(select_boost_channels(Selector::Magnitude, k, 8, 1, 0), (std::vector<int32_t>{0}));
  EXPECT_EQ(select_boost_channels(Selector::Variance, k, 8, 1, 0), (std::vector<int32_t>{1}));
}

TEST(BoostSelection, RandomIsSeededDistinctAndPerPage) {
  const Tensor k = random_keys(2, 128, 32, 1);  // 2 heads x 4 pages of 32
  const auto a = select_boost_channels(Selector::Random, k, 32, 8, 7);
  EXPECT_EQ(a, select_boost_channels(Selector::Random, k, 32, 8, 7));
  EXPECT_NE(a, select_boost_channels(Selector::Random, k, 32, 8, 8));
  ASSERT_EQ(a.size(), 2u * 4u * 8u);
  std::set<std::vector<int32_t>> rows;
  for (size_t w = 0; w < 8; ++w) {
    std::vector<int32_t> row(a.begin() + w * 8, a.begin() + w * 8 + 8);
    EXPECT_TRUE(std::is_sorted(row.begin(), row.end()));
    EXPECT_EQ(std::set<int32_t>(row.begin(), row.end()).size(), 8u);
    for (int32_t c : row) EXPECT_TRUE(c >= 0 && c < 32);
    rows.insert(row);
  }
  EXPECT_GT(rows.size(), 4u);  // pages draw independently
  // the whole choice is a pure function of (seed, head, page), not of the data
  EXPECT_EQ(a, select_boost_channels(Selector::Random, random_keys(2, 128, 32, 99), 32, 8, 7));
}

TEST(BoostSelection, OracleTakesTheTopScoresOnEveryPage) {
  const Tensor k = random_keys(2, 64, 8, 3);
  const std::vector<double> score{0, 5, 1, 9, 2, 2, 0, 0, /* head 1 */ 1, 1, 1, 1, 1, 1, 1, 3};
  const auto ch = select_boost_channels(Selector::Oracle, k, 32, 2, 0, score);
  EXPECT_EQ(ch, (std::vector<int32_t>{1, 3, 1, 3, 0, 7, 0, 7}));  // head 1: ties to the lower index
  EXPECT_THROW(select_boost_channels(Selector::Oracle, k, 32, 2, 0, {1, 2, 3}), std::invalid_argument);
  // prefix-magnitude is static the same way, from its own scores
  EXPECT_EQ(select_boost_channels(Selector::PrefixMagnitude, k, 32, 2, 0, score), ch);
  EXPECT_THROW(select_boost_channels(Selector::PrefixMagnitude, k, 32, 2, 0), std::invalid_argument);
}

TEST(BoostSelection, ZeroAndAllChannels) {
  const Tensor k = random_keys(1, 32, 8, 3);
  for (Selector s : {Selector::Magnitude, Selector::Random, Selector::Variance}) {
    EXPECT_TRUE(select_boost_channels(s, k, 16, 0, 1).empty());
    EXPECT_EQ(select_boost_channels(s, k, 16, 8, 1),
              (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
  }
  EXPECT_THROW(select_boost_channels(Selector::Random, k, 16, 9, 1), std::invalid_argument);
  EXPECT_THROW(select_boost_channels(Selector::Random, k, 16, -1, 1), std::invalid_argument);
  EXPECT_THROW(select_boost_channels(Selector::Random, k, 12, 2, 1), std::invalid_argument);  // 32 % 12 != 0
}

}  // namespace
