// k-means clustering in the manner of faiss's Clustering: Lloyd iterations from a random sample
// of points, k-means++ or farthest-point starts, or centroids given by the caller; restarts keep
// the best; optional per-point weights; empty clusters split from the largest one. Results are
// the same for any number of threads and any CPU: each point's nearest centroid is computed alone
// in one fixed arithmetic (src/kmeans_assign.h; the GPU repeats it, gpu/src/kmeans.cu), points
// that provably keep their centroid are not rescanned (src/kmeans_prune.h), and each centroid's
// sum runs over its points in point order, in double.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"

namespace kvlab {

enum class KMeansInit { Random, KMeansPP, Farthest };
// Which cluster an empty one splits: the heaviest (default, no random numbers), or faiss
// 1.7.3's rule (walk the clusters drawing std::mt19937(1234) numbers until one falls below
// (n_c - 1) / (n - k)), for comparisons with faiss step for step.
enum class KMeansSplit { Largest, Faiss };
template <>
struct EnumNames<KMeansInit> {
  static constexpr EnumName<KMeansInit> names[] = {
      {KMeansInit::Random, "random"}, {KMeansInit::KMeansPP, "kmeans++"}, {KMeansInit::Farthest, "farthest"}};
};
inline const char* to_string(KMeansInit i) { return enum_name(i); }  // "random", "kmeans++", "farthest"
KMeansInit parse_kmeans_init(const std::string& s);  // throws std::invalid_argument listing them

struct KMeansParams {
  int64_t k = 256;       // number of centroids
  int iters = 20;        // Lloyd iterations (centroid updates)
  int restarts = 1;      // independent runs; the lowest final objective is kept
  uint64_t seed = 1234;  // restart r draws from seed + r * 15486557
  KMeansInit init = KMeansInit::Random;
  int64_t max_points_per_centroid = 0;       // > 0: train on a random sample of k * this many points
                                             // (opt-in; 0 uses every point, unlike faiss's 256)
  KMeansSplit split = KMeansSplit::Largest;  // empty-cluster rule
  int threads = 0;                           // OpenMP threads; 0: the OpenMP default
};

struct KMeansIterStats {
  double objective = 0;  // sum of w * ||x - c||^2 under this iteration's assignment (before
                         // its centroid update, as faiss reports it)
  double time_s = 0;     // seconds since the start of this restart, after the update
  double imbalance = 0;  // k * sum(n_c^2) / n^2 over point counts n_c (1: perfectly balanced)
  int64_t splits = 0;    // empty clusters split in this iteration
  int64_t scanned = 0;   // points whose assignment scanned every centroid (k > 16, d > 8: the others
                         // kept theirs by exact distance bounds; same result as a full scan)
};

struct KMeansResult {
  int64_t k = 0, d = 0, n = 0;
  std::vector<float> centroids;             // k x d, row-major
  std::vector<int32_t> assign;              // n: nearest final centroid (lowest index on ties)
  std::vector<KMeansIterStats> iterations;  // of the kept restart
  std::vector<double> restart_objectives;   // final objective of every restart
  int best_restart = 0;
  int64_t trained_points = 0;  // < n only with max_points_per_centroid
  double objective = 0;        // sum of w * ||x - c(x)||^2 with the final centroids
  double weight_sum = 0;       // sum of w (n without weights)
  double mse() const { return weight_sum > 0 ? objective / weight_sum : 0; }  // per vector
};

// x: n x d row-major float32. weights: n non-negative finite values with a positive sum, or null.
// init: k x d starting centroids (hot start; restarts > 1 then repeat the same run, so one run
// is made), or null to start as params.init says. Throws std::invalid_argument naming the
// parameter for k < 1, k > n, d < 1, iters < 0, restarts < 1, NaN/Inf in x, init or weights,
// negative weights or a zero weight sum.
KMeansResult kmeans(const float* x, int64_t n, int64_t d, const KMeansParams& params,
                    const float* weights = nullptr, const float* init = nullptr);

// The starting centroids kmeans() draws for restart 0 (params.init, params.seed): k x d. Lets
// another trainer (the GPU's, gpu/include/kvlab_gpu/kmeans.h) start where the CPU starts.
std::vector<float> kmeans_start(const float* x, int64_t n, int64_t d, const KMeansParams& params,
                                const float* weights = nullptr);

// The input checks of kmeans() alone (same errors), for a trainer that draws its starts elsewhere.
void kmeans_check(const float* x, int64_t n, int64_t d, const KMeansParams& params,
                  const float* weights = nullptr);

// Many small independent problems (one per layer, KV head, role and channel group) in one
// call, in parallel across problems; each result equals kmeans() on that problem alone.
struct KMeansProblem {
  const float* x = nullptr;
  int64_t n = 0, d = 0;
  const float* weights = nullptr;  // optional
  const float* init = nullptr;     // optional k x d
};
std::vector<KMeansResult> kmeans_batch(const std::vector<KMeansProblem>& problems,
                                       const KMeansParams& params);

// Nearest centroid of each point (lowest index on ties) and the exact squared distance to it.
void kmeans_assign(const float* x, int64_t n, int64_t d, const float* centroids, int64_t k, int32_t* assign,
                   float* dist2 = nullptr, int threads = 0);

}  // namespace kvlab
