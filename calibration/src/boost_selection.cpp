// Boost-channel selectors; see boost_selection.h.
#include "kvlab/boost_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace kvlab {
namespace {

// The k largest of score[0..D), ties to the lower index, returned ascending.
void top_channels(const double* score, int64_t D, int64_t k, int32_t* out) {
  std::vector<int32_t> order(D);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::sort(order.begin(), order.begin() + k);
  std::copy_n(order.begin(), k, out);
}

// Page scores of one (head, page): rows [t0, t0 + G) of a (n, D) head.
void page_scores(Selector s, const float* x, int64_t G, int64_t D, double* score) {
  if (s == Selector::Magnitude) {
    // fp32 sums in token order, as core's ranking (the same ties)
    std::vector<float> sum(D, 0.0f);
    for (int64_t t = 0; t < G; ++t)
      for (int64_t c = 0; c < D; ++c) sum[c] += std::fabs(x[t * D + c]);
    for (int64_t c = 0; c < D; ++c) score[c] = sum[c];
    return;
  }
  for (int64_t c = 0; c < D; ++c) {  // Variance: two passes in double
    double mean = 0, var = 0;
    for (int64_t t = 0; t < G; ++t) mean += x[t * D + c];
    mean /= (double)G;
    for (int64_t t = 0; t < G; ++t) var += (x[t * D + c] - mean) * (x[t * D + c] - mean);
    score[c] = var;
  }
}

}  // namespace

Selector parse_selector(const std::string& name) {
  if (const auto s = find_enum<Selector>(name)) return *s;
  throw std::invalid_argument("--selectors: unknown selector '" + name +
                              "'; valid: " + enum_choices<Selector>());
}

std::vector<Selector> parse_selectors(const std::string& list) {
  std::vector<Selector> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw std::invalid_argument("--selectors: empty item in '" + list + "'");
    const Selector s = parse_selector(item);
    if (std::find(out.begin(), out.end(), s) != out.end())
      throw std::invalid_argument("--selectors: '" + item + "' is listed twice");
    out.push_back(s);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<int32_t> select_boost_channels(Selector s, const Tensor& keys, int64_t G, int64_t k,
                                           uint64_t seed, const std::vector<double>& static_scores,
                                           int64_t first_head) {
  if (keys.shape.size() != 3) throw std::invalid_argument("select_boost_channels: keys must be (H, n, D)");
  const int64_t H = keys.shape[0], n = keys.shape[1], D = keys.shape[2];
  if (G < 1 || n % G != 0)
    throw std::invalid_argument("select_boost_channels: group " + std::to_string(G) +
                                " does not divide the " + std::to_string(n) + " quantized tokens");
  if (k < 0 || k > D)
    throw std::invalid_argument("select_boost_channels: k=" + std::to_string(k) + " is outside [0, " +
                                std::to_string(D) + "]");
  if (is_static(s) && (int64_t)static_scores.size() != H * D)
    throw std::invalid_argument(std::string("select_boost_channels: ") + to_string(s) + " needs " +
                                std::to_string(H * D) + " scores, got " +
                                std::to_string(static_scores.size()));
  const int64_t P = n / G;
  std::vector<int32_t> out(H * P * k);
  if (k == 0) return out;  // nothing to choose (a sweep's rate 0); &out[0] of the empty vector is UB
  std::vector<double> score(D);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p) {
      int32_t* row = &out[(h * P + p) * k];
      if (is_static(s)) {
        top_channels(&static_scores[h * D], D, k, row);
      } else if (s == Selector::Random) {
        // one stream per (seed, head, page): a page's choice does not depend on the others
        std::seed_seq seq{(uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)(first_head + h), (uint32_t)p};
        std::mt19937_64 rng(seq);
        std::vector<int32_t> c(D);
        std::iota(c.begin(), c.end(), 0);
        for (int64_t i = 0; i < k; ++i)  // partial Fisher-Yates
          std::swap(c[i], c[i + std::uniform_int_distribution<int64_t>(0, D - 1 - i)(rng)]);
        std::sort(c.begin(), c.begin() + k);
        std::copy_n(c.begin(), k, row);
      } else {
        page_scores(s, &keys.data[(h * n + p * G) * D], G, D, score.data());
        top_channels(score.data(), D, k, row);
      }
    }
  return out;
}

}  // namespace kvlab
