// KVQuant-style arithmetic: per-channel k-means levels, per-token values, dense-and-sparse outliers.
#include "kvlab/kvquant.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kvlab/half.h"
#include "kvlab/kmeans.h"

namespace kvlab {
namespace {

int64_t index_bits(int64_t D) {
  int64_t b = 0;
  while ((int64_t{1} << b) < D) ++b;
  return b;
}

// Channels of one token ordered by decreasing score, the lower channel first on a tie; the
// first n_out are the token's outliers.
void top_channels(const std::vector<float>& score, int64_t n_out, std::vector<int64_t>& order) {
  order.resize(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n_out, order.end(), [&](int64_t a, int64_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

}  // namespace

int64_t kvquant_outlier_count(double share, int64_t D) { return std::llround(share * (double)D); }

std::vector<float> kvquant_train_levels(const float* calib, int64_t n, int64_t D, int bits, double share) {
  const int64_t k = int64_t{1} << bits, drop = (int64_t)std::floor(share * (double)n / 2.0);
  const int64_t m = n - 2 * drop;
  if (m < k)
    throw std::invalid_argument("kvquant: " + std::to_string(n) + " calibration tokens (" +
                                std::to_string(m) + " after dropping outliers) are fewer than the " +
                                std::to_string(k) + " levels of kbits=" + std::to_string(bits));
  KMeansParams p;
  p.k = k;
  p.iters = 25;
  p.init = KMeansInit::KMeansPP;
  p.threads = 1;  // callers run heads in parallel
  std::vector<float> levels(D * k), col(n);
  for (int64_t c = 0; c < D; ++c) {
    for (int64_t t = 0; t < n; ++t) col[t] = calib[t * D + c];
    std::sort(col.begin(), col.end());
    const KMeansResult r = kmeans(col.data() + drop, m, 1, p);
    float* l = &levels[c * k];
    for (int64_t j = 0; j < k; ++j) l[j] = round_to_half(r.centroids[j]);
    std::sort(l, l + k);
  }
  return levels;
}

void kvquant_keys(const float* x, int64_t T, int64_t D, const std::vector<float>& levels, int bits,
                  int64_t n_out, float* out) {
  const int64_t k = int64_t{1} << bits;
  if ((int64_t)levels.size() != D * k)
    throw std::invalid_argument("kvquant: " + std::to_string(levels.size()) + " levels for " +
                                std::to_string(D) + " channels of " + std::to_string(k));
  std::vector<float> err(D);
  std::vector<int64_t> order;
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * D;
    float* o = out + t * D;
    for (int64_t c = 0; c < D; ++c) {
      const float* l = &levels[c * k];
      // The first level above x and the one below it; ties go to the lower.
      const int64_t up = std::lower_bound(l, l + k, xr[c]) - l;
      int64_t best = up == k ? k - 1 : up;
      if (up > 0 && up < k && xr[c] - l[up - 1] <= l[up] - xr[c]) best = up - 1;
      o[c] = l[best];
      err[c] = std::fabs(xr[c] - o[c]);
    }
    if (n_out == 0) continue;
    top_channels(err, n_out, order);
    for (int64_t j = 0; j < n_out; ++j) o[order[j]] = round_to_half(xr[order[j]]);
  }
}

void kvquant_values(const float* x, int64_t T, int64_t D, int bits, int64_t n_out, float* out) {
  const float qmax = (float)((1 << bits) - 1);
  std::vector<float> mag(D);
  std::vector<int64_t> order;
  std::vector<char> sparse(D);
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * D;
    float* o = out + t * D;
    std::fill(sparse.begin(), sparse.end(), 0);
    if (n_out > 0) {
      for (int64_t c = 0; c < D; ++c) mag[c] = std::fabs(xr[c]);
      top_channels(mag, n_out, order);
      for (int64_t j = 0; j < n_out; ++j) sparse[order[j]] = 1;
    }
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t c = 0; c < D; ++c)
      if (!sparse[c]) lo = std::min(lo, xr[c]), hi = std::max(hi, xr[c]);
    const float scale = round_to_half((hi - lo) / qmax), zero = round_to_half(lo);
    for (int64_t c = 0; c < D; ++c) {
      if (sparse[c]) {
        o[c] = round_to_half(xr[c]);
      } else if (scale == 0.0f) {
        o[c] = zero;
      } else {
        const float code = std::clamp(std::nearbyint((xr[c] - zero) / scale), 0.0f, qmax);
        o[c] = code * scale + zero;
      }
    }
  }
}

double kvquant_key_bits(int bits, int64_t n_out, int64_t T, int64_t D) {
  return bits + (double)((int64_t{1} << bits) * 16) / (double)T +
         (double)(n_out * (16 + index_bits(D))) / (double)D;
}

double kvquant_value_bits(int bits, int64_t n_out, int64_t D) {
  return bits + 32.0 / (double)D + (double)(n_out * (16 + index_bits(D))) / (double)D;
}

}  // namespace kvlab
