// A random attention unit for the GPU tests: 4 query heads on one KV head, keys with outlier
// channels, two caches (K_hat, V_hat perturbed by 5% and 50% noise), every third position.
#pragma once
#include <random>
#include <vector>

#include "kvlab/attention_unit.h"

namespace evgpu {

struct UnitData {
  int64_t heads = 4, T = 700, D = 64;
  std::vector<float> q, k, v, dk[2], vh[2];
  std::vector<int64_t> pos;
  kvlab::AttentionUnit unit;

  explicit UnitData(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t t = 0; t < T; t += 3) pos.push_back(t);
    pos.push_back(T - 1);
    const int64_t N = pos.size();
    q.resize(heads * N * D);
    for (auto& x : q) x = 0.4f * nd(rng);  // already scaled (1/sqrt(D) = 1/8) and a bit more
    for (auto* t : {&k, &v}) t->resize(T * D);
    for (int64_t j = 0; j < T; ++j)
      for (int64_t d = 0; d < D; ++d) {
        k[j * D + d] = nd(rng) * (d % 16 == 5 ? 6.0f : 1.0f);
        v[j * D + d] = nd(rng);
      }
    const float noise[2] = {0.05f, 0.5f};
    for (int m = 0; m < 2; ++m) {
      dk[m].resize(T * D);
      vh[m].resize(T * D);
      for (int64_t i = 0; i < T * D; ++i) {
        dk[m][i] = noise[m] * nd(rng) * std::abs(k[i]);
        vh[m][i] = v[i] * (1.0f + noise[m] * nd(rng));
      }
    }
    unit.q = q.data();
    unit.heads = heads;
    unit.N = N;
    unit.D = D;
    unit.pos = pos.data();
    unit.k = k.data();
    unit.v = v.data();
    for (int m = 0; m < 2; ++m) unit.methods.push_back({dk[m].data(), vh[m].data()});
  }
};

}  // namespace evgpu
