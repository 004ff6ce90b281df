#include "kvlab/synthetic.h"

#include <cmath>
#include <random>

#include "kvlab/half.h"

namespace kvlab {
namespace {

// Box-Muller over mt19937_64 bits: portable (std::normal_distribution is not).
struct Gauss {
  std::mt19937_64 rng;
  explicit Gauss(uint64_t seed) : rng(seed) {}
  double uniform() { return ((rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double operator()() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  }
};

}  // namespace

SyntheticKV synthetic_kv(const SyntheticParams& p) {
  const int64_t H = p.heads, T = p.tokens, D = p.head_dim;
  SyntheticKV out;
  out.k.shape = out.v.shape = {H, T, D};
  out.k.data.resize(H * T * D);
  out.v.data.resize(H * T * D);
  Gauss g(p.seed * 0x9E3779B97F4A7C15ull + 1);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> mag(D), bias(D);
    for (int64_t c = 0; c < D; ++c) {
      const bool outlier = g.uniform() < p.outlier_share;
      mag[c] = (outlier ? p.outlier_scale : 1.0) * (0.5 + g.uniform());
      bias[c] = 0.5 * g() * mag[c];
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < D; c += 2) {
        // keys: a per-channel mean plus noise, rotated pairwise by a RoPE-like angle
        const double theta = t * std::pow(10000.0, -(double)c / D);
        const double a = bias[c] + 0.3 * mag[c] * g(), b = bias[c + 1 < D ? c + 1 : c] + 0.3 * mag[c] * g();
        const double ca = std::cos(theta), sa = std::sin(theta);
        out.k.data[(h * T + t) * D + c] = round_to_half((float)(a * ca - b * sa));
        if (c + 1 < D) out.k.data[(h * T + t) * D + c + 1] = round_to_half((float)(a * sa + b * ca));
      }
    for (int64_t i = 0; i < T * D; ++i) out.v.data[h * T * D + i] = round_to_half((float)g());
  }
  return out;
}

}  // namespace kvlab
