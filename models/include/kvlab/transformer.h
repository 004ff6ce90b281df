// The Llama-family decoder both checkpoint kinds run through (llama2.c and Hugging Face): RMSNorm,
// attention with RoPE and GQA (optional q/k/v/o biases), SwiGLU feed-forward (optional biases),
// classifier; fp32 throughout. A block of tokens is processed as a whole sequence (batched
// matrix products), the KV cache keeps earlier blocks, and every position's q, k (before and
// after RoPE) and v are kept for the dump.
#pragma once
#include <cstdint>
#include <vector>

#include "kvlab/dump.h"
#include "kvlab/method.h"

namespace kvlab {

struct TransformerConfig {
  int64_t dim = 0;         // model width
  int64_t hidden_dim = 0;  // SwiGLU width
  int64_t n_layers = 0;
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when fewer than n_heads)
  int64_t head_dim = 0;    // need not be dim / n_heads
  int64_t vocab_size = 0;
  float norm_eps = 1e-5f;  // RMSNorm epsilon
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::Adjacent;  // adjacent (llama2.c) or halves (Hugging Face)
};

// fp32 weights, each matrix (out, in) row-major; the runner does not own them. Bias pointers
// are null when the model has none.
struct LayerWeights {
  const float *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const float *ffn_norm = nullptr, *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
  const float *b_gate = nullptr, *b_up = nullptr, *b_down = nullptr;
};

struct TransformerWeights {
  TransformerConfig config;
  const float* embedding = nullptr;  // (vocab, dim)
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr;
  const float* classifier = nullptr;  // (vocab, dim); the embedding when tied
};

// A KV method simulated decode-faithfully (kvlab ppl; docs/FORMATS.md section 12): the cache
// holds fp16 K and V, and query position t of a quantized layer sees each head as the method
// holds it after t + 1 tokens (kvlab/decode_view.h), whatever the block size.
struct CacheSimulation {
  MethodPtr method;          // must be decodable (check_decodable); plan: each layer its own rule
  std::vector<bool> layers;  // layers whose cache is quantized; empty: all
};

// Runs blocks of tokens in order, each attending to every earlier position. Results do not
// depend on the thread count (work is split in fixed blocks).
class TransformerRunner {
 public:
  // Room for `max_tokens` positions in the cache.
  TransformerRunner(const TransformerWeights& w, int64_t max_tokens);
  // Simulate a KV method from the next forward on (set before the first). Throws
  // std::invalid_argument for a method without a decode rule or a layer list of another length.
  void simulate(CacheSimulation sim);

  // Forwards tokens[0..n) at positions pos()..pos()+n. Writes the logits of the last
  // `logit_rows` of them (row-major, logit_rows x vocab) into `logits`. Throws
  // std::out_of_range for a token outside the vocabulary or more than max_tokens positions.
  void forward(const int32_t* tokens, int64_t n, int64_t logit_rows, std::vector<float>& logits);
  int64_t pos() const { return pos_; }

  // q (n_heads, pos(), head_dim), k, v, k_pre_rope (n_kv_heads, pos(), head_dim) of a layer.
  LayerKV captured(int64_t layer) const;

 private:
  void attention_block(int64_t layer, int64_t p0, int64_t n, float* out) const;
  bool quantized(int64_t layer) const;
  // Simulation: rounds the block's k, v (and pre-RoPE k) to fp16 and rebuilds the layer's
  // quantized bytes.
  void quantize_cache(int64_t layer, int64_t p0, int64_t n);
  void simulated_attention(int64_t layer, int64_t p0, int64_t n, float* out) const;
  const TransformerWeights& w_;
  int64_t max_tokens_, pos_ = 0;
  // Per layer, head-major (heads, max_tokens, head_dim): the cache is the capture.
  std::vector<std::vector<float>> q_, k_, v_, k_pre_;
  CacheSimulation sim_;
  bool simulating_ = false;
  std::vector<bool> quantizes_;              // per layer: its method ever quantizes a token
  std::vector<std::vector<float>> kq_, vq_;  // decode_final of each quantized layer, head-major
};

// cos and sin of position `pos` times each pair's frequency, theta^(-2i/head_dim), i < head_dim/2,
// in fp32 as run.c and transformers compute them.
void rope_cos_sin(float theta, int64_t head_dim, int64_t pos, float* cos_out, float* sin_out);

}  // namespace kvlab
