// Spearman's rho with average ranks for ties; top-k recall.
#include "kvlab/rank_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace kvlab {

std::vector<double> average_ranks(const std::vector<double>& x) {
  const size_t n = x.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> rank(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && x[order[j + 1]] == x[order[i]]) ++j;
    const double r = (double)(i + j) / 2.0 + 1.0;  // average of ranks i+1 .. j+1
    for (size_t m = i; m <= j; ++m) rank[order[m]] = r;
    i = j + 1;
  }
  return rank;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    throw std::invalid_argument("spearman: sizes differ (" + std::to_string(a.size()) + " vs " +
                                std::to_string(b.size()) + ")");
  const size_t n = a.size();
  if (n < 2) return NAN;
  const std::vector<double> ra = average_ranks(a), rb = average_ranks(b);
  const double mean = (double)(n + 1) / 2.0;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    const double da = ra[i] - mean, db = rb[i] - mean;
    sab += da * db;
    saa += da * da;
    sbb += db * db;
  }
  if (saa == 0 || sbb == 0) return NAN;
  return sab / std::sqrt(saa * sbb);
}

std::vector<int64_t> top_k(const std::vector<double>& x, int64_t k) {
  if (k < 0 || k > (int64_t)x.size())
    throw std::invalid_argument("top_k: k=" + std::to_string(k) + " is outside [0, " +
                                std::to_string(x.size()) + "]");
  std::vector<int64_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  idx.resize(k);
  return idx;
}

double top_k_recall(const std::vector<double>& truth, const std::vector<double>& guess, int64_t k) {
  if (truth.size() != guess.size())
    throw std::invalid_argument("top_k_recall: sizes differ (" + std::to_string(truth.size()) + " vs " +
                                std::to_string(guess.size()) + ")");
  if (k == 0) return NAN;
  std::vector<int64_t> a = top_k(truth, k), b = top_k(guess, k);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<int64_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return (double)both.size() / (double)k;
}

}  // namespace kvlab
