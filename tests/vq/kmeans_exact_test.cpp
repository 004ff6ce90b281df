// The assignment's fixed arithmetic (kmeans_assign.h: ||c||^2 without FMA, then one FMA per
// coordinate, lowest index on ties) and the exact pruning (kmeans_prune.h): kmeans() must give
// bit for bit what plain Lloyd iterations over a full scan of every point give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvlab/kmeans.h"

namespace {

std::vector<float> blobs(int64_t n, int64_t d, int64_t centers, float offset, float spread, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> mu(centers * d), x(n * d);
  for (auto& v : mu) v = offset + g(rng) * 4.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = mu[(rng() % centers) * d + j] + spread * g(rng);
  return x;
}

// f(c) = ||c||^2 - 2 x.c in the documented order, scalar.
int32_t nearest_ref(const float* x, const float* c, int64_t k, int64_t d) {
  float best = std::numeric_limits<float>::infinity();
  int32_t bi = 0;
  for (int64_t i = 0; i < k; ++i) {
    float s = 0;
    for (int64_t j = 0; j < d; ++j) {
      const float p = c[i * d + j] * c[i * d + j];
      s = s + p;
    }
    for (int64_t j = 0; j < d; ++j) s = std::fma(c[i * d + j], -2.0f * x[j], s);
    if (s < best) {
      best = s;
      bi = (int32_t)i;
    }
  }
  return bi;
}

// Plain Lloyd: full scan, double sums in point order, empty clusters split from the heaviest.
// objectives[it]: iteration it's objective, per centroid in point order, then over centroids.
std::vector<float> lloyd_ref(const std::vector<float>& x, int64_t n, int64_t d, std::vector<float> c,
                             int64_t k, int iters, std::vector<double>* objectives = nullptr) {
  std::vector<int32_t> a(n);
  for (int it = 0; it < iters; ++it) {
    kvlab::kmeans_assign(x.data(), n, d, c.data(), k, a.data(), nullptr, 1);
    if (objectives) {
      std::vector<double> per(k, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        double e = 0;
        for (int64_t j = 0; j < d; ++j) {
          const double u = (double)x[i * d + j] - c[a[i] * d + j];
          e += u * u;
        }
        per[a[i]] += e;
      }
      double total = 0;
      for (double v : per) total += v;
      objectives->push_back(total);
    }
    std::vector<double> s(k * d, 0.0), m(k, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d; ++j) s[a[i] * d + j] += x[i * d + j];
      m[a[i]] += 1;
    }
    for (int64_t ci = 0; ci < k; ++ci)
      if (m[ci] > 0)
        for (int64_t j = 0; j < d; ++j) c[ci * d + j] = (float)(s[ci * d + j] / m[ci]);
    for (int64_t ci = 0; ci < k; ++ci) {
      if (m[ci] > 0) continue;
      const int64_t cj = std::max_element(m.begin(), m.end()) - m.begin();
      for (int64_t j = 0; j < d; ++j) {
        const float e = (j % 2 == 0) ? 1.0f / 1024 : -1.0f / 1024;
        c[ci * d + j] = c[cj * d + j] * (1 + e);
        c[cj * d + j] = c[cj * d + j] * (1 - e);
      }
      m[ci] = m[cj] / 2;
      m[cj] -= m[ci];
    }
  }
  return c;
}

TEST(KMeansExact, AssignmentFollowsTheDocumentedArithmetic) {
  for (int64_t d : {1, 2, 3, 4, 5, 8, 16, 17, 32}) {
    const int64_t n = 700, k = 53;
    const auto x = blobs(n, d, 9, 0.0f, 0.5f, 100 + d);
    std::vector<float> c(x.begin(), x.begin() + k * d);
    std::copy(c.begin(), c.begin() + d, c.begin() + 20 * d);  // an exact duplicate: ties go to 0
    std::vector<int32_t> a(n);
    kvlab::kmeans_assign(x.data(), n, d, c.data(), k, a.data(), nullptr, 2);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(a[i], nearest_ref(&x[i * d], c.data(), k, d)) << "d " << d << " point " << i;
  }
}

