// run.c's transformer step in fp32: RMSNorm, attention with RoPE on adjacent pairs and GQA,
// SwiGLU feed-forward, classifier. Sums run in run.c's order so greedy text matches it.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kvlab/llama2c.h"

namespace kvlab {
namespace {

// out = weight * x / sqrt(mean(x^2) + 1e-5)
void rmsnorm(float* out, const float* x, const float* weight, int n) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss = 1.0f / std::sqrt(ss / (float)n + 1e-5f);
  for (int j = 0; j < n; ++j) out[j] = weight[j] * (ss * x[j]);
}

// out (rows) = W (rows, cols) @ x (cols). Rows are independent, so threads change no bits.
void matmul(float* out, const float* x, const float* w, int cols, int rows) {
#pragma omp parallel for if ((long)rows * cols >= (1L << 18))
  for (int i = 0; i < rows; ++i) {
    const float* row = w + (size_t)i * cols;
    float s = 0.0f;
    for (int j = 0; j < cols; ++j) s += row[j] * x[j];
    out[i] = s;
  }
}

void softmax(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

// Rotate pairs (2i, 2i+1) of each head by pos * 10000^(-2i/head_dim), as run.c computes it.
void rope(float* v, int n, int head_dim, int pos) {
  for (int i = 0; i < n; i += 2) {
    const float freq = 1.0f / std::pow(10000.0f, (float)(i % head_dim) / (float)head_dim);
    const float angle = (float)pos * freq, c = std::cos(angle), s = std::sin(angle);
    const float a = v[i], b = v[i + 1];
    v[i] = a * c - b * s;
    v[i + 1] = a * s + b * c;
  }
}

}  // namespace

Llama2cRunner::Llama2cRunner(const Llama2cModel& model) : m_(model) {
  const Llama2cConfig& c = m_.config;
  const size_t q_dim = (size_t)c.n_heads * c.head_dim();
  x_.resize(c.dim);
  xb_.resize(std::max<size_t>(c.dim, q_dim));
  xb2_.resize(c.dim);
  hb_.resize(c.hidden_dim);
  hb2_.resize(c.hidden_dim);
  q_.resize(q_dim);
  att_.resize((size_t)c.n_heads * c.seq_len);
  logits_.resize(c.vocab_size);
  key_cache_.resize((size_t)c.n_layers * c.seq_len * c.kv_dim());
  value_cache_.resize(key_cache_.size());
}

const std::vector<float>& Llama2cRunner::forward(int32_t token, int32_t pos, Llama2cCapture* capture) {
  const Llama2cConfig& c = m_.config;
  if (token < 0 || token >= c.vocab_size)
    throw std::out_of_range("llama2.c forward: token " + std::to_string(token) + " outside [0, " +
                            std::to_string(c.vocab_size) + ")");
  if (pos < 0 || pos >= c.seq_len)
    throw std::out_of_range("llama2.c forward: position " + std::to_string(pos) + " outside [0, seq_len " +
                            std::to_string(c.seq_len) + ")");
  const int dim = c.dim, hd = c.head_dim(), kv_dim = c.kv_dim(), q_dim = c.n_heads * hd,
            hidden = c.hidden_dim;
  const int kv_mul = c.n_heads / c.n_kv_heads;
  const float* w = m_.weights.data();
  if (capture && capture->q.size() != (size_t)c.n_layers) {
    capture->q.resize(c.n_layers);
    capture->k.resize(c.n_layers);
    capture->k_pre_rope.resize(c.n_layers);
    capture->v.resize(c.n_layers);
  }

  std::copy_n(w + m_.token_embedding + (size_t)token * dim, dim, x_.begin());
  for (int l = 0; l < c.n_layers; ++l) {
    rmsnorm(xb_.data(), x_.data(), w + m_.rms_att + (size_t)l * dim, dim);
    float* k = key_cache_.data() + ((size_t)l * c.seq_len + pos) * kv_dim;
    float* v = value_cache_.data() + ((size_t)l * c.seq_len + pos) * kv_dim;
    matmul(q_.data(), xb_.data(), w + m_.wq + (size_t)l * q_dim * dim, dim, q_dim);
    matmul(k, xb_.data(), w + m_.wk + (size_t)l * kv_dim * dim, dim, kv_dim);
    matmul(v, xb_.data(), w + m_.wv + (size_t)l * kv_dim * dim, dim, kv_dim);
    if (capture) capture->k_pre_rope[l].insert(capture->k_pre_rope[l].end(), k, k + kv_dim);
    rope(q_.data(), q_dim, hd, pos);
    rope(k, kv_dim, hd, pos);
    if (capture) {
      capture->q[l].insert(capture->q[l].end(), q_.begin(), q_.end());
      capture->k[l].insert(capture->k[l].end(), k, k + kv_dim);
      capture->v[l].insert(capture->v[l].end(), v, v + kv_dim);
    }

    // Attention over positions 0..pos; query head h reads KV head h / kv_mul.
    const float inv_sqrt = 1.0f / std::sqrt((float)hd);
    for (int h = 0; h < c.n_heads; ++h) {
      const float* qh = q_.data() + (size_t)h * hd;
      float* att = att_.data() + (size_t)h * c.seq_len;
      const size_t kv_off = (size_t)l * c.seq_len * kv_dim + (size_t)(h / kv_mul) * hd;
      for (int t = 0; t <= pos; ++t) {
        const float* kt = key_cache_.data() + kv_off + (size_t)t * kv_dim;
        float s = 0.0f;
        for (int i = 0; i < hd; ++i) s += qh[i] * kt[i];
        att[t] = s * inv_sqrt;
      }
      softmax(att, pos + 1);
      float* out = xb_.data() + (size_t)h * hd;
      std::fill_n(out, hd, 0.0f);
      for (int t = 0; t <= pos; ++t) {
        const float* vt = value_cache_.data() + kv_off + (size_t)t * kv_dim;
        for (int i = 0; i < hd; ++i) out[i] += att[t] * vt[i];
      }
    }
    matmul(xb2_.data(), xb_.data(), w + m_.wo + (size_t)l * dim * q_dim, q_dim, dim);
    for (int i = 0; i < dim; ++i) x_[i] += xb2_[i];

    // SwiGLU: w2 (silu(w1 x) * w3 x)
    rmsnorm(xb_.data(), x_.data(), w + m_.rms_ffn + (size_t)l * dim, dim);
    matmul(hb_.data(), xb_.data(), w + m_.w1 + (size_t)l * hidden * dim, dim, hidden);
    matmul(hb2_.data(), xb_.data(), w + m_.w3 + (size_t)l * hidden * dim, dim, hidden);
    for (int i = 0; i < hidden; ++i) hb_[i] = hb_[i] * (1.0f / (1.0f + std::exp(-hb_[i]))) * hb2_[i];
    matmul(xb_.data(), hb_.data(), w + m_.w2 + (size_t)l * dim * hidden, hidden, dim);
    for (int i = 0; i < dim; ++i) x_[i] += xb_[i];
  }
  rmsnorm(x_.data(), x_.data(), w + m_.rms_final, dim);
  matmul(logits_.data(), x_.data(), w + m_.wcls, dim, c.vocab_size);
  return logits_;
}

}  // namespace kvlab
