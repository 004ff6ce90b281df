// Each bad input to k-means gets a std::invalid_argument that names the parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kvlab/kmeans.h"
#include "kvlab/vq.h"

namespace {

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7};  // 4 points of d = 2

TEST(KMeansBadInput, KLargerThanN) {
  kvlab::KMeansParams p;
  p.k = 5;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p); }, "larger than the number of points");
}

TEST(KMeansBadInput, NonPositiveK) {
  kvlab::KMeansParams p;
  p.k = 0;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p); }, "k must be >= 1");
}

TEST(KMeansBadInput, ZeroDimension) {
  kvlab::KMeansParams p;
  p.k = 2;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 0, p); }, "d (dimension)");
}

TEST(KMeansBadInput, NaNInData) {
  auto y = x;
  y[5] = std::nanf("");
  kvlab::KMeansParams p;
  p.k = 2;
  expect_error([&] { kvlab::kmeans(y.data(), 4, 2, p); }, "x (data) has a NaN or Inf at flat index 5");
}

TEST(KMeansBadInput, InfInStartingCentroids) {
  const std::vector<float> c0 = {0, 1, std::numeric_limits<float>::infinity(), 3};
  kvlab::KMeansParams p;
  p.k = 2;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p, nullptr, c0.data()); }, "init (starting centroids)");
}

TEST(KMeansBadInput, BadWeights) {
  kvlab::KMeansParams p;
  p.k = 2;
  const std::vector<float> neg = {1, -1, 1, 1}, zero = {0, 0, 0, 0}, nan = {1, std::nanf(""), 1, 1};
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p, neg.data()); }, "weights must be >= 0; weight 1");
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p, zero.data()); }, "weights sum to zero");
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p, nan.data()); }, "weights has a NaN or Inf at index 1");
}

TEST(KMeansBadInput, BadIterationsAndRestarts) {
  kvlab::KMeansParams p;
  p.k = 2;
  p.iters = -1;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p); }, "iters");
  p.iters = 1;
  p.restarts = 0;
  expect_error([&] { kvlab::kmeans(x.data(), 4, 2, p); }, "restarts");
}

TEST(KMeansBadInput, UnknownInitAndBatchNamesTheProblem) {
  expect_error([] { kvlab::parse_kmeans_init("kmeans+"); }, "random, kmeans++, farthest");
  kvlab::KMeansParams p;
  p.k = 3;
  std::vector<kvlab::KMeansProblem> probs = {{x.data(), 4, 2, nullptr, nullptr},
                                             {x.data(), 2, 2, nullptr, nullptr}};
  expect_error([&] { kvlab::kmeans_batch(probs, p); }, "problem 1");
}

TEST(KMeansBadInput, CheckAloneGivesKMeansErrors) {
  // kmeans_check: what the GPU trainer runs instead of the CPU's starts (vq train --device cuda).
  kvlab::KMeansParams p;
  p.k = 5;
  expect_error([&] { kvlab::kmeans_check(x.data(), 4, 2, p); }, "larger than the number of points");
  std::vector<float> bad = x;
  bad[5] = std::nanf("");
  p.k = 2;
  expect_error([&] { kvlab::kmeans_check(bad.data(), 4, 2, p); }, "NaN or Inf at flat index 5");
  kvlab::kmeans_check(x.data(), 4, 2, p);  // good input: no error
}

TEST(KMeansBadInput, DuplicatePointsStillGiveKCentroids) {
  // Fewer distinct points than k is allowed (k <= n): starts fall back to unchosen points.
  const std::vector<float> same(20, 1.0f);
  for (auto init : {kvlab::KMeansInit::Random, kvlab::KMeansInit::KMeansPP, kvlab::KMeansInit::Farthest}) {
    kvlab::KMeansParams p;
    p.k = 4;
    p.iters = 3;
    p.init = init;
    const auto r = kvlab::kmeans(same.data(), 20, 1, p);
    EXPECT_EQ(r.centroids.size(), 4u);
    EXPECT_LT(r.objective, 1e-9);  // splits nudge copies by 1/1024 of the value
  }
}

// Sizes from user numbers: k x max_points_per_centroid past int64 means "no sampling", not a
// wrapped-around sample size (it was SIGFPE); n x d past int64 is a named error.
TEST(KMeansBadInput, HugeSizesDoNotWrapAround) {
  kvlab::KMeansParams p;
  p.k = 2;
  p.iters = 3;
  p.max_points_per_centroid = int64_t(1) << 62;
  kvlab::KMeansParams all = p;
  all.max_points_per_centroid = 0;
  EXPECT_EQ(kvlab::kmeans(x.data(), 4, 2, p).centroids, kvlab::kmeans(x.data(), 4, 2, all).centroids);
  expect_error([&] { kvlab::kmeans(x.data(), int64_t(1) << 40, int64_t(1) << 40, p); }, "overflows");
  expect_error([&] { kvlab::kmeans(nullptr, 4, 2, p); }, "no data");
}

// Spec numbers too large for int are named errors (std::stoi threw "stoi").
TEST(KMeansBadInput, VqSpecNumbersOutOfRangeAreNamed) {
  expect_error([] { kvlab::parse_vq_spec("CQ-99999999999c8b"); }, "vq spec vector size='99999999999'");
  expect_error([] { kvlab::parse_vq_spec("VQ<4,8,99999999999>"); }, "vq spec stages='99999999999'");
}

}  // namespace
