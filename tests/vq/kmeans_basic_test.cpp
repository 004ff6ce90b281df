// k-means on cases small enough to check by hand, thread-count determinism, hot start,
// weights, empty-cluster splits and the starts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kvlab/kmeans.h"

namespace {

using kvlab::KMeansInit;
using kvlab::KMeansParams;

std::vector<float> blobs(int64_t n, int64_t d, int64_t centers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> mu(centers * d), x(n * d);
  for (auto& v : mu) v = g(rng) * 4.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = mu[(i % centers) * d + j] + 0.3f * g(rng);
  return x;
}

TEST(KMeans, TwoObviousClustersOneDim) {
  // {0, 1} and {10, 11}: centroids 0.5 and 10.5, MSE 0.25, from any start.
  const std::vector<float> x = {0, 10, 1, 11};
  for (KMeansInit init : {KMeansInit::Random, KMeansInit::KMeansPP, KMeansInit::Farthest}) {
    KMeansParams p;
    p.k = 2;
    p.iters = 5;
    p.init = init;
    const auto r = kvlab::kmeans(x.data(), 4, 1, p);
    std::set<float> c(r.centroids.begin(), r.centroids.end());
    EXPECT_EQ(c, (std::set<float>{0.5f, 10.5f})) << to_string(init);
    EXPECT_DOUBLE_EQ(r.mse(), 0.25);
    EXPECT_EQ(r.assign[0], r.assign[2]);
    EXPECT_EQ(r.assign[1], r.assign[3]);
    EXPECT_NE(r.assign[0], r.assign[1]);
  }
}

TEST(KMeans, HotStartOneIterationIsTheMeanOfEachCell) {
  // 2-d points, start centroids (0,0) and (5,5): one update gives the cell means.
  const std::vector<float> x = {0, 0, 1, 0, 0, 2, 5, 5, 7, 5};
  const std::vector<float> c0 = {0, 0, 5, 5};
  KMeansParams p;
  p.k = 2;
  p.iters = 1;
  const auto r = kvlab::kmeans(x.data(), 5, 2, p, nullptr, c0.data());
  EXPECT_FLOAT_EQ(r.centroids[0], 1.0f / 3);
  EXPECT_FLOAT_EQ(r.centroids[1], 2.0f / 3);
  EXPECT_FLOAT_EQ(r.centroids[2], 6.0f);
  EXPECT_FLOAT_EQ(r.centroids[3], 5.0f);
  ASSERT_EQ(r.iterations.size(), 1u);
  // Objective under the starting centroids: 0 + 1 + 4 + 0 + 4.
  EXPECT_DOUBLE_EQ(r.iterations[0].objective, 9.0);
  // imbalance: k * (3^2 + 2^2) / 5^2
  EXPECT_DOUBLE_EQ(r.iterations[0].imbalance, 2.0 * 13 / 25);
}

TEST(KMeans, ZeroIterationsReturnsTheStart) {
  const auto x = blobs(200, 3, 4, 1);
  std::vector<float> c0(x.begin(), x.begin() + 4 * 3);
  KMeansParams p;
  p.k = 4;
  p.iters = 0;
  const auto r = kvlab::kmeans(x.data(), 200, 3, p, nullptr, c0.data());
  EXPECT_EQ(r.centroids, c0);
}

TEST(KMeans, WeightsPullTheCentroid) {
  // One cluster: the centroid is the weighted mean, 0 * 1 + 4 * 3 over 4 = 3.
  const std::vector<float> x = {0, 4};
  const std::vector<float> w = {1, 3};
  KMeansParams p;
  p.k = 1;
  p.iters = 2;
  const auto r = kvlab::kmeans(x.data(), 2, 1, p, w.data());
  EXPECT_FLOAT_EQ(r.centroids[0], 3.0f);
  EXPECT_DOUBLE_EQ(r.objective, 1 * 9.0 + 3 * 1.0);
  EXPECT_DOUBLE_EQ(r.weight_sum, 4.0);
  EXPECT_DOUBLE_EQ(r.mse(), 3.0);
}

TEST(KMeans, IntegerWeightsEqualRepeatedPoints) {
  const auto x = blobs(300, 2, 5, 3);
  std::vector<float> w(300), xr;
  for (int i = 0; i < 300; ++i) {
    w[i] = 1 + i % 3;
    for (int r = 0; r < w[i]; ++r) xr.insert(xr.end(), {x[2 * i], x[2 * i + 1]});
  }
  std::vector<float> c0(x.begin(), x.begin() + 5 * 2);
  KMeansParams p;
  p.k = 5;
  p.iters = 10;
  const auto a = kvlab::kmeans(x.data(), 300, 2, p, w.data(), c0.data());
  const auto b = kvlab::kmeans(xr.data(), xr.size() / 2, 2, p, nullptr, c0.data());
  for (size_t i = 0; i < a.centroids.size(); ++i) EXPECT_NEAR(a.centroids[i], b.centroids[i], 1e-5);
  EXPECT_NEAR(a.objective, b.objective, 1e-6 * b.objective);
}

TEST(KMeans, EmptyClusterIsSplitFromTheLargest) {
  // Start with a centroid far from every point: it gets no points and must be split from the
  // largest cluster, not left empty.
  const std::vector<float> x = {0, 0.1f, 0.2f, 0.3f, 10, 10.1f};
  const std::vector<float> c0 = {0.1f, 10.0f, 1000.0f};
  KMeansParams p;
  p.k = 3;
  p.iters = 3;
  const auto r = kvlab::kmeans(x.data(), 6, 1, p, nullptr, c0.data());
  EXPECT_EQ(r.iterations[0].splits, 1);
  std::set<int32_t> used(r.assign.begin(), r.assign.end());
  EXPECT_EQ(used.size(), 3u);
  // The four points near 0 now share two centroids: the objective is below the 2-cluster one.
  EXPECT_LT(r.objective, 0.05 + 0.005 + 1e-6);
}

TEST(KMeans, FaissSplitRuleAlsoFillsEmptyClusters) {
  const std::vector<float> x = {0, 0.1f, 0.2f, 0.3f, 10, 10.1f};
  const std::vector<float> c0 = {0.1f, 10.0f, 1000.0f};
  KMeansParams p;
  p.k = 3;
  p.iters = 3;
  p.split = kvlab::KMeansSplit::Faiss;
  const auto r = kvlab::kmeans(x.data(), 6, 1, p, nullptr, c0.data());
  EXPECT_EQ(r.iterations[0].splits, 1);
  EXPECT_EQ(std::set<int32_t>(r.assign.begin(), r.assign.end()).size(), 3u);
}

TEST(KMeans, SameResultForAnyThreadCount) {
  const int64_t n = 70000, d = 4;  // more than one accumulation chunk
  const auto x = blobs(n, d, 40, 5);
  for (KMeansInit init : {KMeansInit::Random, KMeansInit::KMeansPP, KMeansInit::Farthest}) {
    KMeansParams p;
    p.k = 64;
    p.iters = 6;
    p.init = init;
    p.restarts = 2;
    p.threads = 1;
    const auto a = kvlab::kmeans(x.data(), n, d, p);
    p.threads = 2;
    const auto b = kvlab::kmeans(x.data(), n, d, p);
    p.threads = 3;
    const auto c = kvlab::kmeans(x.data(), n, d, p);
    EXPECT_EQ(a.centroids, b.centroids) << to_string(init);
    EXPECT_EQ(a.centroids, c.centroids) << to_string(init);
    EXPECT_EQ(a.assign, b.assign);
    EXPECT_EQ(a.objective, c.objective);
  }
}

TEST(KMeans, RestartsKeepTheBest) {
  const auto x = blobs(2000, 2, 12, 9);
  KMeansParams p;
  p.k = 12;
  p.iters = 4;
  p.restarts = 4;
  const auto r = kvlab::kmeans(x.data(), 2000, 2, p);
  ASSERT_EQ(r.restart_objectives.size(), 4u);
  for (double o : r.restart_objectives) EXPECT_LE(r.objective, o);
  EXPECT_EQ(r.objective, r.restart_objectives[r.best_restart]);
}

TEST(KMeans, ObjectiveNeverRisesAndSeedsDiffer) {
  const auto x = blobs(5000, 8, 30, 11);
  KMeansParams p;
  p.k = 30;
  p.iters = 10;
  p.init = KMeansInit::Random;
  const auto r = kvlab::kmeans(x.data(), 5000, 8, p);
  for (size_t i = 1; i < r.iterations.size(); ++i)
    EXPECT_LE(r.iterations[i].objective, r.iterations[i - 1].objective * (1 + 1e-6));
  p.seed = 99;
  EXPECT_NE(kvlab::kmeans(x.data(), 5000, 8, p).centroids, r.centroids);
}

TEST(KMeans, AssignmentIsTheTrueNearestCentroid) {
  // Odd dimension (runtime-d kernel) and k not a multiple of 16 (padded lanes).
  const int64_t n = 999, d = 5, k = 37;
  const auto x = blobs(n, d, 10, 13);
  KMeansParams p;
  p.k = k;
  p.iters = 3;
  const auto r = kvlab::kmeans(x.data(), n, d, p);
  for (int64_t i = 0; i < n; ++i) {
    double best = 1e300;
    for (int64_t c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += std::pow((double)x[i * d + j] - r.centroids[c * d + j], 2);
      best = std::min(best, s);
    }
    double mine = 0;
    for (int64_t j = 0; j < d; ++j)
      mine += std::pow((double)x[i * d + j] - r.centroids[r.assign[i] * d + j], 2);
    EXPECT_NEAR(mine, best, 1e-4 * (1 + best)) << "point " << i;
  }
}

TEST(KMeans, SubsamplingIsOptIn) {
  const auto x = blobs(4000, 2, 8, 17);
  KMeansParams p;
  p.k = 8;
  p.iters = 3;
  EXPECT_EQ(kvlab::kmeans(x.data(), 4000, 2, p).trained_points, 4000);
  p.max_points_per_centroid = 100;
  const auto r = kvlab::kmeans(x.data(), 4000, 2, p);
  EXPECT_EQ(r.trained_points, 800);
  EXPECT_EQ(r.assign.size(), 4000u);  // the final assignment covers every point
}

TEST(KMeans, BatchEqualsOneByOne) {
  std::vector<std::vector<float>> xs;
  for (int g = 0; g < 5; ++g) xs.push_back(blobs(1000 + 100 * g, 4, 6, 20 + g));
  KMeansParams p;
  p.k = 16;
  p.iters = 5;
  p.init = KMeansInit::KMeansPP;
  std::vector<kvlab::KMeansProblem> probs;
  for (auto& x : xs) probs.push_back({x.data(), (int64_t)x.size() / 4, 4, nullptr, nullptr});
  const auto batch = kvlab::kmeans_batch(probs, p);
  ASSERT_EQ(batch.size(), 5u);
  for (int g = 0; g < 5; ++g) {
    p.threads = 1;
    EXPECT_EQ(batch[g].centroids, kvlab::kmeans(xs[g].data(), xs[g].size() / 4, 4, p).centroids);
  }
}

TEST(KMeans, KMeansPlusPlusBeatsRandomOnWellSeparatedBlobs) {
  // Averaged over seeds: random starts often put two centroids in one blob and none in another.
  const auto x = blobs(6000, 2, 60, 23);
  double pp = 0, rnd = 0;
  for (uint64_t s = 0; s < 5; ++s) {
    KMeansParams p;
    p.k = 60;
    p.iters = 10;
    p.seed = s;
    p.init = KMeansInit::KMeansPP;
    pp += kvlab::kmeans(x.data(), 6000, 2, p).objective;
    p.init = KMeansInit::Random;
    rnd += kvlab::kmeans(x.data(), 6000, 2, p).objective;
  }
  EXPECT_LT(pp, rnd);
}

}  // namespace
