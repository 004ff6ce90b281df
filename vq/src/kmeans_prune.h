// Exact pruning of the assignment (Hamerly's bounds): each point keeps an upper bound u on its
// distance to its centroid and a lower bound l on its distance to every other centroid; when the
// centroids move by delta, u grows by its centroid's delta and l shrinks by the largest other
// delta. A point with u^2 + margin < l^2 keeps its centroid without a scan. The margin covers the
// rounding of the kernel's f = ||c||^2 - 2 x.c (kmeans_assign.h), so a skipped point gets exactly
// the centroid the full scan would give it: results are bit-identical to scanning every point.
#pragma once
#include <cstdint>
#include <vector>

#include "kmeans_assign.h"

namespace kvlab::detail {

class PrunedAssign {
 public:
  PrunedAssign(const float* x, int64_t n, int64_t d, int threads);
  // assign[0..n): the nearest of the k centroids (packed in `pack`) for every point; the first
  // call (or a call with another k) scans every point, later calls only those the bounds leave open.
  void assign(const float* centroids, const CentroidPack& pack, int32_t* assign);
  int64_t scanned() const { return scanned_; }  // points fully scanned by the last call

 private:
  const float* x_;
  int64_t n_, d_;
  int nt_;
  int64_t k_ = 0, scanned_ = 0;
  std::vector<double> xnorm_, u_, l_;  // ||x||, the bounds
  std::vector<float> prev_;            // centroids of the last call
  std::vector<float> fb_, fs_;         // f of the nearest and second-nearest centroid (scratch)
};

}  // namespace kvlab::detail
