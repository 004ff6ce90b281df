#include "kvlab/vq_reorder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace kvlab {

std::vector<int64_t> vq_usage(const VQCodebooks& cb, const uint8_t* codes, int64_t T) {
  const int64_t per = (int64_t)cb.spec.stages * cb.groups(), K = cb.spec.entries();
  std::vector<int64_t> u(per * K, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < per; ++b) ++u[b * K + codes[t * per + b]];  // book b = stage * G + group
  return u;
}

std::vector<uint8_t> vq_reorder(VQCodebooks& cb, std::vector<int64_t>& usage, uint8_t* codes, int64_t T) {
  const int64_t per = (int64_t)cb.spec.stages * cb.groups(), K = cb.spec.entries(), v = cb.spec.vec;
  if ((int64_t)usage.size() != per * K) throw std::invalid_argument("vq_reorder: usage has the wrong size");
  std::vector<uint8_t> old_of_new(per * K), new_of_old(per * K);
  std::vector<float> tmp(K * v);
  std::vector<int64_t> cnt(K);
  for (int64_t b = 0; b < per; ++b) {
    int64_t* u = &usage[b * K];
    std::vector<int64_t> order(K);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return u[a] > u[c]; });
    float* book = &cb.data[b * K * v];
    for (int64_t e = 0; e < K; ++e) {
      old_of_new[b * K + e] = (uint8_t)order[e];
      new_of_old[b * K + order[e]] = (uint8_t)e;
      std::copy(book + order[e] * v, book + (order[e] + 1) * v, &tmp[e * v]);
      cnt[e] = u[order[e]];
    }
    std::copy(tmp.begin(), tmp.end(), book);
    std::copy(cnt.begin(), cnt.end(), u);
  }
  if (codes)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < per; ++b) codes[t * per + b] = new_of_old[b * K + codes[t * per + b]];
  return old_of_new;
}

CacheLevels cache_levels(const int64_t* counts, int64_t entries, int64_t entry_bytes, int64_t reg_bytes,
                         int64_t smem_bytes) {
  if (entry_bytes < 1 || reg_bytes < 0 || smem_bytes < 0)
    throw std::invalid_argument("cache_levels: entry_bytes must be >= 1 and the byte budgets >= 0");
  CacheLevels c;
  c.entries = entries;
  double total = 0;
  for (int64_t e = 0; e < entries; ++e) total += counts[e];
  const double mean = total / entries;
  double var = 0;
  for (int64_t e = 0; e < entries; ++e) var += (counts[e] - mean) * (counts[e] - mean);
  const double limit = mean + 3 * std::sqrt(var / entries);
  c.coverage.resize(entries);
  double run = 0;
  for (int64_t e = 0; e < entries; ++e) {
    if (counts[e] > limit) ++c.hot;
    run += counts[e];
    c.coverage[e] = total > 0 ? run / total : 0;
  }
  c.n_reg = std::min(entries, reg_bytes / entry_bytes);
  c.n_shared = std::min(entries - c.n_reg, smem_bytes / entry_bytes);
  auto cov = [&](int64_t n) { return n > 0 ? c.coverage[n - 1] : 0.0; };
  c.share_reg = cov(c.n_reg);
  c.share_shared = cov(c.n_reg + c.n_shared) - c.share_reg;
  c.share_global = 1.0 - c.share_reg - c.share_shared;
  if (total <= 0) c.share_global = 0;
  return c;
}

}  // namespace kvlab
