// Spearman's rho (average ranks for ties) and top-k recall, against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvlab/rank_stats.h"

namespace {

using namespace kvlab;

TEST(RankStats, AverageRanksShareTies) {
  EXPECT_EQ(average_ranks({10, 20, 20, 5}), (std::vector<double>{2, 3.5, 3.5, 1}));
  EXPECT_EQ(average_ranks({1, 1, 1}), (std::vector<double>{2, 2, 2}));
}

TEST(RankStats, SpearmanOfMonotoneAndReversed) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 100, 1000, 1e6}), 1.0);  // monotone, not linear
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
}

TEST(RankStats, SpearmanWithTiesMatchesHandValue) {
  // ranks a = (1, 2, 3, 4, 5), b = (1, 2.5, 2.5, 5, 4): mean 3,
  // sum da db = (-2)(-2) + (-1)(-.5) + 0 + (1)(2) + (2)(1) = 8.5; sum da^2 = 10; sum db^2 = 9.5
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {0, 7, 7, 9, 8}), 8.5 / std::sqrt(10 * 9.5), 1e-15);
}

TEST(RankStats, SpearmanUndefinedForAConstantSide) {
  EXPECT_TRUE(std::isnan(spearman({1, 2, 3}, {5, 5, 5})));
  EXPECT_TRUE(std::isnan(spearman({1}, {2})));
  EXPECT_THROW(spearman({1, 2}, {1, 2, 3}), std::invalid_argument);
}

TEST(RankStats, TopKRecall) {
  const std::vector<double> truth{0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4};
  const std::vector<double> guess{5, 0, 4, 0, 0, 3, 0, 0};  // top 3: 0, 2, 5
  EXPECT_EQ(top_k(truth, 3), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_DOUBLE_EQ(top_k_recall(truth, guess, 1), 1.0);
  EXPECT_DOUBLE_EQ(top_k_recall(truth, guess, 3), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(top_k_recall(truth, guess, 8), 1.0);
  EXPECT_TRUE(std::isnan(top_k_recall(truth, guess, 0)));  // D/16 of D = 8 is 0
  EXPECT_THROW(top_k_recall(truth, guess, 9), std::invalid_argument);
  EXPECT_THROW(top_k_recall(truth, guess, -1), std::invalid_argument);
}

TEST(RankStats, TopKTiesGoToTheLowerIndex) {
  EXPECT_EQ(top_k({1, 3, 3, 3}, 2), (std::vector<int64_t>{1, 2}));
}

}  // namespace
