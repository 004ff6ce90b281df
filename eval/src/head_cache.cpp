#include "head_cache.h"

#include <algorithm>
#include <cmath>

namespace kvlab::detail {

namespace {

// Reconstruction error over rows [begin, end) of (T, D) and whether x_hat == x on all T rows;
// when `diff` is set, x_hat is replaced by x - x_hat on the way. Per-channel partial sums keep
// the inner loop vectorized and the reduction order fixed.
ReconStats compare(const float* x, float* x_hat, int64_t T, int64_t D, int64_t begin, int64_t end, bool diff,
                   bool& same) {
  std::vector<double> sq(D, 0.0), mx(D, 0.0);
  int differs = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* a = x + t * D;
    float* b = x_hat + t * D;
    const bool quantized = t >= begin && t < end;
    for (int64_t c = 0; c < D; ++c) {
      const float d = a[c] - b[c];  // exact when the two are close; only compared with 0 here
      differs |= a[c] != b[c];
      if (quantized) {
        const double dd = (double)a[c] - (double)b[c];
        sq[c] += dd * dd;
        mx[c] = std::max(mx[c], std::fabs(dd));
      }
      if (diff) b[c] = d;
    }
  }
  ReconStats s;
  for (int64_t c = 0; c < D; ++c) {
    s.sq_err += sq[c];
    s.max_abs = std::max(s.max_abs, mx[c]);
  }
  s.count = std::max<int64_t>(0, end - begin) * D;
  same = !differs;
  return s;
}

}  // namespace

void finish_head_cache(const float* k, const float* v, int64_t T, int64_t D, const Schedule& s,
                       HeadCache& c) {
  bool same_k = false, same_v = false;
  c.value = compare(v, c.r.v.data.data(), T, D, s.value_begin, s.value_end, false, same_v);
  c.key = compare(k, c.r.k.data.data(), T, D, s.key_begin, s.key_end, true, same_k);
  c.identical = same_k && same_v;
  if (c.identical) c.r = {};  // the attention is the reference's: nothing to compute
}

HalfCopies half_copies(const float* k, const float* v, int64_t n) {
  HalfCopies h;
  h.k.resize(n);
  h.v.resize(n);
  int inexact = 0;
  for (int64_t i = 0; i < n; ++i) {
    h.k[i] = (_Float16)k[i];
    h.v[i] = (_Float16)v[i];
    inexact |= ((float)h.k[i] != k[i]) | ((float)h.v[i] != v[i]);
  }
  h.exact = !inexact;
  return h;
}

}  // namespace kvlab::detail
