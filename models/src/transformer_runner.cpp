// One forward over a block of positions: embeddings, the layers (attention, SwiGLU), the
// classifier for the last rows. q, k (before and after RoPE) and v stay in head-major buffers
// that are both the KV cache and the capture.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kvlab/transformer.h"
#include "transformer_math.h"

namespace kvlab {

using detail::matmul_nt;
using detail::rmsnorm_rows;

TransformerRunner::TransformerRunner(const TransformerWeights& w, int64_t max_tokens)
    : w_(w), max_tokens_(max_tokens) {
  const TransformerConfig& c = w.config;
  if (max_tokens <= 0) throw std::invalid_argument("max_tokens must be > 0");
  const size_t kv = (size_t)(c.n_kv_heads * max_tokens * c.head_dim);
  q_.assign(c.n_layers, std::vector<float>((size_t)(c.n_heads * max_tokens * c.head_dim)));
  k_.assign(c.n_layers, std::vector<float>(kv));
  v_.assign(c.n_layers, std::vector<float>(kv));
  k_pre_.assign(c.n_layers, std::vector<float>(kv));
}

namespace {

// Row r of a position-major block (n, heads * D) into head-major storage (heads, max_T, D).
void scatter_row(std::vector<float>& dst, const float* row, int64_t heads, int64_t max_tokens, int64_t D,
                 int64_t pos) {
  for (int64_t h = 0; h < heads; ++h) std::copy_n(row + h * D, D, dst.data() + (h * max_tokens + pos) * D);
}

}  // namespace

void TransformerRunner::forward(const int32_t* tokens, int64_t n, int64_t logit_rows,
                                std::vector<float>& logits) {
  const TransformerConfig& c = w_.config;
  if (n <= 0) throw std::invalid_argument("forward: no tokens");
  if (pos_ + n > max_tokens_)
    throw std::out_of_range("forward: positions up to " + std::to_string(pos_ + n) + " exceed the " +
                            std::to_string(max_tokens_) + " the runner was made for");
  if (logit_rows < 0 || logit_rows > n)
    throw std::invalid_argument("forward: logit_rows " + std::to_string(logit_rows) + " outside [0, " +
                                std::to_string(n) + "]");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw std::out_of_range("token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(pos_ + i) + " outside the vocabulary [0, " +
                              std::to_string(c.vocab_size) + ")");
  const int64_t dim = c.dim, D = c.head_dim, q_dim = c.n_heads * D, kv_dim = c.n_kv_heads * D,
                hidden = c.hidden_dim, p0 = pos_;

  std::vector<float> x((size_t)(n * dim)), xb(x.size()), q((size_t)(n * q_dim)), k((size_t)(n * kv_dim)),
      v(k.size()), att(q.size()), gate((size_t)(n * hidden)), up(gate.size());
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(w_.embedding + (int64_t)tokens[i] * dim, dim, x.data() + i * dim);
  std::vector<float> cos((size_t)(n * D / 2)), sin(cos.size());
  for (int64_t i = 0; i < n; ++i)
    rope_cos_sin(c.rope_theta, D, p0 + i, cos.data() + i * D / 2, sin.data() + i * D / 2);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    rmsnorm_rows(xb.data(), x.data(), L.attn_norm, n, dim, c.norm_eps);
    matmul_nt(q.data(), xb.data(), L.wq, L.bq, n, dim, q_dim);
    matmul_nt(k.data(), xb.data(), L.wk, L.bk, n, dim, kv_dim);
    matmul_nt(v.data(), xb.data(), L.wv, L.bv, n, dim, kv_dim);
    for (int64_t i = 0; i < n; ++i) {
      float* qi = q.data() + i * q_dim;
      float* ki = k.data() + i * kv_dim;
      scatter_row(k_pre_[l], ki, c.n_kv_heads, max_tokens_, D, p0 + i);
      scatter_row(v_[l], v.data() + i * kv_dim, c.n_kv_heads, max_tokens_, D, p0 + i);
      detail::rope_row(qi, c.n_heads, D, c.rope_style, cos.data() + i * D / 2, sin.data() + i * D / 2);
      detail::rope_row(ki, c.n_kv_heads, D, c.rope_style, cos.data() + i * D / 2, sin.data() + i * D / 2);
      scatter_row(q_[l], qi, c.n_heads, max_tokens_, D, p0 + i);
      scatter_row(k_[l], ki, c.n_kv_heads, max_tokens_, D, p0 + i);
    }
    if (simulating_) quantize_cache(l, p0, n);
    if (quantized(l))
      simulated_attention(l, p0, n, att.data());
    else
      attention_block(l, p0, n, att.data());
    matmul_nt(xb.data(), att.data(), L.wo, L.bo, n, q_dim, dim);
    for (size_t j = 0; j < x.size(); ++j) x[j] += xb[j];

    // SwiGLU: down(silu(gate(x)) * up(x))
    rmsnorm_rows(xb.data(), x.data(), L.ffn_norm, n, dim, c.norm_eps);
    matmul_nt(gate.data(), xb.data(), L.w_gate, L.b_gate, n, dim, hidden);
    matmul_nt(up.data(), xb.data(), L.w_up, L.b_up, n, dim, hidden);
    for (size_t j = 0; j < gate.size(); ++j) gate[j] = gate[j] * (1.0f / (1.0f + std::exp(-gate[j]))) * up[j];
    matmul_nt(xb.data(), gate.data(), L.w_down, L.b_down, n, hidden, dim);
    for (size_t j = 0; j < x.size(); ++j) x[j] += xb[j];
  }
  pos_ += n;

  const float* last = x.data() + (n - logit_rows) * dim;
  rmsnorm_rows(xb.data(), last, w_.final_norm, logit_rows, dim, c.norm_eps);
  logits.resize((size_t)(logit_rows * c.vocab_size));
  matmul_nt(logits.data(), xb.data(), w_.classifier, nullptr, logit_rows, dim, c.vocab_size);
}

LayerKV TransformerRunner::captured(int64_t layer) const {
  const TransformerConfig& c = w_.config;
  const int64_t D = c.head_dim;
  auto take = [&](const std::vector<float>& src, int64_t heads) {
    Tensor t;
    t.shape = {heads, pos_, D};
    t.data.resize((size_t)(heads * pos_ * D));
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(src.data() + h * max_tokens_ * D, pos_ * D, t.data.data() + h * pos_ * D);
    return t;
  };
  return {take(q_.at(layer), c.n_heads), take(k_.at(layer), c.n_kv_heads), take(v_.at(layer), c.n_kv_heads),
          take(k_pre_.at(layer), c.n_kv_heads)};
}

}  // namespace kvlab
