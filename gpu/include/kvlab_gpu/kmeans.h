// k-means on the GPU for many small problems at once (every head x channel group of a layer, or
// of a model, in one launch sequence), and the nearest-entry counts of `kvlab vq reorder`.
//
// Same result as the CPU (kvlab::kmeans in vq/, default empty-cluster rule, no weights) from the
// same starting centroids, bit for bit: f = ||c||^2 - 2 x.c in the CPU's fixed arithmetic
// (vq/src/kmeans_assign.h: ||c||^2 as rounded products added in coordinate order, then one FMA
// per coordinate; lowest index on ties), each centroid's sum in double over its points in point
// order (a stable radix sort of the points by centroid gives that order), the same float
// division and the same split of empty clusters from the heaviest one. Checked by
// `kvlab-gpu-kmeans --validate` (gpu/tools/kmeans_main.cpp): 0 differing centroid bits and
// assignments is the pass condition, and for the k-means++ starts drawn on the GPU 0 differing
// start bits against the CPU's kmeans_start.
//
// Host code only here (C++17); the kernels are in gpu/src/kmeans.cu. Depends on core/ alone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::gpu {

// P independent problems of n points in d dimensions with k centroids each, stored one after
// another: x [P][n][d], centroids [P][k][d], assign [P][n], counts [P][k].
struct KMeansShape {
  int64_t problems = 0, n = 0, d = 0, k = 0;
};

// Throws std::invalid_argument naming the parameter when the kernels cannot take the shape:
// d must be 1..8, 16 or 32 (compiled dimensions); 1 <= k <= n; k <= 65536.
void check_kmeans_shape(const KMeansShape& s);

// k-means++ starts drawn on the GPU (src/kmeans_pp.cu): the CPU's kmeans_start picks
// (KMeansInit::KMeansPP, this seed, no weights) for every problem, bit for bit.
struct KMeansPlusPlus {
  uint64_t seed = 0;
  double seconds = 0;  // time spent drawing the starts (device synchronized), added up
};

// `iters` Lloyd iterations from the given centroids (host pointers): centroids in = the starts,
// out = the result; assign (may be null) = the nearest final centroid of every point. With `pp`
// the starts are drawn on the GPU instead (centroids is then output only).
void kmeans_batch(const float* x, const KMeansShape& s, int iters, float* centroids, int32_t* assign,
                  KMeansPlusPlus* pp = nullptr);

// The k-means++ starts alone, on device pointers: centroids [P][k][d] out.
void kmeanspp_device(const float* x, const KMeansShape& s, uint64_t seed, float* centroids);

// The same on device pointers (x, centroids, assign on the current CUDA device).
void kmeans_batch_device(const float* x, const KMeansShape& s, int iters, float* centroids, int32_t* assign);

// Nearest centroid of every point (assign, may be null) and points per centroid (counts, may be
// null), host pointers: the codes and access counts of vq_encode / vq_usage, exactly.
void nearest_batch(const float* x, const KMeansShape& s, const float* centroids, int32_t* assign,
                   int64_t* counts);

// Bench data on the device: problem p's points drawn around `centers` random centres (Gaussian,
// spread 0.3), and as starts k points of each problem picked by a hash; deterministic for `seed`.
void fill_kmeans_bench(float* x, float* centroids, const KMeansShape& s, int64_t centers, uint64_t seed);

}  // namespace kvlab::gpu
