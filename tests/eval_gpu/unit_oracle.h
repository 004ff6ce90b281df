// fp64 loops over one attention unit, straight from the definitions (no GEMMs, tiles, running
// maxima or series), on the unit's own inputs: the scaled fp32 queries and K - K_hat as given.
// The CUDA unit computes the same function in fp64, so the two agree to fp64 rounding.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kvlab/attention_unit.h"

namespace evgpu {

// Key positions of the kTopK largest values, ties to the earlier position (as topk.h).
inline std::vector<int64_t> top(const std::vector<double>& l) {
  std::vector<int64_t> idx(l.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  idx.resize(std::min<size_t>(kvlab::kTopK, idx.size()));
  return idx;
}

inline std::vector<double> softmax(const std::vector<double>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (double x : l) z += std::exp(x - m);
  std::vector<double> p(l.size());
  for (size_t j = 0; j < l.size(); ++j) p[j] = std::exp(l[j] - m) / z;
  return p;
}

inline std::vector<double> output(const std::vector<double>& p, const float* v, int64_t D) {
  std::vector<double> o(D, 0.0);
  for (size_t j = 0; j < p.size(); ++j)
    for (int64_t d = 0; d < D; ++d) o[d] += p[j] * v[j * D + d];
  return o;
}

inline kvlab::AttentionUnitResult unit_oracle(const kvlab::AttentionUnit& u) {
  const int64_t H = u.heads, N = u.N, D = u.D, M = u.methods.size();
  kvlab::AttentionUnitResult r;
  r.stats.assign(M, std::vector<kvlab::AttnStats>(H));
  r.ref_sq.assign(H, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float* q = u.q + (h * N + i) * D;
      const int64_t n = u.pos[i] + 1;
      auto dot = [&](const float* k, int64_t j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += (double)q[d] * k[j * D + d];
        return s;
      };
      std::vector<double> l(n);
      for (int64_t j = 0; j < n; ++j) l[j] = dot(u.k, j);
      const std::vector<double> p = softmax(l), o = output(p, u.v, D);
      double osq = 0;
      for (double x : o) osq += x * x;
      r.ref_sq[h] += osq;
      const std::vector<int64_t> tr = top(l);
      for (int64_t m = 0; m < M; ++m) {
        std::vector<double> lh(n);
        for (int64_t j = 0; j < n; ++j) lh[j] = l[j] - dot(u.methods[m].dk, j);
        const std::vector<double> ph = softmax(lh), oh = output(ph, u.methods[m].v_hat, D);
        kvlab::AttnStats& s = r.stats[m][h];
        for (int64_t j = 0; j < n; ++j) {
          s.score_sq_err += (p[j] - ph[j]) * (p[j] - ph[j]);
          s.kl_sum += p[j] * std::log(p[j] / ph[j]);
        }
        for (int64_t d = 0; d < D; ++d) s.out_sq_err += (o[d] - oh[d]) * (o[d] - oh[d]);
        s.out_sq_ref += osq;
        const std::vector<int64_t> tm = top(lh);
        int shared = 0;
        for (int64_t x : tr) shared += std::count(tm.begin(), tm.end(), x);
        s.topk_sum += (double)shared / (double)tr.size();
        s.score_count += n;
        s.queries += 1;
      }
    }
  return r;
}

}  // namespace evgpu
