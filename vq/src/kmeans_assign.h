// The k-means assignment kernel: nearest centroid by ||c||^2 - 2 x.c (||x||^2 is the same for
// every centroid), centroids packed 16 to a block and transposed so one vector holds one
// coordinate of 16 centroids; 4 points share each loaded block.
#pragma once
#include <cstdint>
#include <vector>

namespace kvlab::detail {

constexpr int kLanes = 16;

struct CentroidPack {
  int64_t k = 0, d = 0, blocks = 0;
  std::vector<float> ct;     // [blocks][d][16]
  std::vector<float> norm2;  // [blocks * 16]; +inf on padding lanes, which never win
  void build(const float* centroids, int64_t k, int64_t d);
};

// assign[i] = argmin_c (||c||^2 - 2 x_i.c), lowest index on ties. Parallel over fixed blocks
// of points: a point's answer does not depend on the thread count. threads <= 0: default.
void assign_nearest(const float* x, int64_t n, const CentroidPack& pack, int32_t* assign, int threads);

}  // namespace kvlab::detail
