// The streaming top-8 (eval/src/topk.h, internal): any arrival order gives the same positions,
// ties go to the earlier position, masked keys (-inf) never enter.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "../../eval/src/topk.h"

namespace {

using kvlab::detail::TopK;

std::vector<int64_t> positions(const TopK& t) { return {t.idx, t.idx + t.count}; }

TEST(TopK, OrderIndependentWithTiesToTheEarlierPosition) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> coarse(0, 5);  // many ties
  std::vector<float> v(40);
  for (auto& x : v) x = (float)coarse(rng);
  v[7] = v[30] = -std::numeric_limits<float>::infinity();
  // Expected: stable sort by value, descending; the first 8 visible positions.
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  const std::vector<int64_t> want(order.begin(), order.begin() + 8);
  std::vector<int64_t> arrival(v.size());
  std::iota(arrival.begin(), arrival.end(), 0);
  for (int trial = 0; trial < 20; ++trial) {
    TopK t;
    for (int64_t i : arrival) t.push(v[i], i);
    EXPECT_EQ(positions(t), want) << "trial " << trial;
    std::shuffle(arrival.begin(), arrival.end(), rng);
  }
}

TEST(TopK, FewerKeysThanK) {
  TopK t;
  t.push(-std::numeric_limits<float>::infinity(), 0);
  t.push(2.0f, 1);
  t.push(3.0f, 2);
  EXPECT_EQ(positions(t), (std::vector<int64_t>{2, 1}));
  TopK u = t;
  EXPECT_EQ(t.overlap(u), 2);
}

}  // namespace
