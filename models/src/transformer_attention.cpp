// Causal attention of a block of queries against the cache: per query head and block of 64
// query rows, S = Q K^T / sqrt(D) over the keys up to the block's last position, masked,
// softmax, times V. Query head h reads KV head h / (n_heads / n_kv_heads).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "kvlab/transformer.h"

namespace kvlab {

void TransformerRunner::attention_block(int64_t layer, int64_t p0, int64_t n, float* out) const {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMajor>;
  using StridedMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
  const TransformerConfig& c = w_.config;
  const int64_t D = c.head_dim, group = c.n_heads / c.n_kv_heads, q_dim = c.n_heads * D;
  constexpr int64_t kRows = 64;  // query rows per task; fixed, so threads change no bits
  const int64_t row_blocks = (n + kRows - 1) / kRows, tasks = c.n_heads * row_blocks;
  const float scale = 1.0f / std::sqrt((float)D);
  // Threads only pay off on real work (a prompt block, a long cache).
#pragma omp parallel for schedule(dynamic) if (c.n_heads * n * (p0 + n) * D >= (1L << 18))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t h = task / row_blocks, r0 = (task % row_blocks) * kRows, rows = std::min(kRows, n - r0);
    const int64_t keys = p0 + r0 + rows;  // the last query of the block sees this many positions
    const float* Q = q_[layer].data() + (h * max_tokens_ + p0 + r0) * D;
    const float* K = k_[layer].data() + (h / group) * max_tokens_ * D;
    const float* V = v_[layer].data() + (h / group) * max_tokens_ * D;
    RowMajor S = ConstMap(Q, rows, D) * ConstMap(K, keys, D).transpose();
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t seen = p0 + r0 + i + 1;  // causal: keys 0..position
      float* s = S.data() + i * keys;
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t j = 0; j < seen; ++j) mx = std::max(mx, s[j] *= scale);
      for (int64_t j = 0; j < seen; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < seen; ++j) s[j] /= sum;
      std::fill(s + seen, s + keys, 0.0f);
    }
    StridedMap O(out + r0 * q_dim + h * D, rows, D, Eigen::OuterStride<>(q_dim));
    O.noalias() = S * ConstMap(V, keys, D);
  }
}

}  // namespace kvlab
