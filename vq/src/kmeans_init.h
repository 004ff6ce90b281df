// Starting centroids for k-means: a random sample of distinct points (as faiss), k-means++
// (D^2-weighted sampling, times the point weights), or farthest point (each new centroid the
// point farthest from those chosen, the first one random). Deterministic for a seed and any
// thread count: sums over points run over fixed chunks combined in order.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kvlab/kmeans.h"

namespace kvlab::detail {

// Uniform double in [0, 1) from 53 random bits (std::uniform_real_distribution may differ
// between standard libraries).
inline double uniform01(std::mt19937_64& rng) { return (double)(rng() >> 11) * 0x1.0p-53; }

// k distinct indices of [0, n), by a partial Fisher-Yates shuffle.
std::vector<int64_t> sample_indices(int64_t n, int64_t k, std::mt19937_64& rng);

// k x d centroids.
std::vector<float> init_centroids(const float* x, int64_t n, int64_t d, int64_t k, KMeansInit how,
                                  const float* weights, std::mt19937_64& rng, int threads);

}  // namespace kvlab::detail
