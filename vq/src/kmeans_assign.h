// The k-means assignment kernel: nearest centroid by f(c) = ||c||^2 - 2 x.c (||x||^2 is the same
// for every centroid), centroids packed 16 to a block and transposed so one vector holds one
// coordinate of 16 centroids; it is read in groups of the CPU's vector width (16 lanes with
// AVX-512, 8 with AVX2), each loaded group serving 4-8 points whose -2x is computed once.
//
// f is computed in one fixed order on every CPU and on the GPU (gpu/src/kmeans.cu): ||c||^2 as
// float products added in coordinate order (no FMA), then one fused multiply-add per coordinate,
// f = fma(c_j, -2 x_j, f) for j = 0..d-1 (-2 x_j is exact). The nearest centroid is the lowest
// index with the smallest f, so every machine and thread count picks the same one.
#pragma once
#include <cstdint>
#include <vector>

namespace kvlab::detail {

constexpr int kLanes = 16;

struct CentroidPack {
  int64_t k = 0, d = 0, blocks = 0;
  std::vector<float> ct;     // [blocks][d][16]
  std::vector<float> norm2;  // [blocks * 16]; +inf on padding lanes, which never win
  float max_norm = 0;        // largest ||c|| (the pruning's rounding margin)
  void build(const float* centroids, int64_t k, int64_t d);
};

// assign[i] = argmin_c f(c), lowest index on ties. Parallel over fixed blocks of points: a
// point's answer does not depend on the thread count. threads <= 0: default.
void assign_nearest(const float* x, int64_t n, const CentroidPack& pack, int32_t* assign, int threads);

// The same for the points idx[0..m) only (one thread), also returning f of the nearest and of the
// second-nearest centroid (+inf when k == 1): assign[idx[i]], best[idx[i]], second[idx[i]].
void assign_listed(const float* x, const int64_t* idx, int64_t m, const CentroidPack& pack, int32_t* assign,
                   float* best, float* second);

}  // namespace kvlab::detail
