// A llama2.c model through the shared decoder: its weights as TransformerWeights, and run.c's
// generation (BOS first, stop when the model chooses BOS, at most seq_len positions).
#include <stdexcept>

#include "kvlab/llama2c.h"

namespace kvlab {

TransformerWeights llama2c_weights(const Llama2cModel& m) {
  const Llama2cConfig& c = m.config;
  TransformerWeights w;
  TransformerConfig& t = w.config;
  t.dim = c.dim;
  t.hidden_dim = c.hidden_dim;
  t.n_layers = c.n_layers;
  t.n_heads = c.n_heads;
  t.n_kv_heads = c.n_kv_heads;
  t.head_dim = c.head_dim();
  t.vocab_size = c.vocab_size;
  t.norm_eps = 1e-5f;  // run.c's constants
  t.rope_theta = 10000.0f;
  t.rope_style = RopeStyle::Adjacent;
  const float* f = m.weights.data();
  const size_t dim = c.dim, hidden = c.hidden_dim, q_dim = (size_t)c.n_heads * c.head_dim(),
               kv_dim = c.kv_dim();
  for (size_t l = 0; l < (size_t)c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = f + m.rms_att + l * dim;
    L.wq = f + m.wq + l * q_dim * dim;
    L.wk = f + m.wk + l * kv_dim * dim;
    L.wv = f + m.wv + l * kv_dim * dim;
    L.wo = f + m.wo + l * dim * q_dim;
    L.ffn_norm = f + m.rms_ffn + l * dim;
    L.w_gate = f + m.w1 + l * hidden * dim;  // run.c: w2(silu(w1 x) * w3 x)
    L.w_down = f + m.w2 + l * dim * hidden;
    L.w_up = f + m.w3 + l * hidden * dim;
    w.layers.push_back(L);
  }
  w.embedding = f + m.token_embedding;
  w.final_norm = f + m.rms_final;
  w.classifier = f + m.wcls;
  return w;
}

Generation llama2c_generate(const Llama2cModel& model, const Llama2cTokenizer& tokenizer,
                            const std::string& prompt, const GenerateParams& params) {
  const Llama2cConfig& c = model.config;
  if (tokenizer.size() != c.vocab_size)
    throw std::invalid_argument("the tokenizer has " + std::to_string(tokenizer.size()) +
                                " tokens, the model '" + model.path + "' " + std::to_string(c.vocab_size));
  const std::vector<int32_t> ids = tokenizer.encode(prompt, /*bos=*/true);
  if ((int64_t)ids.size() > c.seq_len)
    throw std::invalid_argument("the prompt is " + std::to_string(ids.size()) +
                                " tokens (BOS included), longer than the model's seq_len " +
                                std::to_string(c.seq_len) + " ('" + model.path + "')");
  Generation g = generate(llama2c_weights(model), ids, params, {Llama2cTokenizer::kBos}, c.seq_len,
                          /*all_logits=*/false, "'" + model.path + "'");
  g.text = tokenizer.decode_all(g.tokens);
  return g;
}

}  // namespace kvlab
