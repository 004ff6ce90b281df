// quantize(x, spec, boost_channels) and apply_method(m, k, v, key_boost): Kitty pages with the
// boosted channels chosen by the caller (channel selection studies, calibration/).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;

QuantizerSpec boost_spec(int G, double ratio) {
  QuantizerSpec s;
  s.bits = 2;
  s.axis = Axis::Channel;
  s.group = G;
  s.boost = ratio;
  return s;
}

// The channels core's own ranking boosted, per (slice, page), read back from boost_index.
std::vector<int32_t> chosen_of(const QuantizedTensor& q) {
  std::vector<int32_t> out;
  const int64_t D = q.dims();
  for (int64_t w = 0; w < (int64_t)q.boost_index.size() / D; ++w)
    for (int64_t c = 0; c < D; ++c)
      if (q.boost_index[w * D + c] != kNotBoosted) out.push_back((int32_t)c);
  return out;
}

TEST(BoostChannels, SameChannelsGiveTheSameBytes) {
  const Tensor x = kvtest::random_kv({3, 40, 16}, 7);  // 3 slices, 5 pages of 8 (last of 8)
  const QuantizerSpec s = boost_spec(8, 0.25);
  const QuantizedTensor own = quantize(x.view(), s);
  std::vector<int32_t> chosen = chosen_of(own);
  ASSERT_EQ(chosen.size(), 3u * 5u * 4u);
  // any order within a row is allowed: reverse each row
  for (size_t w = 0; w < chosen.size() / 4; ++w)
    std::reverse(chosen.begin() + w * 4, chosen.begin() + w * 4 + 4);
  const QuantizedTensor given = quantize(x.view(), s, chosen);
  EXPECT_EQ(given.codes, own.codes);
  EXPECT_EQ(given.high, own.high);
  EXPECT_EQ(given.boost_index, own.boost_index);
  EXPECT_EQ(given.scale, own.scale);
  EXPECT_EQ(given.zero, own.zero);
}

TEST(BoostChannels, OtherChannelsAreBoosted) {
  const Tensor x = kvtest::random_kv({1, 16, 8}, 3);  // 2 pages of 8, k = 2
  const QuantizerSpec s = boost_spec(8, 0.25);
  const std::vector<int32_t> chosen{5, 0, 7, 6};
  const QuantizedTensor q = quantize(x.view(), s, chosen);
  constexpr uint8_t F = kNotBoosted;
  EXPECT_EQ(q.boost_index, (std::vector<uint8_t>{0, F, F, F, F, 1, F, F, F, F, F, F, F, F, 0, 1}));
  // boosted channels reconstruct better than with 2 bits: error within their 4-bit step
  const std::vector<float> deq = dequantize(q);
  for (int64_t t = 0; t < 8; ++t) {
    const float step = q.scale[5];
    EXPECT_LE(std::abs(deq[t * 8 + 5] - x.data[t * 8 + 5]), 0.5f * step * 1.0001f);
  }
}

TEST(BoostChannels, BadListsAreRefused) {
  const Tensor x = kvtest::random_kv({1, 16, 8}, 3);
  const QuantizerSpec s = boost_spec(8, 0.25);
  EXPECT_THROW(quantize(x.view(), s, {0, 1, 2}), std::invalid_argument);      // wrong count
  EXPECT_THROW(quantize(x.view(), s, {0, 1, 2, 8}), std::invalid_argument);   // out of range
  EXPECT_THROW(quantize(x.view(), s, {0, 1, 3, 3}), std::invalid_argument);   // repeated
  EXPECT_THROW(quantize(x.view(), s, {0, -1, 2, 3}), std::invalid_argument);  // negative
  QuantizerSpec plain = s;
  plain.boost = -1;
  EXPECT_THROW(quantize(x.view(), plain, {0, 1, 2, 3}), std::invalid_argument);  // no boost
}

TEST(BoostChannels, ApplyMethodTakesPerPageChannels) {
  const Tensor k = kvtest::random_kv({2, 300, 16}, 11), v = kvtest::random_kv({2, 300, 16}, 12);
  const MethodSpec m = parse_method("kitty:group=64,sink=32,boost=0.25");
  const Schedule s = schedule(m, 300);
  const int64_t P = (s.key_end - s.key_begin) / m.group;  // 4 pages of the range 32..288
  ASSERT_EQ(P, 4);
  // core's ranking, read back, reproduces apply_method exactly
  Tensor part;
  part.shape = {2, s.key_end - s.key_begin, 16};
  part.data.resize(2 * part.shape[1] * 16);
  for (int64_t n = 0; n < 2; ++n)
    std::copy_n(&k.data[(n * 300 + s.key_begin) * 16], part.shape[1] * 16,
                &part.data[n * part.shape[1] * 16]);
  const std::vector<int32_t> own = chosen_of(quantize(part.view(), key_quantizer(m)));
  EXPECT_EQ(apply_method(m, k.view(), v.view(), own).k.data, apply_method(m, k.view(), v.view()).k.data);
  // a different choice changes keys inside the range only
  std::vector<int32_t> first(2 * P * 4);
  for (size_t i = 0; i < first.size(); ++i) first[i] = (int32_t)(i % 4);
  const Reconstruction a = apply_method(m, k.view(), v.view(), first),
                       b = apply_method(m, k.view(), v.view());
  EXPECT_NE(a.k.data, b.k.data);
  EXPECT_EQ(a.v.data, b.v.data);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 300; ++t)
      if (t < s.key_begin || t >= s.key_end) {
        for (int64_t c = 0; c < 16; ++c)
          EXPECT_EQ(a.k.data[(n * 300 + t) * 16 + c], b.k.data[(n * 300 + t) * 16 + c]);
      }
  EXPECT_THROW(apply_method(parse_method("kivi-2"), k.view(), v.view(), first), std::invalid_argument);
  EXPECT_THROW(apply_method(m, k.view(), v.view(), std::vector<int32_t>(5)), std::invalid_argument);
}

}  // namespace