TEST(KMeansExact, PrunedRunsEqualFullScans) {
  struct Shape {
    int64_t n, d, k;
    float offset, spread;
  };
  // Small spreads far from the origin stress the pruning's rounding margin; k = 300 on 1500
  // points empties clusters (splits move centroids far).
  for (const Shape s :
       {Shape{6000, 2, 64, 0, 0.3f}, Shape{3000, 5, 100, 0, 0.5f}, Shape{4000, 8, 256, 0, 0.3f},
        Shape{3000, 16, 300, 0, 0.2f}, Shape{2500, 16, 33, 0, 1.0f}, Shape{3000, 16, 128, 500, 0.01f},
        Shape{1500, 3, 300, 0, 0.2f}, Shape{2000, 32, 40, -3, 2.0f}}) {
    const auto x = blobs(s.n, s.d, 24, s.offset, s.spread, 7 + s.d);
    std::vector<float> c0(x.begin(), x.begin() + s.k * s.d);
    kvlab::KMeansParams p;
    p.k = s.k;
    p.iters = 12;
    p.threads = 2;
    const auto r = kvlab::kmeans(x.data(), s.n, s.d, p, nullptr, c0.data());
    std::vector<double> objectives;
    EXPECT_EQ(r.centroids, lloyd_ref(x, s.n, s.d, c0, s.k, p.iters, &objectives))
        << "n " << s.n << " d " << s.d << " k " << s.k;
    ASSERT_EQ(r.iterations.size(), objectives.size());
    for (size_t it = 0; it < objectives.size(); ++it)  // the same sums in the same order: equal bits
      EXPECT_EQ(r.iterations[it].objective, objectives[it])
          << "d " << s.d << " k " << s.k << " iteration " << it;
    std::vector<int32_t> a(s.n);
    kvlab::kmeans_assign(x.data(), s.n, s.d, r.centroids.data(), s.k, a.data(), nullptr, 1);
    EXPECT_EQ(r.assign, a);
  }
}

// d = 1 has its own loops (points across lanes; sums of a run of equal assignments in
// registers): the same run as the general loops on the points padded with a zero coordinate,
// which adds exact zeros only. Sorted points (as kvquant passes them) make long runs; weights,
// k beyond one 16-centroid block and 2 threads (centroid ranges per thread) are covered too.
TEST(KMeansExact, OneDimensionEqualsTheGeneralLoops) {
  for (const bool sorted : {false, true})
    for (const int64_t k : {4, 16, 37})
      for (const bool weighted : {false, true}) {
        const int64_t n = 3000;
        auto x = blobs(n, 1, 7, 0.5f, 0.7f, 11 + k);
        if (sorted) std::sort(x.begin(), x.end());
        std::vector<float> x2(2 * n, 0.0f), w(n);
        for (int64_t i = 0; i < n; ++i) x2[2 * i] = x[i], w[i] = (float)(1 + i % 5) * 0.25f;
        kvlab::KMeansParams p;
        p.k = k;
        p.iters = 15;
        p.init = kvlab::KMeansInit::KMeansPP;
        p.threads = 2;
        const float* wp = weighted ? w.data() : nullptr;
        const auto r1 = kvlab::kmeans(x.data(), n, 1, p, wp);
        const auto r2 = kvlab::kmeans(x2.data(), n, 2, p, wp);
        std::vector<float> c2(k);
        for (int64_t c = 0; c < k; ++c) c2[c] = r2.centroids[2 * c];
        const std::string what = "sorted " + std::to_string(sorted) + " k " + std::to_string(k) +
                                 " weighted " + std::to_string(weighted);
        EXPECT_EQ(r1.centroids, c2) << what;
        EXPECT_EQ(r1.assign, r2.assign) << what;
        EXPECT_EQ(r1.objective, r2.objective) << what;
        ASSERT_EQ(r1.iterations.size(), r2.iterations.size());
        for (size_t i = 0; i < r1.iterations.size(); ++i)
          EXPECT_EQ(r1.iterations[i].objective, r2.iterations[i].objective) << what << " iteration " << i;
      }
}

}  // namespace
