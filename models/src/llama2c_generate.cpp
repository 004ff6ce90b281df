// Generation: run the prompt, continue with the sampler, capture every position's q/k/v.
#include <algorithm>
#include <stdexcept>

#include "kvlab/llama2c.h"

namespace kvlab {
namespace {

// The capture is position-major (T, H, D) as the forward pass produces it; dumps are (H, T, D).
Tensor heads_first(const std::vector<float>& tphd, int64_t T, int64_t H, int64_t D) {
  Tensor out;
  out.shape = {H, T, D};
  out.data.resize((size_t)(H * T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(tphd.data() + (t * H + h) * D, D, out.data.data() + (h * T + t) * D);
  return out;
}

}  // namespace

Llama2cGeneration llama2c_generate(const Llama2cModel& model, const Llama2cTokenizer& tokenizer,
                                   const std::string& prompt, const Llama2cGenerateParams& params) {
  const Llama2cConfig& c = model.config;
  if (params.steps < 0)
    throw std::invalid_argument("steps must be >= 0, got " + std::to_string(params.steps));
  if (tokenizer.size() != c.vocab_size)
    throw std::invalid_argument("the tokenizer has " + std::to_string(tokenizer.size()) +
                                " tokens, the model '" + model.path + "' " + std::to_string(c.vocab_size));
  Llama2cSampler sampler(params.temperature, params.top_p, params.seed);

  Llama2cGeneration gen;
  gen.tokens = tokenizer.encode(prompt, /*bos=*/true);
  gen.prompt_tokens = (int32_t)gen.tokens.size();
  if (gen.prompt_tokens > c.seq_len)
    throw std::invalid_argument("the prompt is " + std::to_string(gen.prompt_tokens) +
                                " tokens (BOS included), longer than the model's seq_len " +
                                std::to_string(c.seq_len) + " ('" + model.path + "')");

  Llama2cRunner runner(model);
  Llama2cCapture cap;
  std::vector<float> logits;
  int32_t generated = 0;
  // Every token of the sequence is forwarded, the last generated one too, so the dump holds
  // the KV of exactly gen.tokens.
  for (int32_t pos = 0; pos < (int32_t)gen.tokens.size(); ++pos) {
    const std::vector<float>& out = runner.forward(gen.tokens[pos], pos, &cap);
    if (pos + 1 < (int32_t)gen.tokens.size()) continue;  // still inside the prompt
    if (generated == params.steps || (int32_t)gen.tokens.size() == c.seq_len) break;
    logits = out;
    const int32_t next = sampler.sample(logits);
    if (next == Llama2cTokenizer::kBos) {  // run.c ends the sequence here
      gen.stopped_on_bos = true;
      break;
    }
    gen.tokens.push_back(next);
    ++generated;
  }
  gen.text = tokenizer.decode_all(gen.tokens);

  const int64_t T = (int64_t)gen.tokens.size(), D = c.head_dim();
  gen.kv.resize(c.n_layers);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    gen.kv[l].q = heads_first(cap.q[l], T, c.n_heads, D);
    gen.kv[l].k = heads_first(cap.k[l], T, c.n_kv_heads, D);
    gen.kv[l].v = heads_first(cap.v[l], T, c.n_kv_heads, D);
    gen.kv[l].k_pre_rope = heads_first(cap.k_pre_rope[l], T, c.n_kv_heads, D);
  }
  return gen;
}

}  // namespace kvlab
