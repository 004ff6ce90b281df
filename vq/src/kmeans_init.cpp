#include "kmeans_init.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <numeric>

namespace kvlab::detail {

std::vector<int64_t> sample_indices(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i + (int64_t)(rng() % (uint64_t)(n - i));
    std::swap(perm[i], perm[j]);
  }
  perm.resize(k);
  return perm;
}

namespace {

double dist2(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t j = 0; j < d; ++j) {
    const double t = (double)a[j] - b[j];
    s += t * t;
  }
  return s;
}

// min_dist[i] = min(min_dist[i], ||x_i - c||^2) for every point, in parallel (per point: exact);
// with `mass`, also the k-means++ sampling mass w_i * min_dist[i] (0 for chosen points).
void update_min(const float* x, int64_t n, int64_t d, const float* c, std::vector<double>& min_dist, int nt,
                std::vector<double>* mass = nullptr, const std::vector<char>* chosen = nullptr,
                const float* weights = nullptr) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && n * d >= (1 << 20))
  for (int64_t i = 0; i < n; ++i) {
    min_dist[i] = std::min(min_dist[i], dist2(x + i * d, c, d));
    if (mass) (*mass)[i] = (*chosen)[i] ? 0.0 : min_dist[i] * (weights ? weights[i] : 1.0);
  }
}

constexpr int64_t kChunk = 4096;  // fixed: chunk sums do not depend on the thread count

// Index drawn with probability mass[i] / sum(mass); chunk sums in order, then within the chunk.
int64_t draw(const std::vector<double>& mass, std::mt19937_64& rng, int nt) {
  const int64_t n = mass.size(), nc = (n + kChunk - 1) / kChunk;
  std::vector<double> chunk(nc, 0.0);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && n >= (1 << 20))
  for (int64_t c = 0; c < nc; ++c) {
    double s = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += mass[i];
    chunk[c] = s;
  }
  double total = 0;
  for (double s : chunk) total += s;
  if (!(total > 0)) return -1;  // every point coincides with a chosen centroid
  double r = uniform01(rng) * total;
  int64_t c = 0;
  for (; c + 1 < nc && r >= chunk[c]; ++c) r -= chunk[c];
  int64_t last = -1;
  for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
    if (mass[i] <= 0) continue;
    last = i;
    if (r < mass[i]) return i;
    r -= mass[i];
  }
  return last;  // rounding left r just past the chunk's end
}

}  // namespace

std::vector<float> init_centroids(const float* x, int64_t n, int64_t d, int64_t k, KMeansInit how,
                                  const float* weights, std::mt19937_64& rng, int nt) {
  std::vector<float> c(k * d);
  auto copy_point = [&](int64_t ci, int64_t i) { std::copy(x + i * d, x + (i + 1) * d, &c[ci * d]); };
  if (how == KMeansInit::Random) {
    const auto idx = sample_indices(n, k, rng);
    for (int64_t ci = 0; ci < k; ++ci) copy_point(ci, idx[ci]);
    return c;
  }
  // The first centroid: a uniformly random point (kmeans++: weighted by w).
  std::vector<double> min_dist(n, std::numeric_limits<double>::infinity()), mass(n);
  int64_t first = (int64_t)(rng() % (uint64_t)n);
  if (how == KMeansInit::KMeansPP && weights) {
    for (int64_t i = 0; i < n; ++i) mass[i] = weights[i];
    first = draw(mass, rng, nt);
  }
  copy_point(0, first);
  std::vector<char> chosen(n, 0);
  chosen[first] = 1;
  for (int64_t ci = 1; ci < k; ++ci) {
    const bool pp = how == KMeansInit::KMeansPP;
    update_min(x, n, d, &c[(ci - 1) * d], min_dist, nt, pp ? &mass : nullptr, &chosen, weights);
    int64_t pick = -1;
    if (pp) {
      pick = draw(mass, rng, nt);
    } else {  // farthest: the largest distance, lowest index on ties
      double best = -1;
      for (int64_t i = 0; i < n; ++i)
        if (!chosen[i] && min_dist[i] > best) {
          best = min_dist[i];
          pick = i;
        }
    }
    // Fewer distinct points than k: fill with unchosen points in index order (k <= n holds).
    if (pick < 0)
      for (int64_t i = 0; i < n && pick < 0; ++i)
        if (!chosen[i]) pick = i;
    chosen[pick] = 1;
    copy_point(ci, pick);
  }
  return c;
}

}  // namespace kvlab::detail
