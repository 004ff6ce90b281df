// Independent oracle for the eval tests: attention and its error metrics as plain double loops,
// straight from the definitions (no tiling, no shared maximum, no series), plus inputs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kvlab/metrics.h"
#include "kvlab/tensor.h"

namespace evtest {

using kvlab::Tensor;

inline Tensor normal(std::vector<int64_t> shape, uint32_t seed, float scale = 1.0f) {
  Tensor t;
  t.shape = std::move(shape);
  t.data.resize(kvlab::numel(t.shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  for (auto& v : t.data) v = nd(rng);
  return t;
}

// Keys like a real cache: per-channel magnitudes 0.1..3 and a few large outlier channels.
inline Tensor keys(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = normal(shape, seed);
  const int64_t D = t.shape.back();
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(0.1f, 3.0f);
  std::vector<float> mag(D);
  for (auto& m : mag) m = u(rng);
  for (int64_t c = 0; c < D; c += 16) mag[c] = 8.0f;
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] *= mag[i % D];
  return t;
}

struct Dims {
  int64_t Hq, Hkv, T, D;
  explicit Dims(const Tensor& q, const Tensor& k)
      : Hq(q.shape[0]), Hkv(k.shape[0]), T(k.shape[1]), D(k.shape[2]) {}
  int64_t kv_of(int64_t h) const { return h / (Hq / Hkv); }
};

// Logits of query head h at position t against keys 0..t, in double.
inline std::vector<double> logits(const Tensor& q, const Tensor& k, int64_t h, int64_t t) {
  const Dims d(q, k);
  const int64_t g = d.kv_of(h);
  std::vector<double> l(t + 1);
  for (int64_t s = 0; s <= t; ++s) {
    double dot = 0;
    for (int64_t c = 0; c < d.D; ++c)
      dot += (double)q.data[(h * d.T + t) * d.D + c] * k.data[(g * d.T + s) * d.D + c];
    l[s] = dot / std::sqrt((double)d.D);
  }
  return l;
}

inline double logsumexp(const std::vector<double>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (double x : l) z += std::exp(x - m);
  return m + std::log(z);
}

inline std::vector<double> output(const std::vector<double>& p, const Tensor& v, int64_t g, int64_t T,
                                  int64_t D) {
  std::vector<double> o(D, 0.0);
  for (size_t s = 0; s < p.size(); ++s)
    for (int64_t c = 0; c < D; ++c) o[c] += p[s] * v.data[(g * T + s) * D + c];
  return o;
}

// Reference outputs (Hq, N, D) in double.
inline std::vector<double> attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const std::vector<int64_t>& pos) {
  const Dims d(q, k);
  std::vector<double> out;
  for (int64_t h = 0; h < d.Hq; ++h)
    for (int64_t t : pos) {
      const auto l = logits(q, k, h, t);
      const double lse = logsumexp(l);
      std::vector<double> p(l.size());
      for (size_t s = 0; s < l.size(); ++s) p[s] = std::exp(l[s] - lse);
      const auto o = output(p, v, d.kv_of(h), d.T, d.D);
      out.insert(out.end(), o.begin(), o.end());
    }
  return out;
}

// Positions of the k largest logits, ties to the earlier position.
inline std::vector<int64_t> top(const std::vector<double>& l, int k) {
  std::vector<int64_t> idx(l.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  idx.resize(std::min<size_t>(k, idx.size()));
  return idx;
}

// The metrics of one query head, from their definitions.
inline kvlab::AttnStats errors(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kh,
                               const Tensor& vh, int64_t h, const std::vector<int64_t>& pos) {
  const Dims d(q, k);
  const int64_t g = d.kv_of(h);
  kvlab::AttnStats s;
  for (int64_t t : pos) {
    const auto l = logits(q, k, h, t), lh = logits(q, kh, h, t);
    const double lse = logsumexp(l), lseh = logsumexp(lh);
    std::vector<double> p(t + 1), ph(t + 1);
    double kl = 0;
    for (int64_t j = 0; j <= t; ++j) {
      p[j] = std::exp(l[j] - lse);
      ph[j] = std::exp(lh[j] - lseh);
      s.score_sq_err += (p[j] - ph[j]) * (p[j] - ph[j]);
      kl += p[j] * ((l[j] - lse) - (lh[j] - lseh));
    }
    const auto o = output(p, v, g, d.T, d.D), oh = output(ph, vh, g, d.T, d.D);
    for (int64_t c = 0; c < d.D; ++c) {
      s.out_sq_err += (o[c] - oh[c]) * (o[c] - oh[c]);
      s.out_sq_ref += o[c] * o[c];
    }
    const auto a = top(l, kvlab::kTopK), b = top(lh, kvlab::kTopK);
    int shared = 0;
    for (int64_t x : a) shared += std::count(b.begin(), b.end(), x);
    s.topk_sum += (double)shared / a.size();
    s.kl_sum += kl;
    s.score_count += t + 1;
    s.queries += 1;
  }
  return s;
}

}  // namespace evtest
