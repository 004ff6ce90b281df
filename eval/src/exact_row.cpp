// One query row against one method, straight from the definitions in fp64. The tiled kernel
// falls back to it when the reference's and the method's distributions are so far apart that one
// set of weights underflows on the other's scale (a rare row; O(T D) work).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attend.h"

namespace kvlab::detail {

RowErrors exact_row_errors(const TileJob& j, int64_t r, int m) {
  const int64_t D = j.D, n = j.pos[r] + 1;
  const float* q = j.q + r * D;  // already scaled by 1/sqrt(D)
  const MethodKV& mk = j.methods[m];
  std::vector<double> l(n), lh(n);
  for (int64_t s = 0; s < n; ++s) {
    double dot = 0, dd = 0;
    for (int64_t c = 0; c < D; ++c) {
      dot += (double)q[c] * j.k[s * D + c];
      dd += (double)q[c] * mk.dk[s * D + c];
    }
    l[s] = dot;
    lh[s] = dot - dd;
  }
  auto lse = [](const std::vector<double>& x) {
    const double mx = *std::max_element(x.begin(), x.end());
    double z = 0;
    for (double v : x) z += std::exp(v - mx);
    return mx + std::log(z);
  };
  const double a = lse(l), b = lse(lh);
  RowErrors e;
  std::vector<double> o(D, 0.0), oh(D, 0.0);
  for (int64_t s = 0; s < n; ++s) {
    const double p = std::exp(l[s] - a), ph = std::exp(lh[s] - b);
    e.score_sq += (p - ph) * (p - ph);
    e.kl += p * ((l[s] - a) - (lh[s] - b));
    for (int64_t c = 0; c < D; ++c) {
      o[c] += p * j.v[s * D + c];
      oh[c] += ph * mk.v_hat[s * D + c];
    }
  }
  for (int64_t c = 0; c < D; ++c) e.out_sq += (o[c] - oh[c]) * (o[c] - oh[c]);
  return e;
}

}  // namespace kvlab::detail
